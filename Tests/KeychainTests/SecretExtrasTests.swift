import Foundation
import KeychainCrypto
import Testing

@testable import Keychain

/// A password item's extras (issue 26, the face-neutral secret): kept beside the secret, sealed
/// with it, never part of `data`; the stored form of git's helper before them is read the same way.
@Suite("secret extras")
struct SecretExtrasTests {
    static let length = Schema.named("secretExtrasLength")
    static func site(_ account: String) -> Attributes {
        [Schema.server: .string("extras.example.com"), Schema.account: .string(account)]
    }

    func read(_ kc: Keychain, _ account: String) throws -> KeychainItem {
        try kc.find(Query(.internetPassword, Self.site(account), returnData: true))
    }

    @Test(
        "data is the secret alone, extras their own field, the length the secret's; a secret holding NULs splits right")
    func storedBeside() throws {
        try withVault { v in
            let kc = v.keychain
            let secret: [UInt8] = [0x70, 0, 0x77, 0]  // NULs of its own
            let extras = Array("oauth_refresh_token=abc\n".utf8)
            let added = try kc.add(.internetPassword, Self.site("a"), data: secret, extras: extras)
            #expect(added.dataLength == secret.count)
            #expect(added[Self.length] == .number(Int64(extras.count)))
            let item = try read(kc, "a")
            #expect(item.data == secret && item.extras == extras && item.dataLength == secret.count)
            let byID = try kc.item(id: added.id, itemClass: .internetPassword, withData: true)
            #expect(byID.data == secret && byID.extras == extras)
            // Without data, nothing of the extras leaves either.
            let bare = try kc.item(id: added.id, itemClass: .internetPassword, withData: false)
            #expect(bare.data == nil && bare.extras == nil && bare.dataLength == secret.count)
            // No extras: stored as is, no attribute.
            let plain = try kc.add(.internetPassword, Self.site("b"), data: Array("pw".utf8))
            #expect(plain[Self.length] == nil)
            #expect(try read(kc, "b").extras == nil)
        }
    }

    @Test("an attribute change keeps the extras; new data replaces them (none unless given); a rename moves them")
    func updates() throws {
        try withVault { v in
            let kc = v.keychain
            let extras = Array("password_expiry_utc=99\n".utf8)
            let item = try kc.add(.internetPassword, Self.site("u"), data: Array("one".utf8), extras: extras)
            let byID = Query(.internetPassword, persistentReference: item.id)
            try kc.update(byID, attributes: [Schema.label: .string("relabelled")])
            #expect(try read(kc, "u").extras == extras)
            try kc.update(byID, attributes: [Schema.accessible: .accessibility(.afterFirstUnlock)])
            #expect(try read(kc, "u").extras == extras && read(kc, "u").data == Array("one".utf8))
            try kc.update(byID, attributes: [:], data: Array("two".utf8))
            let replaced = try read(kc, "u")
            #expect(replaced.data == Array("two".utf8) && replaced.extras == nil && replaced[Self.length] == nil)
            try kc.update(byID, attributes: [:], data: Array("three".utf8), extras: extras)
            #expect(try read(kc, "u").extras == extras)
            try kc.rename(byID, to: [Schema.account: .string("moved")], replacing: false)
            let moved = try read(kc, "moved")
            #expect(moved.data == Array("three".utf8) && moved.extras == extras)
            // -U (add or update) keeps the given extras.
            let (_, added) = try kc.addOrUpdate(
                .internetPassword, Self.site("moved"), data: Array("four".utf8), extras: Array("x=y\n".utf8))
            #expect(!added)
            #expect(try read(kc, "moved").extras == Array("x=y\n".utf8))
        }
    }

    @Test(
        "extras are refused where they do not belong: a caller cannot set the length; a key keeps none; the 1 MiB limit counts them"
    )
    func refused() throws {
        try withVault { v in
            let kc = v.keychain
            // Derived: a value given at add is not kept (the data is read whole), and an update
            // may not name it.
            let given = try kc.add(
                .internetPassword, Self.site("r").merging([Self.length: .number(3)]) { $1 }, data: [1, 0, 2])
            #expect(given[Self.length] == nil && given.dataLength == 3)
            #expect(try read(kc, "r").data == [1, 0, 2])
            expectError(.readOnlyAttr) {
                try kc.update(
                    Query(.internetPassword, persistentReference: given.id), attributes: [Self.length: .number(1)])
            }
            expectError(.param) {
                try kc.add(.key, [Schema.label: .string("k")], data: Array("k".utf8), extras: [1])
            }
            expectError(.dataTooLarge) {
                try kc.add(
                    .internetPassword, Self.site("big"), data: [UInt8](repeating: 1, count: Keychain.maxDataSize),
                    extras: [1])
            }
        }
    }

    @Test("git's helper's stored form before the extras (password NUL key=value lines) reads as password and extras")
    func legacyForm() throws {
        try withVault { v in
            let kc = v.keychain
            let legacy = Array("pw\u{0}password_expiry_utc=123\noauth_refresh_token=tok\n".utf8)
            try kc.add(.internetPassword, Self.site("old"), data: legacy)
            let old = try read(kc, "old")
            #expect(old.data == Array("pw".utf8))
            #expect(old.extras == Array("password_expiry_utc=123\noauth_refresh_token=tok\n".utf8))
            // Anything else after a NUL is the secret's own, whole.
            for whole in [
                "pw\u{0}other=1\n", "pw\u{0}password_expiry_utc=1", "pw\u{0}", "pw\u{0}\n", "\u{0}\u{0}",
                "pw\u{0}password_expiry_utc\n",
            ] {
                let bytes = Array(whole.utf8)
                try kc.addOrUpdate(.internetPassword, Self.site("whole"), data: bytes)
                let item = try read(kc, "whole")
                #expect(item.data == bytes && item.extras == nil, "\(whole.debugDescription)")
            }
            // Only internet passwords were ever written so by git's helper.
            try kc.add(.genericPassword, [Schema.service: .string("s")], data: legacy)
            #expect(
                try kc.find(Query(.genericPassword, [Schema.service: .string("s")], returnData: true)).data == legacy)
        }
    }

    @Test("the split survives a passphrase rotation and a fresh open")
    func survivesRotation() throws {
        try withVault { v in
            let kc = v.keychain
            let extras = Array("oauth_refresh_token=r\n".utf8)
            try kc.add(.internetPassword, Self.site("rot"), data: Array("pw".utf8), extras: extras)
            try kc.rotateMasterKey(old: try secure(testPassphrase), new: try secure("rotated passphrase"))
            let reopened = try v.openUnlocked(passphrase: "rotated passphrase")
            let item = try reopened.find(Query(.internetPassword, Self.site("rot"), returnData: true))
            #expect(item.data == Array("pw".utf8) && item.extras == extras)
        }
    }
}
