import Foundation
import KeychainCrypto
import Testing

@_spi(CallerRule) @testable import Keychain

// The format-3 fixture (Tests/Fixtures/format3): a vault made by commit ec33941's CLI and
// Secret Service provider (secret-tool on a private bus), with the attribute index and the flat
// manifest accumulator of format 3. Its first unlock by today's code migrates it to format 6
// (the manifest's buckets and the name lists), in one transaction, changing no item or index row.

enum FormatThreeFixture {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fixtures/format3").path
    /// The fixture's passphrase (also in Tests/Fixtures/format3/passphrase).
    static let passphrase = "fixture passphrase: format 3"

    static func copy(into dir: String) throws -> (vault: String, deviceKey: String) {
        let vault = dir + "/format3.vault", deviceKey = dir + "/state/device.key"
        try FileManager.default.createDirectory(atPath: dir + "/state", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: directory + "/format3.vault", toPath: vault)
        try FileManager.default.copyItem(atPath: directory + "/device.key", toPath: deviceKey)
        return (vault, deviceKey)
    }

    /// Both groups of the fixture's policy, presence given for every item.
    static let everyGroup = Caller(
        accessGroups: ["default", "team"], authenticationUI: .fail, presenceGrants: Set(Int64(1)...Int64(12)))

    /// What make-fixture.sh stored: id and secret.
    static let secrets: [Int64: String] = [
        1: "github secret", 2: "team secret", 3: "presence secret", 4: "inet secret", 5: "ftp secret",
        6: "mail secret v2", 7: "git secret", 8: "app secret", 9: "app secret 2", 10: "custom secret",
        11: "docker secret",
    ]

    /// Every item row, index row, class key and the meta blobs the migration must keep byte for byte.
    static func preserved(_ db: RawDB) throws -> [[Cell]] {
        try db.query("SELECT id, \(RawDB.itemColumns.joined(separator: ", ")) FROM items ORDER BY id")
            + db.query("SELECT item_id, tag FROM attr_index ORDER BY item_id, tag")
            + db.query("SELECT protection, wrapped FROM class_keys ORDER BY protection")
            + db.query(
                "SELECT name, value FROM meta WHERE name IN ('access_policy', 'kdf_salt', 'vault_id') ORDER BY name")
    }

    /// Every item's secret and the searches by attribute answer as the fixture was made.
    static func expectContents(_ kc: Keychain) throws {
        let all = try visiblePasswordItems(kc, caller: everyGroup)
        #expect(all.map(\.id).sorted() == Array(1...11))
        for (id, secret) in secrets {
            let itemClass: ItemClass = [4, 5, 7, 11].contains(id) ? .internetPassword : .genericPassword
            let item = try kc.item(id: id, itemClass: itemClass, withData: true, caller: everyGroup)
            #expect(item.data == bytes(secret), "item \(id)")
        }
        func ids(_ query: [String: String], _ caller: Caller = .default) throws -> [Int64] {
            try kc.secretServiceItems(matching: query, caller: caller).map(\.id).sorted()
        }
        #expect(try ids(["tier": "gold"]) == [10])
        #expect(try ids(["application": "fixture-app"]) == [8, 9])
        #expect(try ids(["xdg:schema": "org.git.Password", "host": "git.example.com"]) == [7])
        #expect(try ids(["service": "deploy"]) == [], "another group's item stays hidden")
        #expect(try ids(["service": "deploy"], everyGroup) == [2])
    }
}

@Suite("The format-3 fixture")
struct FormatThreeFixtureTests {
    @Test(
        "the first unlock migrates format 3 to 5: rows, index rows, keys and policy byte for byte, buckets that verify"
    )
    func migrates() throws {
        try withTempDir { dir throws in
            let (vault, deviceKey) = try FormatThreeFixture.copy(into: dir)
            #expect(try RawDB(vault).meta("format") == le64(3))
            #expect(try RawDB(vault).query("PRAGMA user_version") == [[.integer(2)]])
            let before = try FormatThreeFixture.preserved(RawDB(vault))
            let oldStored = try #require(try RawDB(vault).meta("manifest"))
            let oldCounter = try #require(Manifest.decode(oldStored)).0.counter
            let kc = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
            try kc.unlock(passphrase: try secure(FormatThreeFixture.passphrase))

            let db = try RawDB(vault)
            #expect(try db.meta("format") == le64(currentVaultFormat))
            // Format-3 code (store schema 2) refuses user_version 4 as newer, and its header check
            // refuses format 6 ("vault format 6 is newer than this keychainfs supports (3)").
            #expect(try db.query("PRAGMA user_version") == [[.integer(currentStoreSchema)]])
            #expect(
                try FormatThreeFixture.preserved(db) == before, "no item row, index row, class key or policy changed")
            // Items 1–11 are in bucket 0: one stored bucket, counting the 11 rows.
            let buckets = try db.query("SELECT bucket, count FROM manifest_bucket")
            #expect(buckets == [[.integer(0), .integer(11)]])
            let stored = try #require(try db.meta("manifest"))
            let manifest = try #require(Manifest.decode(stored)).0
            #expect(manifest.count == 11 && manifest.counter == oldCounter + 1)
            try FormatThreeFixture.expectContents(kc)
            let report = try kc.verify(passphrase: try secure(FormatThreeFixture.passphrase))
            #expect(
                report.isClean && report.format == Int64(currentVaultFormat), "\(report.failures) \(report.damaged)")

            // Opened again: verified (fully and incrementally), not migrated again; a write
            // moves the bucket and the top together.
            let again = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
            try again.unlock(passphrase: try secure(FormatThreeFixture.passphrase), incrementalCheck: true)
            #expect(again.waitForIntegrityCheck() == nil)
            #expect(try db.meta("manifest") == (try RawDB(vault).meta("manifest")))
            let added = try addSecretServiceItem(again, ["tier": "gold", "application": "new"])
            #expect(added.id == 13, "ids are never reused: 12 was deleted")
            #expect(try again.secretServiceItems(matching: ["tier": "gold"]).map(\.id) == [10, 13])
            #expect(
                try RawDB(vault).query("SELECT bucket, count FROM manifest_bucket") == [[.integer(0), .integer(12)]])
            try Keychain.open(at: vault, deviceKeyPath: deviceKey).unlock(
                passphrase: try secure(FormatThreeFixture.passphrase))
        }
    }

    @Test("verify checks the format-3 fixture as format 3, changing nothing")
    func verifyBeforeMigration() throws {
        try withTempDir { dir throws in
            let (vault, deviceKey) = try FormatThreeFixture.copy(into: dir)
            let before = try FormatThreeFixture.preserved(RawDB(vault))
            let report = try Keychain.open(at: vault, deviceKeyPath: deviceKey).verify(
                passphrase: try secure(FormatThreeFixture.passphrase))
            #expect(report.isClean, "\(report.failures) \(report.damaged)")
            #expect(report.format == 3)
            #expect(try RawDB(vault).meta("format") == le64(3))
            #expect(try FormatThreeFixture.preserved(RawDB(vault)) == before)
        }
    }

    @Test("a tampered format-3 vault is refused, not migrated: the file keeps format 3 and schema 2")
    func damagedFixtureIsNotMigrated() throws {
        try withTempDir { dir throws in
            let (vault, deviceKey) = try FormatThreeFixture.copy(into: dir)
            try RawDB(vault).exec("DELETE FROM attr_index WHERE item_id = 10")
            let kc = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
            expectError(.decode, containing: ["integrity check failed", "not migrated"]) {
                try kc.unlock(passphrase: try secure(FormatThreeFixture.passphrase))
            }
            #expect(try RawDB(vault).meta("format") == le64(3))
            #expect(try RawDB(vault).query("PRAGMA user_version") == [[.integer(2)]])
        }
    }
}
