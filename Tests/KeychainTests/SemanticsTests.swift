import Foundation
@_spi(CallerRule) import Keychain
import Testing

// The SecItem rules of /work/shared/keychain-semantics.md, one rule per test, against a real
// vault file.

private let A = Schema.self
private func s(_ v: String) -> AttributeValue { .string(v) }

// MARK: - Primary keys and SecItemAdd

@Suite("Add and primary keys")
struct AddTests {
    @Test("genp: service + account is the key; other attributes are not")
    func genericPasswordKey() throws {
        try withVault { v throws in
            let kc = v.keychain
            try kc.add(.genericPassword, genp("svc", "alice"), data: bytes("one"))
            expectError(.duplicateItem) { try kc.add(.genericPassword, genp("svc", "alice"), data: bytes("two")) }
            expectError(.duplicateItem) {
                try kc.add(
                    .genericPassword, genp("svc", "alice", [A.label: s("another label"), .named("comment"): s("c")]),
                    data: bytes("three"))
            }
            try kc.add(.genericPassword, genp("svc", "bob"), data: bytes("b"))
            try kc.add(.genericPassword, genp("svc2", "alice"), data: bytes("c"))
            #expect(try secret(kc, "svc", "alice") == bytes("one"))
            #expect(try kc.itemCount() == 3)
        }
    }

    @Test("a missing account is the empty account: they collide")
    func missingAccountIsEmptyAccount() throws {
        try withVault { v throws in
            let kc = v.keychain
            let item = try kc.add(.genericPassword, genp("svc"), data: bytes("x"))
            #expect(item[A.account] == s(""))
            expectError(.duplicateItem) { try kc.add(.genericPassword, genp("svc", ""), data: bytes("y")) }
            expectError(.duplicateItem) { try kc.add(.genericPassword, genp("svc"), data: bytes("z")) }
            #expect(try secret(kc, "svc", "") == bytes("x"))
            // Naming the empty account in a query finds the item added without one.
            let found = try kc.find(Query(.genericPassword, genp("svc", "")))
            #expect(found.id == item.id)
            #expect(try kc.itemCount() == 1)
        }
    }

    @Test("inet: server, account, protocol, port, path, securityDomain, authenticationType are the key")
    func internetPasswordKey() throws {
        try withVault { v throws in
            let kc = v.keychain
            let base: Attributes = [
                A.server: s("example.com"), A.account: s("alice"), A.protocolAttribute: s("htps"),
                A.port: .number(443), A.path: s("/repo"), A.securityDomain: s("realm"),
                A.authenticationType: s("dflt"),
            ]
            try kc.add(.internetPassword, base, data: bytes("base"))
            expectError(.duplicateItem) { try kc.add(.internetPassword, base, data: bytes("again")) }
            var withLabel = base
            withLabel[A.label] = s("not part of the key")
            expectError(.duplicateItem) { try kc.add(.internetPassword, withLabel, data: bytes("again")) }

            let variants: [(Attribute, AttributeValue)] = [
                (A.server, s("example.org")), (A.account, s("bob")), (A.protocolAttribute, s("http")),
                (A.port, .number(8443)), (A.path, s("/other")), (A.securityDomain, s("realm2")),
                (A.authenticationType, s("form")),
            ]
            for (attribute, value) in variants {
                var changed = base
                changed[attribute] = value
                try kc.add(.internetPassword, changed, data: bytes(attribute.name))
                expectError(.duplicateItem) { try kc.add(.internetPassword, changed, data: bytes("dup")) }
            }
            #expect(try kc.itemCount() == 1 + variants.count)
            let all = try kc.copyMatching(Query(.internetPassword, matchLimit: .all))
            #expect(all.count == 1 + variants.count)

            // Missing key attributes are their empty values: no port is port 0, no path is "".
            try kc.add(.internetPassword, [A.server: s("bare.example"), A.account: s("a")], data: [])
            expectError(.duplicateItem) {
                try kc.add(
                    .internetPassword,
                    [
                        A.server: s("bare.example"), A.account: s("a"), A.port: .number(0),
                        A.path: s(""), A.protocolAttribute: s(""),
                    ], data: [])
            }
        }
    }

    // Certificates: see CertificateTests.certificateKey (their key comes from real DER).
    @Test(
        "access group and synchronizable are part of every class's key",
        arguments: [
            ItemClass.genericPassword, .internetPassword, .key,
        ])
    func groupAndSyncInEveryKey(_ itemClass: ItemClass) throws {
        let caller = Caller(accessGroups: ["g1", "g2"])
        let base: Attributes
        switch itemClass {
        case .genericPassword: base = genp("svc", "acct")
        case .internetPassword: base = [A.server: s("host"), A.account: s("acct")]
        default:
            base = [
                .named("keyClass"): .number(1), .named("applicationLabel"): .data([9, 9]),
                .named("keyType"): .number(73),
            ]
        }
        try withVault { v throws in
            let kc = v.keychain
            var g1 = base; g1[A.accessGroup] = s("g1")
            var g2 = base; g2[A.accessGroup] = s("g2")
            var g1Sync = g1; g1Sync[A.synchronizable] = .bool(true)
            try kc.add(itemClass, g1, data: bytes("g1"), caller: caller)
            try kc.add(itemClass, g2, data: bytes("g2"), caller: caller)
            try kc.add(itemClass, g1Sync, data: bytes("g1-sync"), caller: caller)
            for attrs in [g1, g2, g1Sync, base] {
                expectError(.duplicateItem) { try kc.add(itemClass, attrs, data: bytes("dup"), caller: caller) }
            }
            let all = try kc.copyMatching(
                Query(itemClass, matchLimit: .all, returnData: true, synchronizableAny: true), caller: caller)
            #expect(
                Set(all.compactMap { $0.data.map { String(decoding: $0, as: UTF8.self) } }) == ["g1", "g2", "g1-sync"])
        }
    }

    @Test("keys: every key attribute is part of the key")
    func keyClassKey() throws {
        try withVault { v throws in
            let kc = v.keychain
            let base: Attributes = [
                .named("keyClass"): .number(1), .named("applicationLabel"): .data([1]),
                .named("applicationTag"): .data(bytes("tag")), .named("keyType"): .number(42),
                .named("keySizeInBits"): .number(2048), .named("effectiveKeySize"): .number(2048),
                .named("creator"): .number(7), .named("startDate"): .date(Date(timeIntervalSince1970: 1000)),
                .named("endDate"): .date(Date(timeIntervalSince1970: 2000)),
            ]
            try kc.add(.key, base, data: bytes("k"))
            var labelled = base; labelled[A.label] = s("label is not key")
            expectError(.duplicateItem) { try kc.add(.key, labelled, data: []) }
            let variants: [(String, AttributeValue)] = [
                ("keyClass", .number(2)), ("applicationLabel", .data([2])), ("applicationTag", .data(bytes("t2"))),
                ("keyType", .number(73)), ("keySizeInBits", .number(256)), ("effectiveKeySize", .number(128)),
                ("creator", .number(8)), ("startDate", .date(Date(timeIntervalSince1970: 1001))),
                ("endDate", .date(Date(timeIntervalSince1970: 2001))),
            ]
            for (name, value) in variants {
                var changed = base; changed[.named(name)] = value
                try kc.add(.key, changed, data: bytes(name))
            }
            #expect(try kc.itemCount() == 1 + variants.count)
        }
    }

    @Test("an attribute of another class is errSecNoSuchAttr, and nothing is added")
    func attributeOfAnotherClass() throws {
        try withVault { v throws in
            let kc = v.keychain
            expectError(.noSuchAttr, containing: ["server"]) {
                try kc.add(.genericPassword, genp("svc", "a", [A.server: s("host")]), data: [])
            }
            expectError(.noSuchAttr, containing: ["service"]) {
                try kc.add(.internetPassword, [A.server: s("host"), A.service: s("svc")], data: [])
            }
            expectError(.noSuchAttr) {
                try kc.add(.genericPassword, genp("svc", "a", [.named("keyType"): .number(42)]), data: [])
            }
            expectError(.noSuchAttr) {
                try kc.add(
                    .genericPassword,
                    genp("svc", "a", [.named("generic"): .data([1])]).merging([.named("issuer"): .data([1])]) { a, _ in
                        a
                    }, data: [])
            }
            expectError(.noSuchAttr) {
                try kc.add(.genericPassword, genp("svc", "a", [Schema.itemClassPseudoAttribute: s("inet")]), data: [])
            }
            #expect(try kc.itemCount() == 0)
        }
    }

    @Test("an explicit access group the caller lacks is errSecMissingEntitlement")
    func missingEntitlementOnAdd() throws {
        try withVault { v throws in
            let kc = v.keychain
            let caller = Caller(accessGroups: ["mine"])
            expectError(.missingEntitlement, containing: ["theirs"]) {
                try kc.add(
                    .genericPassword, genp("svc", "a", [A.accessGroup: s("theirs")]), data: bytes("x"), caller: caller)
            }
            expectError(.missingEntitlement) {
                try kc.add(.genericPassword, genp("svc", "a"), data: bytes("x"), caller: Caller(accessGroups: []))
            }
            #expect(try kc.itemCount() == 0)
            try kc.add(.genericPassword, genp("svc", "a", [A.accessGroup: s("mine")]), data: bytes("x"), caller: caller)
            #expect(try kc.itemCount() == 1)
        }
    }

    @Test("the default access group is the caller's first")
    func defaultAccessGroup() throws {
        try withVault { v throws in
            let kc = v.keychain
            let caller = Caller(accessGroups: ["team.first", "team.second"])
            let added = try kc.add(.genericPassword, genp("svc", "a"), data: bytes("x"), caller: caller)
            #expect(added.accessGroup == "team.first")
            let found = try kc.find(Query(.genericPassword, genp("svc", "a")), caller: caller)
            #expect(found.accessGroup == "team.first")
            let second = try kc.add(
                .genericPassword, genp("svc", "a", [A.accessGroup: s("team.second")]), data: bytes("y"), caller: caller)
            #expect(second.accessGroup == "team.second")
            // The default caller is in "default".
            #expect(try kc.add(.genericPassword, genp("svc", "a"), data: []).accessGroup == Caller.defaultAccessGroup)
        }
    }

    @Test("the default accessibility is whenUnlocked; a given one is kept")
    func defaultAccessibility() throws {
        try withVault { v throws in
            let kc = v.keychain
            let plain = try kc.add(.genericPassword, genp("svc", "a"), data: [])
            #expect(plain[A.accessible] == .accessibility(.whenUnlocked))
            #expect(try kc.find(Query(.genericPassword, genp("svc", "a"))).accessibility == .whenUnlocked)
            try kc.add(.genericPassword, genp("svc", "b", [A.accessible: .accessibility(.afterFirstUnlock)]), data: [])
            #expect(try kc.find(Query(.genericPassword, genp("svc", "b"))).accessibility == .afterFirstUnlock)
        }
    }

    @Test("creationDate and modificationDate are set on add; modificationDate is refreshed on update")
    func dates() throws {
        try withVault { v throws in
            let kc = v.keychain
            let before = Date()
            try kc.add(.genericPassword, genp("svc", "a"), data: bytes("x"))
            let after = Date()
            let added = try kc.find(Query(.genericPassword, genp("svc", "a")))
            let cdat = try #require(added.creationDate)
            let mdat = try #require(added.modificationDate)
            #expect(cdat >= before && cdat <= after)
            #expect(mdat == cdat)

            Thread.sleep(forTimeInterval: 0.02)
            try kc.update(Query(.genericPassword, genp("svc", "a")), attributes: [A.label: s("new")])
            let updated = try kc.find(Query(.genericPassword, genp("svc", "a")))
            #expect(updated.creationDate == cdat)
            let mdat2 = try #require(updated.modificationDate)
            #expect(mdat2 > mdat)
            #expect(mdat2 <= Date())

            Thread.sleep(forTimeInterval: 0.02)
            try kc.update(Query(.genericPassword, genp("svc", "a")), attributes: [:], data: bytes("y"))
            let mdat3 = try #require(try kc.find(Query(.genericPassword, genp("svc", "a"))).modificationDate)
            #expect(mdat3 > mdat2)
        }
    }

    @Test("identities cannot be added directly")
    func identityAdd() throws {
        try withVault { v throws in
            expectError(.param) { try v.keychain.add(.identity, [:], data: []) }
        }
    }

    @Test("a value of the wrong type is errSecParam")
    func wrongType() throws {
        try withVault { v throws in
            expectError(.param) { try v.keychain.add(.genericPassword, [A.service: .number(1)], data: []) }
            expectError(.param) {
                try v.keychain.add(.internetPassword, [A.server: s("h"), A.port: s("443")], data: [])
            }
            #expect(try v.keychain.itemCount() == 0)
        }
    }
}
