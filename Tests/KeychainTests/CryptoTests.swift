import Foundation
import Keychain
import KeychainCrypto
import Testing

// Vault and crypto failures: each must be a precise KeychainError, and never wrong data.

private let A = Schema.self

@Suite("Passphrase")
struct PassphraseTests {
    @Test("a wrong passphrase is errSecAuthFailed and leaves the keychain as it was")
    func wrongPassphrase() throws {
        try withVault { v throws in
            try v.keychain.add(.genericPassword, genp("svc", "a"), data: bytes("x"))
            let kc = try v.open()
            expectError(.authFailed, containing: ["passphrase"]) { try kc.unlock(passphrase: try secure("wrong")) }
            expectError(.authFailed) { try kc.unlock(passphrase: try secure(testPassphrase + " ")) }
            expectError(.authFailed) { try kc.unlock(passphrase: try secure("")) }
            #expect(kc.lockState == .neverUnlocked)
            expectError(.interactionNotAllowed) { try secret(kc, "svc", "a") }
            // A wrong passphrase on an unlocked keychain does not lock or break it.
            expectError(.authFailed) { try v.keychain.unlock(passphrase: try secure("wrong")) }
            #expect(try secret(v.keychain, "svc", "a") == bytes("x"))
        }
    }

    @Test("changing the passphrase: the old one fails afterwards, the new one works, items intact")
    func changePassphrase() throws {
        try withVault { v throws in
            let kc = v.keychain
            try kc.add(.genericPassword, genp("svc", "a"), data: bytes("secret a"))
            try kc.add(
                .genericPassword, genp("svc", "tdo", [A.accessible: .accessibility(.whenUnlockedThisDeviceOnly)]),
                data: bytes("tdo"))
            let before = try snapshot(kc)
            expectError(.authFailed) {
                try kc.changePassphrase(old: try secure("wrong"), new: try secure("new passphrase"))
            }
            try kc.changePassphrase(old: try secure(testPassphrase), new: try secure("new passphrase"))

            let fresh = try v.open()
            expectError(.authFailed) { try fresh.unlock(passphrase: try secure(testPassphrase)) }
            try fresh.unlock(passphrase: try secure("new passphrase"))
            #expect(try snapshot(fresh) == before)
            try fresh.verifyIntegrity()
            // The keychain that changed it keeps working.
            #expect(try secret(kc, "svc", "a") == bytes("secret a"))
        }
    }

    @Test("after changePassphrase, the same Keychain instance accepts the new passphrase and refuses the old one")
    func changePassphraseSameInstance() throws {
        try withVault { v throws in
            let kc = v.keychain
            try kc.add(.genericPassword, genp("svc", "a"), data: bytes("x"))
            let newParameters = PasswordHashParameters(
                opsLimit: PasswordHashParameters.interactive.opsLimit + 1,
                memLimit: PasswordHashParameters.interactive.memLimit)
            try kc.changePassphrase(
                old: try secure(testPassphrase), new: try secure("new passphrase"), parameters: newParameters)
            #expect(kc.kdfParameters == newParameters)
            kc.lock()
            expectError(.authFailed) { try kc.unlock(passphrase: try secure(testPassphrase)) }
            #expect(throws: Never.self) { try kc.unlock(passphrase: try secure("new passphrase")) }
            #expect(throws: Never.self) {
                try kc.changePassphrase(old: try secure("new passphrase"), new: try secure("third"))
            }
            #expect(try v.open().kdfParameters == newParameters)
        }
    }

    @Test("a passphrase changed through another connection (the CLI while the daemon runs) takes effect there too")
    func changePassphraseOtherInstance() throws {
        try withVault { v throws in
            let daemon = try v.openUnlocked()
            try v.keychain.changePassphrase(old: try secure(testPassphrase), new: try secure("new passphrase"))
            daemon.lock()
            expectError(.authFailed) { try daemon.unlock(passphrase: try secure(testPassphrase)) }
            #expect(throws: Never.self) { try daemon.unlock(passphrase: try secure("new passphrase")) }
            // A fresh open agrees.
            expectError(.authFailed) { try v.openUnlocked() }
            #expect(throws: Never.self) { try v.openUnlocked(passphrase: "new passphrase") }
        }
    }

    @Test("an empty passphrase is refused at create, and is not the one-NUL passphrase")
    func emptyPassphraseIsNotNUL() throws {
        try withTempDir { dir throws in
            expectError(.param) {
                try Keychain.create(
                    at: dir + "/v.vault", passphrase: try secure(""), parameters: .interactive,
                    deviceKeyPath: dir + "/dk")
            }
            #expect(!FileManager.default.fileExists(atPath: dir + "/v.vault"))
        }
        try withVault(passphrase: "\u{0}") { v throws in
            let kc = try v.open()
            expectError(.authFailed) { try kc.unlock(passphrase: try secure("")) }
            try kc.unlock(passphrase: try secure("\u{0}"))
        }
    }

    @Test("KDF parameters below INTERACTIVE are refused when creating or re-keying")
    func weakParametersRefused() throws {
        try withTempDir { dir throws in
            let weak = PasswordHashParameters(opsLimit: 1, memLimit: PasswordHashParameters.interactive.memLimit)
            expectError(.param) {
                try Keychain.create(
                    at: dir + "/v.vault", passphrase: try secure("p"), parameters: weak, deviceKeyPath: dir + "/dk")
            }
            #expect(!FileManager.default.fileExists(atPath: dir + "/v.vault"))
        }
        try withVault { v throws in
            let weak = PasswordHashParameters(opsLimit: PasswordHashParameters.interactive.opsLimit, memLimit: 8192)
            expectError(.param) {
                try v.keychain.changePassphrase(old: try secure(testPassphrase), new: try secure("n"), parameters: weak)
            }
            try v.openUnlocked().verifyIntegrity()
        }
    }
}

@Suite("Tampering with item rows")
struct RowTamperTests {
    @Test(
        "a flipped byte in an item's blob column is errSecDecode on read and fails the manifest",
        arguments: ["attrs", "item_key", "data"], ["first", "middle", "last"])
    func flippedByte(_ column: String, _ position: String) throws {
        try withVault { v throws in
            let kc = v.keychain
            let target = try kc.add(.genericPassword, genp("target", "a"), data: bytes("target secret"))
            try kc.add(.genericPassword, genp("bystander", "b"), data: bytes("bystander secret"))
            try kc.verifyIntegrity()

            try v.raw().flipByte(column, id: target.id) { count in
                switch position {
                case "first": 0;
                case "middle": count / 2;
                default: count - 1
                }
            }

            expectError(.decode, containing: ["tampered"]) { try secret(kc, "target", "a") }
            if column == "attrs" {
                expectError(.decode) { try kc.find(Query(.genericPassword, genp("target", "a"))) }
            } else {
                // Attributes are intact; only the data is refused.
                #expect(try kc.find(Query(.genericPassword, genp("target", "a"))).string(A.account) == "a")
            }
            // The damage is contained: the other item still reads.
            #expect(try secret(kc, "bystander", "b") == bytes("bystander secret"))
            expectError(.decode, containing: ["manifest"]) { try kc.verifyIntegrity() }
            expectError(.decode, containing: ["manifest"]) { try v.openUnlocked() }
        }
    }

    @Test(
        "altered version, data generation, class or index columns fail the manifest",
        arguments: ["version", "data_gen", "class", "pidx", "sidx"])
    func alteredColumns(_ column: String) throws {
        try withVault { v throws in
            let kc = v.keychain
            let target = try kc.add(.genericPassword, genp("target", "a"), data: bytes("target secret"))
            let db = try v.raw()
            switch column {
            case "version", "data_gen": try db.setItem(column, id: target.id, .integer(7))
            case "class": try db.setItem(column, id: target.id, .text("inet"))
            default: try db.flipByte(column, id: target.id) { $0 / 2 }
            }
            // Whatever a read gives, it is never the wrong data.
            do {
                let data = try secret(kc, "target", "a")
                #expect(data == bytes("target secret"))
            } catch let e as KeychainError {
                #expect(e.status == .decode || e.status == .itemNotFound, "\(e.status): \(e.message)")
            }
            if column == "class" {
                // Listed as an internet password it fails its own check: skipped and reported
                // (issue 15), never decoded against the wrong schema.
                let reported = DamageLog()
                kc.onDamagedRow { reported.add($0) }
                expectError(.itemNotFound) { try kc.copyMatching(Query(.internetPassword, matchLimit: .all)) }
                #expect(reported.all.map(\.id) == [target.id])
            }
            if column == "version" || column == "data_gen" {
                expectError(.decode) { try secret(kc, "target", "a") }
            }
            expectError(.decode, containing: ["manifest"]) { try kc.verifyIntegrity() }
            expectError(.decode, containing: ["manifest"]) { try v.openUnlocked() }
        }
    }

    @Test("swapping two items' item_key and data blobs is errSecDecode for both")
    func swappedBlobs() throws {
        try withVault { v throws in
            let kc = v.keychain
            let a = try kc.add(.genericPassword, genp("svc", "a"), data: bytes("secret of a"))
            let b = try kc.add(.genericPassword, genp("svc", "b"), data: bytes("secret of b"))
            let db = try v.raw()
            for column in ["item_key", "data"] {
                let ba = try db.itemBlob(column, id: a.id), bb = try db.itemBlob(column, id: b.id)
                try db.setItem(column, id: a.id, .blob(bb))
                try db.setItem(column, id: b.id, .blob(ba))
            }
            expectError(.decode) { try secret(kc, "svc", "a") }
            expectError(.decode) { try secret(kc, "svc", "b") }
            expectError(.decode, containing: ["manifest"]) { try v.openUnlocked() }
        }
    }

    @Test("swapping only the data blobs (same class key) is errSecDecode too")
    func swappedDataOnly() throws {
        try withVault { v throws in
            let kc = v.keychain
            let a = try kc.add(.genericPassword, genp("svc", "a"), data: bytes("secret of a"))
            let b = try kc.add(.genericPassword, genp("svc", "b"), data: bytes("secret of b"))
            let db = try v.raw()
            let da = try db.itemBlob("data", id: a.id), dbb = try db.itemBlob("data", id: b.id)
            try db.setItem("data", id: a.id, .blob(dbb))
            try db.setItem("data", id: b.id, .blob(da))
            expectError(.decode) { try secret(kc, "svc", "a") }
            expectError(.decode) { try secret(kc, "svc", "b") }
        }
    }

    @Test("swapping whole rows between ids is errSecDecode")
    func swappedRows() throws {
        try withVault { v throws in
            let kc = v.keychain
            let a = try kc.add(.genericPassword, genp("svc", "a"), data: bytes("secret of a"))
            let b = try kc.add(.genericPassword, genp("svc", "b"), data: bytes("secret of b"))
            let db = try v.raw()
            let ra = try db.itemRow(id: a.id), rb = try db.itemRow(id: b.id)
            // pidx is UNIQUE: move a out of the way first.
            var parked = ra; parked[1] = .blob([0])
            try db.writeItemRow(id: a.id, parked)
            try db.writeItemRow(id: b.id, ra)
            try db.writeItemRow(id: a.id, rb)
            expectError(.decode) { try secret(kc, "svc", "a") }
            expectError(.decode) { try secret(kc, "svc", "b") }
            // A listing skips both damaged rows and reports them (issue 15): nothing is left.
            let reported = DamageLog()
            kc.onDamagedRow { reported.add($0) }
            expectError(.itemNotFound) { try kc.copyMatching(Query(.genericPassword, matchLimit: .all)) }
            #expect(reported.all.map(\.id).sorted() == [a.id, b.id])
            expectError(.decode, containing: ["manifest"]) { try v.openUnlocked() }
        }
    }

    @Test("a row deleted behind the keychain's back fails the integrity check")
    func deletedRow() throws {
        try withVault { v throws in
            let kc = v.keychain
            let a = try kc.add(.genericPassword, genp("svc", "a"), data: bytes("a"))
            try kc.add(.genericPassword, genp("svc", "b"), data: bytes("b"))
            try v.raw().query("DELETE FROM items WHERE id = ?", [.integer(a.id)])
            expectError(.itemNotFound) { try secret(kc, "svc", "a") }
            expectError(.decode, containing: ["manifest"]) { try kc.verifyIntegrity() }
            expectError(.decode, containing: ["manifest", "1 rows found, 2 expected"]) { try v.openUnlocked() }
        }
    }

    @Test("a row inserted behind the keychain's back fails the integrity check")
    func insertedRow() throws {
        try withVault { v throws in
            let kc = v.keychain
            let a = try kc.add(.genericPassword, genp("svc", "a"), data: bytes("a"))
            let db = try v.raw()
            var copy = try db.itemRow(id: a.id)
            copy[1] = .blob([1, 2, 3])
            let columns = RawDB.itemColumns.joined(separator: ", ")
            try db.query(
                "INSERT INTO items(id, \(columns)) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)", [.integer(a.id + 1)] + copy)
            expectError(.decode, containing: ["manifest"]) { try kc.verifyIntegrity() }
            expectError(.decode, containing: ["manifest"]) { try v.openUnlocked() }
        }
    }

    @Test("replaying an old version of a row is detected")
    func replayedRow() throws {
        try withVault { v throws in
            let kc = v.keychain
            let a = try kc.add(.genericPassword, genp("svc", "a"), data: bytes("old secret"))
            try kc.add(.genericPassword, genp("svc", "b"), data: bytes("b"))
            let db = try v.raw()
            let old = try db.itemRow(id: a.id)
            try kc.update(
                Query(.genericPassword, genp("svc", "a")), attributes: [A.label: s("new")], data: bytes("new secret"))
            #expect(try secret(kc, "svc", "a") == bytes("new secret"))
            try kc.verifyIntegrity()
            try db.writeItemRow(id: a.id, old)
            expectError(.decode, containing: ["manifest"]) { try kc.verifyIntegrity() }
            expectError(.decode, containing: ["manifest", "replayed"]) { try v.openUnlocked() }
        }
    }

    @Test("a manifest that does not match is errSecDecode at unlock")
    func tamperedManifest() throws {
        try withVault { v throws in
            try v.keychain.add(.genericPassword, genp("svc", "a"), data: bytes("a"))
            let db = try v.raw()
            var manifest = try #require(try db.meta("manifest"))
            manifest[20] ^= 1
            try db.setMeta("manifest", manifest)
            expectError(.decode, containing: ["manifest"]) { try v.openUnlocked() }
            try db.setMeta("manifest", [1, 2, 3])
            expectError(.decode, containing: ["manifest"]) { try v.openUnlocked() }
        }
    }
}

private func s(_ v: String) -> AttributeValue { .string(v) }
