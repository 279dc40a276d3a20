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

// MARK: - SecItemCopyMatching

@Suite("CopyMatching")
struct CopyMatchingTests {
    @Test("match limit: one by default, all, a count; returnData decides whether data comes back")
    func matchLimits() throws {
        try withVault { v throws in
            let kc = v.keychain
            for account in ["a", "b", "c"] {
                try kc.add(.genericPassword, genp("svc", account), data: bytes("secret-" + account))
            }
            try kc.add(.genericPassword, genp("other", "a"), data: bytes("other"))
            let q = Query(.genericPassword, genp("svc"))
            #expect(try kc.copyMatching(q).count == 1)
            #expect(try kc.copyMatching(Query(.genericPassword, genp("svc"), matchLimit: .one)).count == 1)
            let all = try kc.copyMatching(Query(.genericPassword, genp("svc"), matchLimit: .all))
            #expect(Set(all.compactMap { $0.string(A.account) }) == ["a", "b", "c"])
            #expect(all.allSatisfy { $0.data == nil })
            #expect(try kc.copyMatching(Query(.genericPassword, genp("svc"), matchLimit: .count(2))).count == 2)
            #expect(try kc.copyMatching(Query(.genericPassword, genp("svc"), matchLimit: .count(10))).count == 3)
            expectError(.param) { try kc.copyMatching(Query(.genericPassword, genp("svc"), matchLimit: .count(0))) }
            let withData = try kc.copyMatching(Query(.genericPassword, genp("svc"), matchLimit: .all, returnData: true))
            for item in withData {
                #expect(item.data == bytes("secret-" + item.string(A.account)!))
            }
            #expect(try kc.copyMatching(Query(.genericPassword, matchLimit: .all)).count == 4)
            // find() is match limit one, whatever the query says.
            #expect(try kc.find(Query(.genericPassword, genp("svc"), matchLimit: .all)).string(A.service) == "svc")
        }
    }

    @Test("no match is errSecItemNotFound")
    func notFound() throws {
        try withVault { v throws in
            let kc = v.keychain
            expectError(.itemNotFound) { try kc.copyMatching(Query(.genericPassword, matchLimit: .all)) }
            try kc.add(.genericPassword, genp("svc", "a", [A.label: s("L")]), data: [])
            expectError(.itemNotFound) { try kc.copyMatching(Query(.genericPassword, genp("svc", "b"))) }
            expectError(.itemNotFound) { try kc.copyMatching(Query(.genericPassword, genp("nope"))) }
            expectError(.itemNotFound) { try kc.copyMatching(Query(.genericPassword, [A.label: s("M")])) }
            expectError(.itemNotFound) { try kc.copyMatching(Query(.internetPassword, matchLimit: .all)) }
            expectError(.itemNotFound) { try kc.find(Query(.genericPassword, genp("svc", "a", [A.label: s("other")]))) }
        }
    }

    @Test(
        "matching is case-sensitive unless caseInsensitive is set",
        arguments: [
            // (query attributes) covering the primary-index, secondary-index and scan paths
            ["service": "github.com", "account": "alice"], ["service": "github.com"], ["account": "ALICE"],
        ])
    func caseInsensitive(_ query: [String: String]) throws {
        try withVault { v throws in
            let kc = v.keychain
            try kc.add(.genericPassword, genp("GitHub.com", "Alice"), data: bytes("pw"))
            var attrs: Attributes = [:]
            for (name, value) in query { attrs[.named(name)] = s(value) }
            expectError(.itemNotFound) { try kc.copyMatching(Query(.genericPassword, attrs)) }
            expectError(.itemNotFound) { try kc.copyMatching(Query(.genericPassword, attrs, caseInsensitive: false)) }
            let found = try kc.copyMatching(
                Query(.genericPassword, attrs, matchLimit: .all, caseInsensitive: true, returnData: true))
            #expect(found.count == 1)
            #expect(found.first?.data == bytes("pw"))
        }
    }

    @Test("a query without synchronizable sees only non-synchronizable items; synchronizableAny sees both")
    func synchronizableFiltering() throws {
        try withVault { v throws in
            let kc = v.keychain
            try kc.add(.genericPassword, genp("svc", "local"), data: bytes("l"))
            try kc.add(.genericPassword, genp("svc", "cloud", [A.synchronizable: .bool(true)]), data: bytes("c"))
            func accounts(_ q: Query) throws -> Set<String> {
                var q = q; q.matchLimit = .all
                return Set(try kc.copyMatching(q).compactMap { $0.string(A.account) })
            }
            #expect(try accounts(Query(.genericPassword, genp("svc"))) == ["local"])
            #expect(try accounts(Query(.genericPassword)) == ["local"])
            #expect(
                try accounts(Query(.genericPassword, genp("svc", nil, [A.synchronizable: .bool(false)]))) == ["local"])
            #expect(
                try accounts(Query(.genericPassword, genp("svc", nil, [A.synchronizable: .bool(true)]))) == ["cloud"])
            #expect(try accounts(Query(.genericPassword, genp("svc"), synchronizableAny: true)) == ["local", "cloud"])
            #expect(try accounts(Query(.genericPassword, synchronizableAny: true)) == ["local", "cloud"])
            // Full primary key, without the sync flag: not found; with synchronizableAny: found.
            expectError(.itemNotFound) { try kc.find(Query(.genericPassword, genp("svc", "cloud"))) }
            #expect(
                try kc.find(Query(.genericPassword, genp("svc", "cloud"), returnData: true, synchronizableAny: true))
                    .data == bytes("c"))
            // The same applies to delete and update.
            expectError(.itemNotFound) { try kc.delete(Query(.genericPassword, genp("svc", "cloud"))) }
            expectError(.itemNotFound) {
                try kc.update(Query(.genericPassword, genp("svc", "cloud")), attributes: [A.label: s("x")])
            }
            #expect(try kc.itemCount() == 2)
        }
    }

    @Test("a persistent reference finds the item, within the caller's groups and the class")
    func persistentReference() throws {
        try withVault { v throws in
            let kc = v.keychain
            let added = try kc.add(.genericPassword, genp("svc", "a"), data: bytes("x"))
            let item = try kc.item(id: added.id, itemClass: .genericPassword, withData: true)
            #expect(item.data == bytes("x"))
            #expect(item.string(A.service) == "svc")
            expectError(.itemNotFound) { try kc.item(id: added.id, itemClass: .internetPassword, withData: false) }
            expectError(.itemNotFound) {
                try kc.item(id: added.id + 1000, itemClass: .genericPassword, withData: false)
            }
            expectError(.itemNotFound) {
                try kc.item(
                    id: added.id, itemClass: .genericPassword, withData: false,
                    caller: Caller(accessGroups: ["elsewhere"]))
            }
        }
    }

    @Test("persistent references are never reused, even after the newest item is deleted")
    func persistentReferenceNotReused() throws {
        try withVault { v throws in
            let kc = v.keychain
            let a = try kc.add(.genericPassword, genp("svc", "a"), data: bytes("a"))
            try kc.delete(Query(.genericPassword, genp("svc", "a")))
            let b = try kc.add(.genericPassword, genp("svc", "a"), data: bytes("b"))
            #expect(b.id > a.id)
            expectError(.itemNotFound) { try kc.item(id: a.id, itemClass: .genericPassword, withData: true) }
            let fresh = try v.openUnlocked()
            let c = try fresh.add(.genericPassword, genp("svc", "c"), data: bytes("c"))
            #expect(c.id > b.id)
            #expect(try fresh.item(id: b.id, itemClass: .genericPassword, withData: true).data == bytes("b"))
        }
    }

    @Test("items needing user presence: ui fail → interactionRequired, skip → left out, attributes readable")
    func authenticationUI() throws {
        try withVault { v throws in
            let kc = v.keychain
            let ac = AccessControl(protection: .whenUnlocked, flags: [.userPresence])
            try kc.add(
                .genericPassword, genp("svc", "guarded", [A.accessControl: .accessControl(ac)]), data: bytes("g"))
            try kc.add(.genericPassword, genp("svc", "plain"), data: bytes("p"))
            let guarded = Query(.genericPassword, genp("svc", "guarded"), returnData: true, authenticationUI: .fail)
            // Apple says errSecInteractionNotAllowed here; keychainfs deliberately says
            // errSecInteractionRequired (EAGAIN), see docs/errors.md.
            expectError(.interactionRequired) { try kc.copyMatching(guarded) }
            var skip = guarded; skip.authenticationUI = .skip
            expectError(.itemNotFound) { try kc.copyMatching(skip) }
            // No presence verifier at all: cannot prompt.
            expectError(.interactionNotAllowed) {
                try kc.copyMatching(Query(.genericPassword, genp("svc", "guarded"), returnData: true))
            }
            let listed = try kc.copyMatching(
                Query(.genericPassword, genp("svc"), matchLimit: .all, returnData: true, authenticationUI: .skip))
            #expect(listed.map { $0.string(A.account) } == ["plain"])
            let attrsOnly = try kc.find(Query(.genericPassword, genp("svc", "guarded")))
            #expect(attrsOnly.accessControl == ac)
        }
    }
}

// MARK: - Accessibility and access control rules on add/update

@Suite("Protection rules")
struct ProtectionRuleTests {
    @Test("synchronizable items cannot be ThisDeviceOnly", arguments: Accessibility.allCases.filter(\.isThisDeviceOnly))
    func syncThisDeviceOnly(_ protection: Accessibility) throws {
        try withVault { v throws in
            let kc = v.keychain
            expectError(.param) {
                try kc.add(
                    .genericPassword,
                    genp("svc", "a", [A.synchronizable: .bool(true), A.accessible: .accessibility(protection)]),
                    data: [])
            }
            expectError(.param) {
                try kc.add(
                    .genericPassword,
                    genp(
                        "svc", "b",
                        [
                            A.synchronizable: .bool(true),
                            A.accessControl: .accessControl(AccessControl(protection: protection, flags: [])),
                        ]), data: [])
            }
            #expect(try kc.itemCount() == 0)
            // Nor can an update make them so, in either order.
            try kc.add(.genericPassword, genp("svc", "sync", [A.synchronizable: .bool(true)]), data: bytes("s"))
            try kc.add(
                .genericPassword, genp("svc", "local", [A.accessible: .accessibility(protection)]), data: bytes("l"))
            let before = try snapshot(kc)
            expectError(.param) {
                try kc.update(
                    Query(.genericPassword, genp("svc", "sync", [A.synchronizable: .bool(true)])),
                    attributes: [A.accessible: .accessibility(protection)])
            }
            expectError(.param) {
                try kc.update(
                    Query(.genericPassword, genp("svc", "local")), attributes: [A.synchronizable: .bool(true)])
            }
            #expect(try snapshot(kc) == before)
        }
    }

    @Test("accessControl and accessible together are errSecParam; accessControl alone sets the protection")
    func accessControlWithAccessible() throws {
        try withVault { v throws in
            let kc = v.keychain
            let ac = AccessControl(protection: .afterFirstUnlock, flags: [])
            expectError(.param) {
                try kc.add(
                    .genericPassword,
                    genp(
                        "svc", "a",
                        [A.accessControl: .accessControl(ac), A.accessible: .accessibility(.afterFirstUnlock)]),
                    data: [])
            }
            #expect(try kc.itemCount() == 0)
            let added = try kc.add(
                .genericPassword, genp("svc", "a", [A.accessControl: .accessControl(ac)]), data: bytes("x"))
            #expect(added.accessibility == .afterFirstUnlock)
            expectError(.param) {
                try kc.update(
                    Query(.genericPassword, genp("svc", "a")),
                    attributes: [A.accessControl: .accessControl(ac), A.accessible: .accessibility(.whenUnlocked)])
            }
            #expect(try kc.find(Query(.genericPassword, genp("svc", "a"))).accessibility == .afterFirstUnlock)
        }
    }

    @Test("access-control flags that cannot be enforced are refused, not silently stored")
    func unsupportedFlags() throws {
        try withVault { v throws in
            for flags: AccessControlFlags in [
                .biometryAny, .biometryCurrentSet, .applicationPassword, .privateKeyUsage,
            ] {
                expectError(.unimplemented) {
                    try v.keychain.add(
                        .genericPassword,
                        genp(
                            "svc", "a",
                            [A.accessControl: .accessControl(AccessControl(protection: .whenUnlocked, flags: flags))]),
                        data: [])
                }
            }
            #expect(try v.keychain.itemCount() == 0)
        }
    }
}

// MARK: - SecItemUpdate

@Suite("Update")
struct UpdateTests {
    @Test("an update query may not hold kSecReturn… or kSecMatch… keys")
    func updateQueryKeys() throws {
        try withVault { v throws in
            let kc = v.keychain
            try kc.add(.genericPassword, genp("svc", "a"), data: bytes("x"))
            let before = try snapshot(kc)
            let change: Attributes = [A.label: s("changed")]
            expectError(.param) {
                try kc.update(Query(.genericPassword, genp("svc", "a"), matchLimit: .one), attributes: change)
            }
            expectError(.param) {
                try kc.update(Query(.genericPassword, genp("svc", "a"), matchLimit: .all), attributes: change)
            }
            expectError(.param) {
                try kc.update(Query(.genericPassword, genp("svc", "a"), returnData: true), attributes: change)
            }
            expectError(.param) {
                try kc.update(Query(.genericPassword, genp("svc", "a"), returnData: false), attributes: change)
            }
            expectError(.param) {
                try kc.update(Query(.genericPassword, genp("svc", "a"), returnAttributes: true), attributes: change)
            }
            expectError(.param) {
                try kc.update(Query(.genericPassword, genp("svc", "a"), caseInsensitive: true), attributes: change)
            }
            expectError(.param) { try kc.update(Query(.genericPassword, genp("svc", "a")), attributes: [:]) }
            #expect(try snapshot(kc) == before)
        }
    }

    @Test("'class' is not an attribute: naming it is errSecNoSuchAttr")
    func updateClass() throws {
        for itemClass in ItemClass.allCases {
            expectError(.noSuchAttr) { try Schema.attribute(named: "class", in: itemClass) }
            expectError(.noSuchAttr) { try Schema.attribute(named: "kSecClass", in: itemClass) }
        }
        try withVault { v throws in
            let kc = v.keychain
            try kc.add(.genericPassword, genp("svc", "a"), data: bytes("x"))
            let before = try snapshot(kc)
            expectError(.noSuchAttr) {
                try kc.update(
                    Query(.genericPassword, genp("svc", "a")), attributes: [Schema.itemClassPseudoAttribute: s("inet")])
            }
            expectError(.noSuchAttr) {
                try kc.update(Query(.genericPassword, genp("svc", "a")), attributes: [A.server: s("host")])
            }
            #expect(try snapshot(kc) == before)
        }
    }

    @Test("system and derived attributes are read-only to update")
    func readOnlyAttributes() throws {
        try withVault { v throws in
            let kc = v.keychain
            try kc.add(.genericPassword, genp("svc", "a"), data: bytes("x"))
            try kc.add(.certificate, [:], data: try makeCertificate(v.dir, name: "ro").0)
            let before = try snapshot(kc)
            let q = Query(.genericPassword, genp("svc", "a"))
            expectError(.readOnlyAttr, containing: ["creationDate"]) {
                try kc.update(q, attributes: [A.creationDate: .date(Date(timeIntervalSince1970: 0))])
            }
            expectError(.readOnlyAttr) {
                try kc.update(q, attributes: [A.modificationDate: .date(Date(timeIntervalSince1970: 0))])
            }
            expectError(.readOnlyAttr) {
                try kc.update(Query(.certificate, matchLimit: nil), attributes: [.named("issuer"): .data([9])])
            }
            #expect(try snapshot(kc) == before)
        }
    }

    @Test("changing key attributes into an existing item is errSecDuplicateItem and changes nothing")
    func updateIntoDuplicate() throws {
        try withVault { v throws in
            let kc = v.keychain
            try kc.add(.genericPassword, genp("svc", "a", [A.label: s("A")]), data: bytes("secret A"))
            try kc.add(.genericPassword, genp("svc", "b", [A.label: s("B")]), data: bytes("secret B"))
            let before = try snapshot(kc)
            expectError(.duplicateItem) {
                try kc.update(
                    Query(.genericPassword, genp("svc", "a")), attributes: [A.account: s("b"), A.label: s("moved")])
            }
            expectError(.duplicateItem) {
                try kc.update(
                    Query(.genericPassword, genp("svc", "a")), attributes: [A.account: s("b")], data: bytes("new data"))
            }
            #expect(try snapshot(kc) == before)
            #expect(try secret(kc, "svc", "a") == bytes("secret A"))
            #expect(try secret(kc, "svc", "b") == bytes("secret B"))
            try kc.verifyIntegrity()
            try v.openUnlocked().verifyIntegrity()
        }
    }

    @Test("an update of several matches is atomic: a clash on the second rolls back the first")
    func updateAtomic() throws {
        try withVault { v throws in
            let kc = v.keychain
            for account in ["a", "b"] { try kc.add(.genericPassword, genp("svc", account), data: bytes(account)) }
            try kc.add(.genericPassword, genp("other", "z"), data: bytes("z"))
            let before = try snapshot(kc)
            // Both svc items would become svc/z: the second collides with the first.
            expectError(.duplicateItem) {
                try kc.update(Query(.genericPassword, genp("svc")), attributes: [A.account: s("z")])
            }
            #expect(try snapshot(kc) == before)
            try kc.verifyIntegrity()
            try v.openUnlocked().verifyIntegrity()
        }
    }

    @Test("update changes every match and nothing else")
    func updateAllMatches() throws {
        try withVault { v throws in
            let kc = v.keychain
            for account in ["a", "b", "c"] { try kc.add(.genericPassword, genp("svc", account), data: bytes(account)) }
            try kc.add(.genericPassword, genp("other", "a", [A.label: s("keep")]), data: bytes("o"))
            let n = try kc.update(Query(.genericPassword, genp("svc")), attributes: [A.label: s("new")])
            #expect(n == 3)
            let svc = try kc.copyMatching(Query(.genericPassword, genp("svc"), matchLimit: .all, returnData: true))
            #expect(svc.count == 3)
            #expect(svc.allSatisfy { $0.string(A.label) == "new" && $0.data == bytes($0.string(A.account)!) })
            #expect(try kc.find(Query(.genericPassword, genp("other", "a"))).string(A.label) == "keep")

            let m = try kc.update(Query(.genericPassword, genp("svc")), attributes: [:], data: bytes("same for all"))
            #expect(m == 3)
            for account in ["a", "b", "c"] { #expect(try secret(kc, "svc", account) == bytes("same for all")) }
            #expect(try secret(kc, "other", "a") == bytes("o"))

            expectError(.itemNotFound) {
                try kc.update(Query(.genericPassword, genp("missing")), attributes: [A.label: s("x")])
            }
            try v.openUnlocked().verifyIntegrity()
        }
    }

    @Test("update can move an item's key, protection and group; the data follows")
    func updateKeyAndProtection() throws {
        try withVault { v throws in
            let kc = v.keychain
            let caller = Caller(accessGroups: ["g1", "g2"])
            try kc.add(.genericPassword, genp("svc", "a"), data: bytes("x"), caller: caller)
            try kc.update(
                Query(.genericPassword, genp("svc", "a")), attributes: [A.account: s("renamed")], caller: caller)
            expectError(.itemNotFound) { try secret(kc, "svc", "a", caller: caller) }
            #expect(try secret(kc, "svc", "renamed", caller: caller) == bytes("x"))
            try kc.update(
                Query(.genericPassword, genp("svc", "renamed")),
                attributes: [A.accessible: .accessibility(.afterFirstUnlock)], caller: caller)
            try kc.update(
                Query(.genericPassword, genp("svc", "renamed")), attributes: [A.accessGroup: s("g2")], caller: caller)
            let moved = try kc.find(Query(.genericPassword, genp("svc", "renamed"), returnData: true), caller: caller)
            #expect(moved.accessGroup == "g2" && moved.accessibility == .afterFirstUnlock && moved.data == bytes("x"))
            expectError(.missingEntitlement) {
                try kc.update(
                    Query(.genericPassword, genp("svc", "renamed")), attributes: [A.accessGroup: s("g3")],
                    caller: caller)
            }
            kc.lock()
            #expect(try secret(kc, "svc", "renamed", caller: caller) == bytes("x"))
            try v.openUnlocked().verifyIntegrity()
        }
    }
}

// MARK: - SecItemDelete

@Suite("Delete")
struct DeleteTests {
    @Test("kSecMatchLimit in a delete query is errSecParam, and nothing is deleted")
    func deleteWithMatchLimit() throws {
        try withVault { v throws in
            let kc = v.keychain
            try kc.add(.genericPassword, genp("svc", "a"), data: [])
            for limit in [MatchLimit.one, .all, .count(1)] {
                expectError(.param) { try kc.delete(Query(.genericPassword, genp("svc"), matchLimit: limit)) }
            }
            #expect(try kc.itemCount() == 1)
        }
    }

    @Test("delete removes every match and nothing else")
    func deleteAllMatches() throws {
        try withVault { v throws in
            let kc = v.keychain
            for account in ["a", "b", "c"] { try kc.add(.genericPassword, genp("svc", account), data: bytes(account)) }
            try kc.add(.genericPassword, genp("other", "a"), data: bytes("o"))
            try kc.add(.internetPassword, [A.server: s("svc"), A.account: s("a")], data: bytes("i"))
            #expect(try kc.delete(Query(.genericPassword, genp("svc"))) == 3)
            expectError(.itemNotFound) { try kc.copyMatching(Query(.genericPassword, genp("svc"), matchLimit: .all)) }
            expectError(.itemNotFound) { try kc.delete(Query(.genericPassword, genp("svc"))) }
            #expect(try secret(kc, "other", "a") == bytes("o"))
            #expect(try kc.find(Query(.internetPassword, [A.server: s("svc")], returnData: true)).data == bytes("i"))
            #expect(try kc.itemCount() == 2)
            try kc.verifyIntegrity()
            #expect(try kc.delete(Query(.genericPassword)) == 1)
            try v.openUnlocked().verifyIntegrity()
        }
    }
}

// MARK: - Access groups

@Suite("Visibility")
struct VisibilityTests {
    @Test("another access group's items are not found, never 'permission denied'")
    func otherGroupInvisible() throws {
        try withVault { v throws in
            let kc = v.keychain
            let appA = Caller(accessGroups: ["app.a"]), appB = Caller(accessGroups: ["app.b"])
            let added = try kc.add(.genericPassword, genp("svc", "acct"), data: bytes("A's secret"), caller: appA)
            expectError(.itemNotFound) {
                try kc.find(Query(.genericPassword, genp("svc", "acct"), returnData: true), caller: appB)
            }
            expectError(.itemNotFound) { try kc.copyMatching(Query(.genericPassword, matchLimit: .all), caller: appB) }
            expectError(.itemNotFound) { try kc.copyMatching(Query(.genericPassword, genp("svc")), caller: appB) }
            expectError(.itemNotFound) {
                try kc.update(Query(.genericPassword, genp("svc", "acct")), attributes: [A.label: s("x")], caller: appB)
            }
            expectError(.itemNotFound) {
                try kc.update(
                    Query(.genericPassword, genp("svc", "acct")), attributes: [:], data: bytes("overwrite"),
                    caller: appB)
            }
            expectError(.itemNotFound) { try kc.delete(Query(.genericPassword, genp("svc", "acct")), caller: appB) }
            expectError(.itemNotFound) {
                try kc.item(id: added.id, itemClass: .genericPassword, withData: true, caller: appB)
            }
            // Naming the group explicitly is asking for an entitlement B lacks.
            expectError(.missingEntitlement) {
                try kc.find(Query(.genericPassword, genp("svc", "acct", [A.accessGroup: s("app.a")])), caller: appB)
            }
            // B can have its own item with the same name; each sees its own.
            try kc.add(.genericPassword, genp("svc", "acct"), data: bytes("B's secret"), caller: appB)
            #expect(try secret(kc, "svc", "acct", caller: appA) == bytes("A's secret"))
            #expect(try secret(kc, "svc", "acct", caller: appB) == bytes("B's secret"))
            // A caller in both groups sees both.
            let both = Caller(accessGroups: ["app.a", "app.b"])
            #expect(
                try kc.copyMatching(Query(.genericPassword, genp("svc", "acct"), matchLimit: .all), caller: both).count
                    == 2)
        }
    }
}

// MARK: - Lock state

@Suite("Lock")
struct LockTests {
    @Test("locked: whenUnlocked data is refused, afterFirstUnlock data and all attributes stay readable")
    func lockSemantics() throws {
        try withVault { v throws in
            let kc = v.keychain
            try kc.add(.genericPassword, genp("svc", "wu"), data: bytes("when unlocked"))
            try kc.add(
                .genericPassword, genp("svc", "afu", [A.accessible: .accessibility(.afterFirstUnlock)]),
                data: bytes("after first unlock"))
            try kc.add(
                .genericPassword, genp("svc", "wutdo", [A.accessible: .accessibility(.whenUnlockedThisDeviceOnly)]),
                data: bytes("tdo"))
            try kc.add(
                .genericPassword,
                genp("svc", "afutdo", [A.accessible: .accessibility(.afterFirstUnlockThisDeviceOnly)]),
                data: bytes("afu tdo"))
            guard case .unlocked = kc.lockState else { Issue.record("a new vault should be unlocked"); return }

            kc.lock()
            guard case .locked = kc.lockState else { Issue.record("lock() should lock"); return }
            expectError(.interactionNotAllowed, containing: ["locked"]) { try secret(kc, "svc", "wu") }
            expectError(.interactionNotAllowed) { try secret(kc, "svc", "wutdo") }
            #expect(try secret(kc, "svc", "afu") == bytes("after first unlock"))
            #expect(try secret(kc, "svc", "afutdo") == bytes("afu tdo"))
            let listed = try kc.copyMatching(Query(.genericPassword, genp("svc"), matchLimit: .all))
            #expect(Set(listed.compactMap { $0.string(A.account) }) == ["wu", "afu", "wutdo", "afutdo"])
            // A listing that asks for data fails on the first protected item rather than lying.
            expectError(.interactionNotAllowed) {
                try kc.copyMatching(Query(.genericPassword, genp("svc"), matchLimit: .all, returnData: true))
            }
            // Adding a whenUnlocked item needs its class key.
            expectError(.interactionNotAllowed) { try kc.add(.genericPassword, genp("svc", "new"), data: bytes("n")) }
            expectError(.interactionNotAllowed) {
                try kc.update(Query(.genericPassword, genp("svc", "wu")), attributes: [:], data: bytes("changed"))
            }
            #expect(try kc.itemCount() == 4)
            try kc.add(
                .genericPassword, genp("svc", "new-afu", [A.accessible: .accessibility(.afterFirstUnlock)]),
                data: bytes("ok"))

            try kc.unlock(passphrase: try secure(testPassphrase))
            guard case .unlocked = kc.lockState else { Issue.record("unlock should unlock"); return }
            #expect(try secret(kc, "svc", "wu") == bytes("when unlocked"))
            #expect(try secret(kc, "svc", "wutdo") == bytes("tdo"))
            #expect(try secret(kc, "svc", "new-afu") == bytes("ok"))
            try kc.add(.genericPassword, genp("svc", "new"), data: bytes("n"))
            #expect(try kc.itemCount() == 6)
        }
    }

    @Test("opened but never unlocked: nothing is readable, not even attributes")
    func neverUnlocked() throws {
        try withVault { v throws in
            try v.keychain.add(
                .genericPassword, genp("svc", "afu", [A.accessible: .accessibility(.afterFirstUnlock)]),
                data: bytes("x"))
            let kc = try v.open()
            #expect(kc.lockState == .neverUnlocked)
            expectError(.interactionNotAllowed) { try kc.copyMatching(Query(.genericPassword, matchLimit: .all)) }
            expectError(.interactionNotAllowed) { try kc.add(.genericPassword, genp("svc", "b"), data: []) }
            expectError(.interactionNotAllowed) { try kc.delete(Query(.genericPassword)) }
            expectError(.interactionNotAllowed) { try kc.verifyIntegrity() }
            kc.lock()
            #expect(kc.lockState == .neverUnlocked)
            expectError(.authFailed) { try kc.unlock(passphrase: try secure("wrong")) }
            #expect(kc.lockState == .neverUnlocked)
            try kc.unlock(passphrase: try secure(testPassphrase))
            #expect(try secret(kc, "svc", "afu") == bytes("x"))
        }
    }
}
