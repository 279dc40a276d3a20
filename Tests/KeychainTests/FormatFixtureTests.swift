import Foundation
@_spi(CallerRule) import Keychain
import KeychainCrypto
import Testing

// The format-1 fixture (Tests/Fixtures/format1): a vault made by the CLI of format 1 (commit
// 47c43f1, before the authenticated manifest) with make-fixture.sh. Every item, attribute,
// class key and the access policy it holds must survive whatever today's code does on opening.

enum FormatOneFixture {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fixtures/format1").path
    /// The fixture's passphrase (also in Tests/Fixtures/format1/passphrase).
    static let passphrase = "fixture passphrase: format 1"

    /// Copies the vault and its device key into `dir` (the committed files are never opened
    /// for writing); returns the copy's vault path and device key path.
    static func copy(into dir: String) throws -> (vault: String, deviceKey: String) {
        let vault = dir + "/format1.vault", deviceKey = dir + "/state/device.key"
        try FileManager.default.createDirectory(atPath: dir + "/state", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: directory + "/format1.vault", toPath: vault)
        try FileManager.default.copyItem(atPath: directory + "/device.key", toPath: deviceKey)
        return (vault, deviceKey)
    }

    /// A caller in every group of the fixture's policy, with presence given for every item.
    static let everyGroup = Caller(
        accessGroups: ["default", "team", "ops"], authenticationUI: .fail,
        presenceGrants: Set(Int64(1)...Int64(11)))

    /// What make-fixture.sh stored: class, id, the grouping attribute, account, the secret.
    static let passwords: [(ItemClass, Int64, String, String, [UInt8])] = [
        (.genericPassword, 1, "github.com", "alice", Array("github secret v2".utf8)),
        (.genericPassword, 2, "github.com", "bob", Array("second account".utf8)),
        (.genericPassword, 3, "deploy", "ci", Array("team secret".utf8)),
        (.genericPassword, 4, "bank", "me", Array("presence secret".utf8)),
        (.genericPassword, 5, "sync.example", "sam", Array("synced".utf8)),
        (.genericPassword, 6, "binary", "raw", [0, 1] + Array("binary".utf8) + [0xff]),
        (.internetPassword, 7, "example.com", "carol", Array("inet secret".utf8)),
        (.internetPassword, 8, "ftp.example.org", "dave", Array("ftp secret".utf8)),
    ]

    /// Checks that `kc` (unlocked) holds exactly what the fixture was made with.
    static func expectContents(
        _ kc: Keychain, ids: [Int64] = Array(1...11), sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let all = try snapshot(kc, caller: everyGroup)
        #expect(all.map(\.id) == ids, sourceLocation: sourceLocation)
        for (itemClass, id, grouping, account, data) in passwords {
            let item = all.first { $0.id == id }
            #expect(item?.itemClass == itemClass, sourceLocation: sourceLocation)
            #expect(
                item?.attributes[Schema.groupingAttribute(of: itemClass)] == .string(grouping),
                sourceLocation: sourceLocation)
            #expect(item?.attributes[Schema.account] == .string(account), sourceLocation: sourceLocation)
            #expect(item?.data == data, "item \(id)", sourceLocation: sourceLocation)
        }
        let first = try kc.item(id: 1, itemClass: .genericPassword, withData: false, caller: everyGroup)
        #expect(first.string(Schema.label) == "GitHub token", sourceLocation: sourceLocation)
        #expect(first.string(Schema.named("comment")) == "a comment", sourceLocation: sourceLocation)
        #expect(first[Schema.named("type")] == .number(1234), sourceLocation: sourceLocation)
        #expect(all.first { $0.id == 3 }?.attributes[Schema.accessGroup] == .string("team"))
        #expect(all.first { $0.id == 3 }?.attributes[Schema.accessible] == .accessibility(.whenUnlockedThisDeviceOnly))
        #expect(all.first { $0.id == 4 }?.attributes[Schema.accessControl] != nil, sourceLocation: sourceLocation)
        #expect(all.first { $0.id == 5 }?.attributes[Schema.synchronizable] == .bool(true))
        #expect(all.first { $0.id == 7 }?.attributes[Schema.named("port")] == .number(8443))
        let ca = try Data(contentsOf: URL(fileURLWithPath: directory + "/ca.crt"))
        #expect(all.first { $0.id == 9 }?.data == (try CertificateData.der(from: Array(ca))))
        #expect(all.first { $0.id == 10 }?.attributes[Schema.label] == .string("Fixture Identity"))
        #expect(all.first { $0.id == 11 }?.itemClass == .key, sourceLocation: sourceLocation)
        let policy = try kc.accessPolicy()
        #expect(policy.groups.map(\.name) == ["team", "ops"], sourceLocation: sourceLocation)
        #expect(policy.groups.first?.executables == ["/usr/bin/dd", "/usr/bin/cat"], sourceLocation: sourceLocation)
        #expect(policy.accessGroups(forExecutable: "/usr/bin/tee").contains("ops"), sourceLocation: sourceLocation)
    }
}

@Suite("The format-1 fixture")
struct FormatFixtureTests {
    @Test("today's code opens the format-1 fixture and finds every item, attribute, class key and the policy")
    func opensFixture() throws {
        try withTempDir { dir throws in
            let (vault, deviceKey) = try FormatOneFixture.copy(into: dir)
            let kc = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
            try kc.unlock(passphrase: try secure(FormatOneFixture.passphrase))
            try FormatOneFixture.expectContents(kc)
        }
    }

    /// Everything format 2 must keep byte for byte: rows, class keys, the policy, the salt.
    static func preserved(_ db: RawDB) throws -> [[Cell]] {
        try db.query("SELECT id, \(RawDB.itemColumns.joined(separator: ", ")) FROM items ORDER BY id")
            + db.query("SELECT protection, wrapped FROM class_keys ORDER BY protection")
            + db.query(
                "SELECT name, value FROM meta WHERE name IN ('access_policy', 'kdf_salt', 'vault_id') ORDER BY name")
    }

    @Test("the first unlock migrates the fixture to format 6 in one transaction, losing nothing")
    func migratesFixture() throws {
        try withTempDir { dir throws in
            let (vault, deviceKey) = try FormatOneFixture.copy(into: dir)
            let before = try Self.preserved(RawDB(vault))
            #expect(try RawDB(vault).meta("format") == le64(1))
            let kc = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
            try kc.unlock(passphrase: try secure(FormatOneFixture.passphrase))
            try FormatOneFixture.expectContents(kc)
            let db = try RawDB(vault)
            // Format-1 code reads this field and refuses anything above 1 as "newer". The manifest:
            // format 6's 152 bytes (the name lists' accumulator beside the top).
            #expect(try db.meta("format") == le64(currentVaultFormat))
            #expect(try db.meta("manifest")?.count == 152)
            #expect(try Self.preserved(db) == before)
            // Opened again: verified, not migrated again; writes go on with ids never reused
            // (the fixture's last id, 12, was deleted).
            let manifest = try db.meta("manifest")
            let again = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
            try again.unlock(passphrase: try secure(FormatOneFixture.passphrase))
            #expect(try db.meta("manifest") == manifest)
            let added = try again.add(.genericPassword, genp("after", "migration"), data: bytes("x"))
            #expect(added.id == 13)
            try FormatOneFixture.expectContents(
                try Keychain.open(at: vault, deviceKeyPath: deviceKey).unlocked(FormatOneFixture.passphrase),
                ids: Array(1...11) + [13])
        }
    }

    @Test("a tampered format-1 vault is refused, not migrated: the file keeps format 1")
    func damagedFixtureIsNotMigrated() throws {
        try withTempDir { dir throws in
            let (vault, deviceKey) = try FormatOneFixture.copy(into: dir)
            try RawDB(vault).exec("DELETE FROM items WHERE id = 2")
            let before = try Self.preserved(RawDB(vault))
            let kc = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
            expectError(.decode, containing: ["format-1 manifest", "not migrated"]) {
                try kc.unlock(passphrase: try secure(FormatOneFixture.passphrase))
            }
            #expect(kc.lockState == .neverUnlocked)
            #expect(try RawDB(vault).meta("format") == le64(1))
            #expect(try Self.preserved(RawDB(vault)) == before)
        }
    }
}

extension Keychain {
    /// This keychain, unlocked with `passphrase` (for chaining in tests).
    func unlocked(_ passphrase: String) throws -> Keychain {
        try unlock(passphrase: try secure(passphrase))
        return self
    }
}
