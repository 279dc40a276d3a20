import Foundation
@_spi(CallerRule) @testable import Keychain
import KeychainCrypto
import Synchronization
import Testing

// The rules every face used to rebuild by hand, now in the core (issue 8): presence grants,
// one visibility rule, a key's default tag, the identity bundle, add-or-update, and reads by
// item id without the generic matcher.

/// A presence verifier that counts how often it is asked, and allows or refuses.
final class CountingPresence: PresenceVerifier {
    let asked = Mutex<[Int64]>([])
    let refusal: KeychainStatus?

    init(refusing refusal: KeychainStatus? = nil) { self.refusal = refusal }

    func verify(item: KeychainItem, flags: AccessControlFlags, caller: Caller) throws {
        asked.withLock { $0.append(item.id) }
        if let refusal { throw KeychainError(refusal, "refused by the test") }
    }

    /// The ids asked about, in order.
    var askedIDs: [Int64] { asked.withLock { $0 } }
    var count: Int { askedIDs.count }
}

/// A presence verifier that, while "prompting", writes another item from another thread and
/// waits (at most 10 s) for that write to return: it can only return if the prompt is not held
/// inside a write transaction (the other write would queue behind it).
final class WritingPresence: PresenceVerifier {
    let keychain: Keychain
    let state = Mutex<(asked: [Int64], otherWriteReturned: Bool)>(([], false))

    init(keychain: Keychain) { self.keychain = keychain }

    func verify(item: KeychainItem, flags: AccessControlFlags, caller: Caller) throws {
        state.withLock { $0.asked.append(item.id) }
        let done = DispatchSemaphore(value: 0)
        Thread { [self] in
            if (try? keychain.add(.genericPassword, genp("svc", "other-\(item.id)"), data: bytes("x"))) != nil {
                state.withLock { $0.otherWriteReturned = true }
            }
            done.signal()
        }.start()
        _ = done.wait(timeout: .now() + 10)
    }

    var askedIDs: [Int64] { state.withLock { $0.asked } }
    var otherWriteReturned: Bool { state.withLock { $0.otherWriteReturned } }
}

let presenceRequired: Attributes = [
    Schema.accessControl: .accessControl(AccessControl(protection: .whenUnlocked, flags: .userPresence))
]

@Suite("Core API: rules the faces share")
struct CoreAPITests {
    // MARK: a. presence grants

    @Test("a granted item is read without asking, whatever the authentication UI says; other items still ask")
    func presenceGrant() throws {
        try withVault { v in
            let kc = v.keychain
            let presence = CountingPresence()
            let caller = Caller(presence: presence)
            let guarded = try kc.add(
                .genericPassword, genp("svc", "guarded", presenceRequired), data: bytes("s1"), caller: caller)
            let other = try kc.add(
                .genericPassword, genp("svc", "other", presenceRequired), data: bytes("s2"), caller: caller)

            #expect(
                try kc.item(id: guarded.id, itemClass: .genericPassword, withData: true, caller: caller).data
                    == bytes("s1"))
            #expect(presence.askedIDs == [guarded.id], "an ungranted read asks")

            let granted = caller.granting(presenceFor: guarded.id)
            #expect(granted.presenceGrants == [guarded.id])
            #expect(caller.presenceGrants.isEmpty, "granting returns a copy")
            #expect(
                try kc.item(id: guarded.id, itemClass: .genericPassword, withData: true, caller: granted).data
                    == bytes("s1"))
            #expect(
                try kc.find(
                    Query(.genericPassword, genp("svc", "guarded"), returnData: true, authenticationUI: .fail),
                    caller: granted
                ).data == bytes("s1"))
            #expect(presence.count == 1, "a granted read does not ask")

            expectError(.interactionRequired) {
                try kc.item(id: other.id, itemClass: .genericPassword, withData: true, caller: granted, ui: .fail)
            }
            var noPrompt = granted
            noPrompt.presence = nil
            expectError(.interactionNotAllowed) {
                try kc.item(id: other.id, itemClass: .genericPassword, withData: true, caller: noPrompt)
            }
            #expect(
                try kc.item(id: guarded.id, itemClass: .genericPassword, withData: true, caller: noPrompt).data
                    == bytes("s1"))
            #expect(presence.count == 1)
        }
    }

    @Test("a grant does not open a refused item to anyone else, and does not outlive its copy of the caller")
    func grantIsPerCaller() throws {
        try withVault { v in
            let kc = v.keychain
            let refusing = CountingPresence(refusing: .userCanceled)
            let caller = Caller(presence: refusing)
            let item = try kc.add(
                .genericPassword, genp("svc", "a", presenceRequired), data: bytes("s"), caller: caller)
            expectError(.userCanceled) {
                try kc.item(id: item.id, itemClass: .genericPassword, withData: true, caller: caller)
            }
            #expect(
                try kc.item(
                    id: item.id, itemClass: .genericPassword, withData: true,
                    caller: caller.granting(presenceFor: item.id)
                ).data == bytes("s"))
            expectError(.userCanceled) {
                try kc.item(id: item.id, itemClass: .genericPassword, withData: true, caller: caller)
            }
            #expect(refusing.count == 2)
        }
    }

    @Test(
        "update asks once per protected item, before its transaction, and re-sealing the kept data does not ask again")
    func updateAsksOnce() throws {
        try withVault { v in
            let kc = v.keychain
            let presence = CountingPresence()
            let caller = Caller(presence: presence)
            let item = try kc.add(
                .genericPassword, genp("svc", "a", presenceRequired), data: bytes("kept"), caller: caller)
            // A new protection class re-seals the data, which needs the old data opened.
            let newControl = AccessControl(protection: .afterFirstUnlock, flags: .userPresence)
            try kc.update(
                Query(.genericPassword, genp("svc", "a")),
                attributes: [Schema.accessControl: .accessControl(newControl)],
                caller: caller)
            #expect(presence.askedIDs == [item.id])
            let back = try kc.item(
                id: item.id, itemClass: .genericPassword, withData: true,
                caller: caller.granting(presenceFor: item.id))
            #expect(back.data == bytes("kept"))
            #expect(back.accessibility == .afterFirstUnlock)
            // A relabel does not touch the data: it never asks.
            try kc.update(
                Query(.genericPassword, genp("svc", "a")), attributes: [Schema.label: .string("new label")],
                caller: caller)
            #expect(presence.count == 1)
        }
    }

    @Test("an update's presence prompt is asked outside any write transaction: another write commits meanwhile")
    func updatePromptsOutsideTransaction() throws {
        try withVault { v in
            let kc = v.keychain
            let item = try kc.add(.genericPassword, genp("svc", "p", presenceRequired), data: bytes("old"))
            let presence = WritingPresence(keychain: kc)
            try kc.update(
                Query(.genericPassword, genp("svc", "p")), attributes: [:], data: bytes("new"),
                caller: Caller(presence: presence))
            #expect(presence.askedIDs == [item.id])
            #expect(presence.otherWriteReturned)
            let back = try kc.item(
                id: item.id, itemClass: .genericPassword, withData: true,
                caller: Caller.default.granting(presenceFor: item.id))
            #expect(back.data == bytes("new"))
            #expect(try secret(kc, "svc", "other-\(item.id)") == bytes("x"))
        }
    }

    @Test("a refused presence in update changes nothing and commits nothing (the device's mark stays)")
    func updateRefusedCommitsNothing() throws {
        try withVault { v in
            let kc = v.keychain
            let item = try kc.add(.genericPassword, genp("svc", "p", presenceRequired), data: bytes("old"))
            let mark = try RollbackTests.mark(v)
            let refusing = CountingPresence(refusing: .userCanceled)
            expectError(.userCanceled) {
                try kc.update(
                    Query(.genericPassword, genp("svc", "p")), attributes: [:], data: bytes("new"),
                    caller: Caller(presence: refusing))
            }
            #expect(refusing.askedIDs == [item.id])
            #expect(try RollbackTests.mark(v) == mark)
            let back = try kc.item(
                id: item.id, itemClass: .genericPassword, withData: true,
                caller: Caller.default.granting(presenceFor: item.id))
            #expect(back.data == bytes("old"))
        }
    }

    @Test("replaceData asks for both halves once each, then moves the data")
    func replaceDataAsksOnceEach() throws {
        try withVault { v in
            let kc = v.keychain
            let presence = CountingPresence()
            let caller = Caller(presence: presence)
            let target = try kc.add(
                .genericPassword, genp("svc", "target", presenceRequired), data: bytes("old"), caller: caller)
            let source = try kc.add(
                .genericPassword, genp("svc", "source", presenceRequired), data: bytes("new"), caller: caller)
            try kc.replaceData(
                of: Query(.genericPassword, persistentReference: target.id),
                withDataOf: Query(.genericPassword, persistentReference: source.id), caller: caller)
            #expect(presence.askedIDs.sorted() == [target.id, source.id].sorted())
            #expect(
                try kc.item(
                    id: target.id, itemClass: .genericPassword, withData: true,
                    caller: caller.granting(presenceFor: target.id)
                ).data == bytes("new"))
            expectError(.itemNotFound) {
                try kc.item(id: source.id, itemClass: .genericPassword, withData: false, caller: caller)
            }
        }
    }

    @Test("a refused presence in replaceData changes nothing")
    func replaceDataRefused() throws {
        try withVault { v in
            let kc = v.keychain
            let target = try kc.add(.genericPassword, genp("svc", "target", presenceRequired), data: bytes("old"))
            let source = try kc.add(.genericPassword, genp("svc", "source"), data: bytes("new"))
            let before = try snapshot(kc, caller: Caller(presence: CountingPresence()))
            expectError(.authFailed) {
                try kc.replaceData(
                    of: Query(.genericPassword, persistentReference: target.id),
                    withDataOf: Query(.genericPassword, persistentReference: source.id),
                    caller: Caller(presence: CountingPresence(refusing: .authFailed)))
            }
            #expect(try snapshot(kc, caller: Caller(presence: CountingPresence())) == before)
        }
    }

    // MARK: b. one visibility rule

    @Test("canSee is membership of the caller's access groups, and the core's checks follow it")
    func visibilityRule() throws {
        let caller = Caller(accessGroups: ["a", "b"])
        #expect(caller.canSee(accessGroup: "a"))
        #expect(caller.canSee(accessGroup: "b"))
        #expect(!caller.canSee(accessGroup: "c"))
        #expect(!caller.canSee(accessGroup: ""))
        #expect(Caller.default.canSee(accessGroup: Caller.defaultAccessGroup))
        try withVault { v in
            let kc = v.keychain
            let owner = Caller(accessGroups: ["c"])
            let hidden = try kc.add(.genericPassword, genp("svc", "x"), data: bytes("s"), caller: owner)
            #expect(hidden.accessGroup == "c")
            expectError(.itemNotFound) { try kc.find(Query(.genericPassword, genp("svc", "x")), caller: caller) }
            expectError(.itemNotFound) {
                try kc.item(id: hidden.id, itemClass: .genericPassword, withData: false, caller: caller)
            }
            expectError(.itemNotFound) {
                try kc.authorizeRead(id: hidden.id, itemClass: .genericPassword, caller: caller)
            }
            expectError(.missingEntitlement) {
                try kc.find(
                    Query(.genericPassword, genp("svc", "x", [Schema.accessGroup: .string("c")])), caller: caller)
            }
            expectError(.missingEntitlement) {
                try kc.add(
                    .genericPassword, genp("svc", "y", [Schema.accessGroup: .string("c")]), data: [], caller: caller)
            }
            #expect(try !kc.hasItems(.genericPassword, grouping: .string("svc"), caller: caller))
            #expect(try kc.hasItems(.genericPassword, grouping: .string("svc"), caller: owner))
        }
    }

    // MARK: c. key default attributes

    @Test("a key added with a label and no tag is tagged with the label: the same key under two names is two items")
    func keyTaggedWithLabel() throws {
        try withVault { v in
            let kc = v.keychain
            let (_, key) = try makeCertificate(v.dir, name: "k", keyType: "ed25519")
            let one = try kc.add(.key, [Schema.label: .string("one")], data: key)
            #expect(one[Schema.applicationTag] == .data(bytes("one")))
            let two = try kc.add(.key, [Schema.label: .string("two")], data: key)
            #expect(two[Schema.applicationTag] == .data(bytes("two")))
            #expect(one.id != two.id)
            expectError(.duplicateItem) { try kc.add(.key, [Schema.label: .string("one")], data: key) }
            // A tag given explicitly is kept.
            let three = try kc.add(
                .key, [Schema.label: .string("three"), Schema.applicationTag: .data([1, 2])], data: key)
            #expect(three[Schema.applicationTag] == .data([1, 2]))
            // No label: no tag beyond the empty default.
            let unnamed = try kc.add(.key, [:], data: key)
            #expect((unnamed[Schema.applicationTag] ?? .data([])) == .data([]))
            let stored = try kc.find(Query(.key, [Schema.label: .string("two")], returnData: true))
            #expect(stored[Schema.applicationTag] == .data(bytes("two")))
            #expect(stored.data == key)
            #expect(try kc.itemCount() == 4)
        }
    }

    @Test("the label tag applies to keys only")
    func tagOnlyForKeys() throws {
        try withVault { v in
            let item = try v.keychain.add(.genericPassword, genp("svc", "a", [Schema.label: .string("l")]), data: [])
            #expect(item[Schema.applicationTag] == nil)
        }
    }

    // MARK: d. identity bundle

    @Test("the identity bundle is the certificate as PEM followed by the key as stored, read through the access checks")
    func identityBundle() throws {
        try withVault { v in
            let kc = v.keychain
            let (cert, key) = try makeCertificate(v.dir, name: "id", keyType: "ed25519")
            let certificate = try kc.add(.certificate, [:], data: cert)
            try kc.add(.key, [Schema.label: .string("id")], data: key)
            let bundle = try kc.identityBundle(certificateID: certificate.id)
            #expect(bundle == CertificateData.pem(try CertificateData.der(from: cert)) + key)
            #expect(bundle == cert + key, "openssl's PEM and ours agree")
            expectError(.itemNotFound) {
                try kc.identityBundle(certificateID: certificate.id, caller: Caller(accessGroups: ["other"]))
            }
            expectError(.itemNotFound) { try kc.identityBundle(certificateID: certificate.id + 1000) }
            kc.lock()
            expectError(.interactionNotAllowed) { try kc.identityBundle(certificateID: certificate.id) }
        }
    }

    @Test("the identity bundle asks for a protected key's presence")
    func identityBundlePresence() throws {
        try withVault { v in
            let kc = v.keychain
            let (cert, key) = try makeCertificate(v.dir, name: "p", keyType: "ed25519")
            let certificate = try kc.add(.certificate, [:], data: cert)
            var keyAttributes = presenceRequired
            keyAttributes[Schema.label] = .string("p")
            let keyItem = try kc.add(.key, keyAttributes, data: key)
            let presence = CountingPresence()
            #expect(
                try kc.identityBundle(certificateID: certificate.id, caller: Caller(presence: presence)) == cert + key)
            #expect(presence.askedIDs == [keyItem.id])
            expectError(.userCanceled) {
                try kc.identityBundle(
                    certificateID: certificate.id, caller: Caller(presence: CountingPresence(refusing: .userCanceled)))
            }
        }
    }

    // MARK: e. add-or-update
}
