import Foundation
import Keychain
import KeychainCrypto
import Testing

private let A = Schema.self

@Suite("Tampering with the vault header and class keys")
struct HeaderTamperTests {
    static let interactive = PasswordHashParameters.interactive
    static let sensitive = PasswordHashParameters.sensitive

    static let outOfRange: [(UInt64, UInt64)] = [
        (interactive.opsLimit - 1, interactive.memLimit),
        (interactive.opsLimit, interactive.memLimit - 1),
        (1, 8192),
        // Would fail allocation (errSecAllocate) if derivation were attempted.
        (1, UInt64(1) << 50),
        // Above SENSITIVE, the most `init --kdf` can choose.
        (sensitive.opsLimit + 1, interactive.memLimit),
        (interactive.opsLimit, sensitive.memLimit + 1),
    ]

    @Test(
        "KDF parameters outside the accepted range are refused with errSecDecode before deriving",
        arguments: outOfRange)
    func outOfRangeParameters(_ ops: UInt64, _ mem: UInt64) throws {
        try withVault { v throws in
            let db = try v.raw()
            try db.setMeta("kdf_ops", le64(ops))
            try db.setMeta("kdf_mem", le64(mem))
            let kc = try v.open()
            #expect(kc.kdfParameters == PasswordHashParameters(opsLimit: ops, memLimit: mem))
            // Refused before any Argon2id work: the 2^50-byte case would otherwise be errSecAllocate.
            expectError(.decode, containing: ["Argon2id parameters"]) {
                try kc.unlock(passphrase: try secure(testPassphrase))
            }
            #expect(kc.lockState == .neverUnlocked)
        }
    }

    @Test(
        "KDF parameters changed within range: refused before deriving by this device's KDF mark; accepted, they are bound into the wrap: errSecAuthFailed"
    )
    func changedParameters() throws {
        try withVault { v throws in
            try v.raw().setMeta("kdf_ops", le64(Self.interactive.opsLimit + 1))
            let kc = try v.open()
            expectError(.decode, containing: ["other than those this device last unlocked it with"]) {
                try kc.unlock(passphrase: try secure(testPassphrase))
            }
            expectError(.authFailed) { try kc.unlock(passphrase: try secure(testPassphrase), acceptKDFChange: true) }
            #expect(kc.lockState == .neverUnlocked)
        }
    }

    @Test(
        "altered salt, wrapped master key or vault id: errSecAuthFailed, never a wrong key",
        arguments: [
            "kdf_salt", "master_key", "vault_id",
        ])
    func alteredHeaderField(_ name: String) throws {
        try withVault { v throws in
            try v.keychain.add(.genericPassword, genp("svc", "a"), data: bytes("x"))
            let db = try v.raw()
            var value = try #require(try db.meta(name))
            value[value.count / 2] ^= 0x01
            try db.setMeta(name, value)
            let kc = try v.open()
            expectError(.authFailed) { try kc.unlock(passphrase: try secure(testPassphrase)) }
        }
    }

    @Test("malformed or missing header fields are errSecDecode")
    func malformedHeader() throws {
        try withVault { v throws in
            let db = try v.raw()
            try db.setMeta("kdf_ops", [1, 2, 3])
            expectError(.decode, containing: ["kdf_ops"]) { try v.open() }
            try db.query("DELETE FROM meta WHERE name = 'kdf_salt'")
            try db.setMeta("kdf_ops", le64(Self.interactive.opsLimit))
            expectError(.decode, containing: ["kdf_salt"]) { try v.open() }
        }
    }

    @Test("a newer vault format in the header is errSecUnimplemented")
    func newerFormatField() throws {
        try withVault { v throws in
            try v.raw().setMeta("format", le64(currentVaultFormat + 1))
            expectError(.unimplemented, containing: ["newer"]) { try v.open() }
        }
    }

    @Test("an altered or missing class key is errSecDecode at unlock")
    func classKeys() throws {
        try withVault { v throws in
            let db = try v.raw()
            guard
                case .blob(var wrapped)? = try db.query("SELECT wrapped FROM class_keys WHERE protection = 'ak'").first?
                    .first
            else {
                Issue.record("no class key for ak"); return
            }
            wrapped[30] ^= 0x80
            try db.query("UPDATE class_keys SET wrapped = ? WHERE protection = 'ak'", [.blob(wrapped)])
            expectError(.decode, containing: ["whenUnlocked", "class key"]) { try v.openUnlocked() }
            try db.query("DELETE FROM class_keys WHERE protection = 'ak'")
            expectError(.decode, containing: ["missing"]) { try v.openUnlocked() }
        }
    }
}

@Suite("Files that are not vaults")
struct NotAVaultTests {
    enum Kind: String, CaseIterable, Sendable {
        case randomBytes, emptyFile, otherSQLite, directory, sqliteHeaderGarbage
    }

    @Test(
        "opening something that is not a vault is errSecDecode 'not a keychainfs vault', and leaves it untouched",
        arguments: Kind.allCases)
    func notAVault(_ kind: Kind) throws {
        try withTempDir { dir throws in
            let path = dir + "/thing"
            switch kind {
            case .randomBytes:
                var rng = SystemRandomNumberGenerator()
                let data = (0..<8192).map { _ in UInt8.random(in: 0...255, using: &rng) }
                #expect(FileManager.default.createFile(atPath: path, contents: Data(data)))
            case .emptyFile:
                #expect(FileManager.default.createFile(atPath: path, contents: Data()))
            case .otherSQLite:
                let db = try RawDB(path)
                try db.exec("CREATE TABLE notes(x TEXT); INSERT INTO notes VALUES('hello');")
            case .directory:
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            case .sqliteHeaderGarbage:
                var data = Array("SQLite format 3\0".utf8)
                data += [UInt8](repeating: 0xAB, count: 4096)
                #expect(FileManager.default.createFile(atPath: path, contents: Data(data)))
            }
            let before = kind == .directory ? nil : FileManager.default.contents(atPath: path)
            expectError(.decode, containing: ["not a keychainfs vault"]) {
                try Keychain.open(at: path, deviceKeyPath: dir + "/dk")
            }
            if kind != .directory {
                #expect(FileManager.default.contents(atPath: path) == before)
            }
            #expect(!FileManager.default.fileExists(atPath: dir + "/dk"))
            // Creating over it is refused too.
            expectError(.duplicateKeychain) {
                try Keychain.create(
                    at: path, passphrase: try secure("p"), parameters: .interactive, deviceKeyPath: dir + "/dk")
            }
            if kind != .directory { #expect(FileManager.default.contents(atPath: path) == before) }
        }
    }

    @Test("a missing file is errSecNoSuchKeychain, and nothing is created")
    func missingFile() throws {
        try withTempDir { dir throws in
            expectError(.noSuchKeychain) { try Keychain.open(at: dir + "/absent.vault", deviceKeyPath: dir + "/dk") }
            expectError(.noSuchKeychain) {
                try Keychain.open(at: dir + "/no/such/dir/absent.vault", deviceKeyPath: dir + "/dk")
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: dir).isEmpty)
        }
    }

    @Test("a vault with a newer schema (user_version 99) is errSecUnimplemented 'newer'")
    func newerSchema() throws {
        try withVault { v throws in
            try v.raw().exec("PRAGMA user_version = 99")
            expectError(.unimplemented, containing: ["newer", "99"]) { try v.open() }
        }
    }

    @Test("create never overwrites an existing vault")
    func createOverExisting() throws {
        try withVault { v throws in
            try v.keychain.add(.genericPassword, genp("svc", "a"), data: bytes("keep me"))
            expectError(.duplicateKeychain) {
                try Keychain.create(
                    at: v.path, passphrase: try secure("other"), parameters: .interactive,
                    deviceKeyPath: v.deviceKeyPath)
            }
            #expect(try secret(try v.openUnlocked(), "svc", "a") == bytes("keep me"))
        }
    }
}

@Suite("Device binding")
struct DeviceBindingTests {
    @Test(
        "ThisDeviceOnly data is unreadable with another device key; other items still read",
        arguments: ["absent", "different"])
    func otherDevice(_ otherKey: String) throws {
        try withVault { v throws in
            let kc = v.keychain
            try kc.add(.genericPassword, genp("svc", "plain"), data: bytes("plain secret"))
            try kc.add(
                .genericPassword, genp("svc", "bound", [A.accessible: .accessibility(.whenUnlockedThisDeviceOnly)]),
                data: bytes("bound secret"))
            try kc.add(
                .genericPassword,
                genp("svc", "bound-afu", [A.accessible: .accessibility(.afterFirstUnlockThisDeviceOnly)]),
                data: bytes("afu"))
            let otherPath = v.dir + "/other-machine/device.key"
            if otherKey == "different" {
                try FileManager.default.createDirectory(
                    atPath: v.dir + "/other-machine", withIntermediateDirectories: true)
                #expect(FileManager.default.createFile(atPath: otherPath, contents: Data(Sodium.randomBytes(32))))
            }
            let elsewhere = try v.openUnlocked(deviceKeyPath: otherPath)
            #expect(try secret(elsewhere, "svc", "plain") == bytes("plain secret"))
            expectError(.interactionNotAllowed, containing: ["device key"]) { try secret(elsewhere, "svc", "bound") }
            expectError(.interactionNotAllowed, containing: ["device key"]) {
                try secret(elsewhere, "svc", "bound-afu")
            }
            // Attributes are still listed.
            #expect(try elsewhere.copyMatching(Query(.genericPassword, genp("svc"), matchLimit: .all)).count == 3)
            expectError(.interactionNotAllowed) {
                try elsewhere.add(
                    .genericPassword, genp("svc", "new", [A.accessible: .accessibility(.whenUnlockedThisDeviceOnly)]),
                    data: [])
            }
            try elsewhere.verifyIntegrity()
            // Opening elsewhere does not create a device key there.
            #expect(FileManager.default.fileExists(atPath: otherPath) == (otherKey == "different"))
            // Back on the right device everything reads.
            #expect(try secret(try v.openUnlocked(), "svc", "bound") == bytes("bound secret"))
        }
    }

    @Test("a device key file of the wrong size is errSecDecode")
    func malformedDeviceKey() throws {
        try withVault { v throws in
            let bad = v.dir + "/bad.key"
            #expect(FileManager.default.createFile(atPath: bad, contents: Data([1, 2, 3])))
            expectError(.decode, containing: ["32 bytes"]) { try v.openUnlocked(deviceKeyPath: bad) }
        }
    }
}
