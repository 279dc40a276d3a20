import Foundation
@_spi(CallerRule) import Keychain
import Testing

// The SecItem rules of keychain-semantics.md (SemanticsTests.swift), continued.

private let A = Schema.self
private func s(_ v: String) -> AttributeValue { .string(v) }

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
