import Foundation
@_spi(CallerRule) @testable import Keychain
import KeychainCrypto
import Synchronization
import Testing

extension CoreAPITests {
    @Test("addOrUpdate adds, then updates exactly the item with the same primary key")
    func addOrUpdate() throws {
        try withVault { v in
            let kc = v.keychain
            let neighbour = try kc.add(.genericPassword, genp("svc", "other"), data: bytes("untouched"))
            let first = try kc.addOrUpdate(
                .genericPassword, genp("svc", "acct", [Schema.named("comment"): .string("c1")]),
                data: bytes("one"))
            #expect(first.added)
            let second = try kc.addOrUpdate(
                .genericPassword, genp("svc", "acct", [Schema.named("comment"): .string("c2")]),
                data: bytes("two"))
            #expect(!second.added)
            #expect(second.item.id == first.item.id)
            #expect(second.item.string(Schema.named("comment")) == "c2")
            #expect(try secret(kc, "svc", "acct") == bytes("two"))
            #expect(try secret(kc, "svc", "other") == bytes("untouched"))
            #expect(
                try kc.item(id: neighbour.id, itemClass: .genericPassword, withData: false).string(
                    Schema.named("comment")) == nil)
            #expect(try kc.itemCount() == 2)
            // Attributes not given keep their values.
            let third = try kc.addOrUpdate(.genericPassword, genp("svc", "acct"), data: bytes("three"))
            #expect(!third.added)
            #expect(third.item.string(Schema.named("comment")) == "c2")
        }
    }

    @Test("addOrUpdate: no account is the empty account; the access group and synchronizable are part of the key")
    func addOrUpdateKeyDefaults() throws {
        try withVault { v in
            let kc = v.keychain
            let caller = Caller(accessGroups: ["g1", "g2"])
            let inG1 = try kc.add(.genericPassword, genp("svc"), data: bytes("g1"), caller: caller)
            let inG2 = try kc.add(
                .genericPassword, genp("svc", nil, [Schema.accessGroup: .string("g2")]), data: bytes("g2"),
                caller: caller)
            let synced = try kc.add(
                .genericPassword, genp("svc", nil, [Schema.synchronizable: .bool(true)]), data: bytes("sync"),
                caller: caller)
            let updated = try kc.addOrUpdate(.genericPassword, genp("svc", ""), data: bytes("g1 new"), caller: caller)
            #expect(!updated.added && updated.item.id == inG1.id)
            let updated2 = try kc.addOrUpdate(
                .genericPassword, genp("svc", nil, [Schema.accessGroup: .string("g2")]),
                data: bytes("g2 new"), caller: caller)
            #expect(!updated2.added && updated2.item.id == inG2.id)
            let updated3 = try kc.addOrUpdate(
                .genericPassword, genp("svc", nil, [Schema.synchronizable: .bool(true)]),
                data: bytes("sync new"), caller: caller)
            #expect(!updated3.added && updated3.item.id == synced.id)
            let all = try kc.copyMatching(
                Query(.genericPassword, matchLimit: .all, returnData: true, synchronizableAny: true), caller: caller)
            #expect(
                Dictionary(uniqueKeysWithValues: all.map { ($0.id, $0.data ?? []) })
                    == [inG1.id: bytes("g1 new"), inG2.id: bytes("g2 new"), synced.id: bytes("sync new")])
        }
    }

    @Test("addOrUpdate of a key finds it by the label tag; refusals keep their status")
    func addOrUpdateKeyAndErrors() throws {
        try withVault { v in
            let kc = v.keychain
            let (_, key) = try makeCertificate(v.dir, name: "k", keyType: "ed25519")
            let first = try kc.addOrUpdate(.key, [Schema.label: .string("k")], data: key)
            let again = try kc.addOrUpdate(.key, [Schema.label: .string("k")], data: key)
            #expect(first.added && !again.added && again.item.id == first.item.id)
            #expect(try kc.itemCount() == 1)
            expectError(.missingEntitlement) {
                try kc.addOrUpdate(.genericPassword, genp("s", "a", [Schema.accessGroup: .string("nope")]), data: [])
            }
            expectError(.noSuchAttr) { try kc.addOrUpdate(.genericPassword, [Schema.server: .string("h")], data: []) }
            #expect(try kc.itemCount() == 1)
        }
    }

    // MARK: f. reads by item id

    @Test("item(id:) and authorizeRead: other class, other group, unknown id are errSecItemNotFound")
    func itemByIDNotFound() throws {
        try withVault { v in
            let kc = v.keychain
            let item = try kc.add(.genericPassword, genp("svc", "a"), data: bytes("s"))
            for (id, itemClass, caller) in [
                (item.id, ItemClass.internetPassword, Caller.default),
                (item.id, .genericPassword, Caller(accessGroups: ["other"])),
                (item.id + 1, .genericPassword, Caller.default),
            ] {
                expectError(.itemNotFound, containing: ["item \(id)"]) {
                    try kc.item(id: id, itemClass: itemClass, withData: false, caller: caller)
                }
                expectError(.itemNotFound) { try kc.item(id: id, itemClass: itemClass, withData: true, caller: caller) }
                expectError(.itemNotFound) { try kc.authorizeRead(id: id, itemClass: itemClass, caller: caller) }
            }
            expectError(.unimplemented) { try kc.item(id: item.id, itemClass: .identity, withData: false) }
            let read = try kc.item(id: item.id, itemClass: .genericPassword, withData: true)
            #expect(read.data == bytes("s"))
            #expect(read.dataLength == 1)
            #expect(read.string(Schema.service) == "svc")
            let meta = try kc.item(id: item.id, itemClass: .genericPassword, withData: false)
            #expect(meta.data == nil)
            #expect(meta.dataLength == 1)
        }
    }

    @Test(
        "item(id:) sees synchronizable items too (every listed name must open); a query without SynchronizableAny does not"
    )
    func itemByIDSynchronizable() throws {
        try withVault { v in
            let kc = v.keychain
            let synced = try kc.add(
                .genericPassword, genp("svc", "a", [Schema.synchronizable: .bool(true)]), data: bytes("s"))
            #expect(try kc.item(id: synced.id, itemClass: .genericPassword, withData: true).data == bytes("s"))
            expectError(.itemNotFound) { try kc.find(Query(.genericPassword, persistentReference: synced.id)) }
            #expect(try kc.authorizeRead(id: synced.id, itemClass: .genericPassword).dataLength == 1)
        }
    }

    @Test("item(id:) follows the lock state and the authentication UI like a query")
    func itemByIDLockAndUI() throws {
        try withVault { v in
            let kc = v.keychain
            let plain = try kc.add(.genericPassword, genp("svc", "plain"), data: bytes("p"))
            let guarded = try kc.add(.genericPassword, genp("svc", "guarded", presenceRequired), data: bytes("g"))
            let caller = Caller(presence: CountingPresence())
            expectError(.itemNotFound) {
                try kc.item(id: guarded.id, itemClass: .genericPassword, withData: true, caller: caller, ui: .skip)
            }
            expectError(.interactionRequired) {
                try kc.item(id: guarded.id, itemClass: .genericPassword, withData: true, caller: caller, ui: .fail)
            }
            expectError(.interactionRequired) {
                try kc.authorizeRead(id: guarded.id, itemClass: .genericPassword, caller: caller, ui: .fail)
            }
            #expect(
                try kc.item(id: guarded.id, itemClass: .genericPassword, withData: false, caller: caller, ui: .fail)
                    .dataLength == 1)
            kc.lock()
            #expect(
                try kc.item(id: plain.id, itemClass: .genericPassword, withData: false).string(Schema.account)
                    == "plain")
            expectError(.interactionNotAllowed) {
                try kc.item(id: plain.id, itemClass: .genericPassword, withData: true)
            }
            expectError(.interactionNotAllowed) { try kc.authorizeRead(id: plain.id, itemClass: .genericPassword) }
            let fresh = try v.open()
            expectError(.interactionNotAllowed) {
                try fresh.item(id: plain.id, itemClass: .genericPassword, withData: false)
            }
        }
    }

    @Test("item(id:) refuses a row whose attributes were altered (errSecDecode), never wrong data")
    func itemByIDTampered() throws {
        try withVault { v in
            let kc = v.keychain
            let item = try kc.add(.genericPassword, genp("svc", "a"), data: bytes("s"))
            try v.raw().flipByte("attrs", id: item.id) { $0 / 2 }
            expectError(.decode, containing: ["item \(item.id)"]) {
                try kc.item(id: item.id, itemClass: .genericPassword, withData: false)
            }
            expectError(.decode) { try kc.authorizeRead(id: item.id, itemClass: .genericPassword) }
        }
    }

    // Issue 9 moved attribute decoding off Foundation's String(bytes:encoding:), which dropped a
    // leading U+FEFF that the encoder had stored: such a value now reads back as written.
    @Test("text attributes read back byte for byte, a leading U+FEFF included")
    func textAttributesRoundTrip() throws {
        try withVault { v in
            let kc = v.keychain
            for account in ["\u{FEFF}bom-first", "plain", "e\u{301}-combining", ""] {
                let item = try kc.add(.genericPassword, genp("svc-text", account), data: bytes("s"))
                let read = try kc.item(id: item.id, itemClass: .genericPassword, withData: false)
                #expect(
                    read.attributes[Schema.account] == .string(account),
                    "account \(Array(account.utf8)) read back as \(String(describing: read.attributes[Schema.account]))"
                )
            }
        }
    }
}
