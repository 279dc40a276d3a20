import Foundation
@_spi(CallerRule) import Keychain
import Testing

// The SecItem rules of keychain-semantics.md (SemanticsTests.swift), continued.

private let A = Schema.self
private func s(_ v: String) -> AttributeValue { .string(v) }

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
