import Foundation
import KeychainCrypto
import Testing

@_spi(CallerRule) @testable import Keychain

// The format-2 fixture (Tests/Fixtures/format2): a vault made by commit 49d5068's CLI and
// Secret Service provider (secret-tool on a private bus), before the attribute index. Its first
// unlock by today's code builds the index once, in one transaction, changing no item row.

enum FormatTwoFixture {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fixtures/format2").path
    /// The fixture's passphrase (also in Tests/Fixtures/format2/passphrase).
    static let passphrase = "fixture passphrase: format 2"

    static func copy(into dir: String) throws -> (vault: String, deviceKey: String) {
        let vault = dir + "/format2.vault", deviceKey = dir + "/state/device.key"
        try FileManager.default.createDirectory(atPath: dir + "/state", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: directory + "/format2.vault", toPath: vault)
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

    /// The item rows, class keys and the meta blobs migration must keep byte for byte.
    static func preserved(_ db: RawDB) throws -> [[Cell]] {
        try db.query("SELECT id, \(RawDB.itemColumns.joined(separator: ", ")) FROM items ORDER BY id")
            + db.query("SELECT protection, wrapped FROM class_keys ORDER BY protection")
            + db.query(
                "SELECT name, value FROM meta WHERE name IN ('access_policy', 'kdf_salt', 'vault_id') ORDER BY name")
    }
}

@Suite("The format-2 fixture")
struct FormatTwoFixtureTests {
    @Test(
        "the first unlock builds the attribute index once, keeping every row; searches by any attribute find the right items"
    )
    func migratesAndSearches() throws {
        try withTempDir { dir throws in
            let (vault, deviceKey) = try FormatTwoFixture.copy(into: dir)
            let before = try FormatTwoFixture.preserved(RawDB(vault))
            #expect(try RawDB(vault).meta("format") == le64(2))
            #expect(try RawDB(vault).query("PRAGMA user_version") == [[.integer(1)]])
            let kc = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
            try kc.unlock(passphrase: try secure(FormatTwoFixture.passphrase))

            let db = try RawDB(vault)
            #expect(try db.meta("format") == le64(currentVaultFormat))
            // Schema-1 code refuses user_version 3 as a newer format.
            #expect(try db.query("PRAGMA user_version") == [[.integer(currentStoreSchema)]])
            #expect(try FormatTwoFixture.preserved(db) == before, "no item row, class key or policy changed")
            let rows = try attributeIndexRows(vault)
            #expect(rows == (try expectedIndexRows(kc, caller: FormatTwoFixture.everyGroup)))
            #expect(Set(rows.map(\.id)) == Set(1...11))

            // Every item and secret still there.
            let all = try visiblePasswordItems(kc, caller: FormatTwoFixture.everyGroup)
            #expect(all.map(\.id).sorted() == Array(1...11))
            for (id, secret) in FormatTwoFixture.secrets {
                let itemClass: ItemClass = [4, 5, 7, 11].contains(id) ? .internetPassword : .genericPassword
                let item = try kc.item(
                    id: id, itemClass: itemClass, withData: true, caller: FormatTwoFixture.everyGroup)
                #expect(item.data == bytes(secret), "item \(id)")
            }

            // SearchItems by kept and by mapped attributes.
            func ids(_ query: [String: String], _ caller: Caller = .default) throws -> [Int64] {
                try kc.secretServiceItems(matching: query, caller: caller).map(\.id).sorted()
            }
            #expect(try ids(["tier": "gold"]) == [10])
            #expect(try ids(["xdg:schema": "org.example.Custom", "region": "eu-west"]) == [10])
            #expect(try ids(["application": "fixture-app"]) == [8, 9])
            #expect(try ids(["color": "blue", "project": "beta"]) == [9])
            #expect(try ids(["xdg:schema": "org.git.Password", "host": "git.example.com"]) == [7])
            #expect(try ids(["xdg:schema": "io.docker.Credentials"]) == [11])
            #expect(try ids(["service": "mail.example.org", "username": "mia"]) == [6])
            // CLI-made items by the names a client sees for them.
            #expect(try ids(["service": "github.com", "username": "alice"]) == [1])
            #expect(try ids(["xdg:schema": "org.gnome.keyring.NetworkPassword"]) == [4, 5])
            #expect(try ids(["server": "example.com", "port": "8443", "object": "/login"]) == [4])
            #expect(try ids(["service": "deploy"]) == [], "another group's item stays hidden")
            #expect(try ids(["service": "deploy"], FormatTwoFixture.everyGroup) == [2])
            #expect(try ids(["tier": "silver"]) == [])

            // Opened again: verified, not migrated again.
            let manifest = try db.meta("manifest")
            let again = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
            try again.unlock(passphrase: try secure(FormatTwoFixture.passphrase))
            #expect(try db.meta("manifest") == manifest)
            #expect(try attributeIndexRows(vault) == rows)
            let added = try addSecretServiceItem(again, ["tier": "gold", "application": "new"])
            #expect(added.id == 13, "ids are never reused: 12 was deleted")
            #expect(try again.secretServiceItems(matching: ["tier": "gold"]).map(\.id) == [10, 13])
        }
    }

    @Test("verify checks the format-2 fixture as format 2, changing nothing")
    func verifyBeforeMigration() throws {
        try withTempDir { dir throws in
            let (vault, deviceKey) = try FormatTwoFixture.copy(into: dir)
            let before = try FormatTwoFixture.preserved(RawDB(vault))
            let report = try Keychain.open(at: vault, deviceKeyPath: deviceKey).verify(
                passphrase: try secure(FormatTwoFixture.passphrase))
            #expect(report.isClean, "\(report.failures) \(report.damaged)")
            #expect(report.format == 2)
            #expect(try RawDB(vault).meta("format") == le64(2))
            #expect(try FormatTwoFixture.preserved(RawDB(vault)) == before)
        }
    }

    @Test("a tampered format-2 vault is refused, not migrated: the file keeps format 2 and schema 1")
    func damagedFixtureIsNotMigrated() throws {
        try withTempDir { dir throws in
            let (vault, deviceKey) = try FormatTwoFixture.copy(into: dir)
            try RawDB(vault).exec("DELETE FROM items WHERE id = 8")
            let kc = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
            expectError(.decode, containing: ["integrity check failed", "not migrated"]) {
                try kc.unlock(passphrase: try secure(FormatTwoFixture.passphrase))
            }
            #expect(try RawDB(vault).meta("format") == le64(2))
            #expect(try RawDB(vault).query("PRAGMA user_version") == [[.integer(1)]])
            #expect(try RawDB(vault).query("SELECT name FROM sqlite_master WHERE name = 'attr_index'") == [])
        }
    }

    @Test("the format-1 fixture gets its attribute index through the same first unlock")
    func formatOneGetsIndex() throws {
        try withTempDir { dir throws in
            let (vault, deviceKey) = try FormatOneFixture.copy(into: dir)
            let kc = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
            try kc.unlock(passphrase: try secure(FormatOneFixture.passphrase))
            #expect(try RawDB(vault).meta("format") == le64(currentVaultFormat))
            #expect(try attributeIndexRows(vault) == (try expectedIndexRows(kc, caller: FormatOneFixture.everyGroup)))
            let found = try kc.secretServiceItems(
                matching: ["service": "github.com"], caller: FormatOneFixture.everyGroup)
            #expect(found.map(\.id) == [1, 2])
            #expect(
                try kc.secretServiceItems(matching: ["user": "dave"], caller: FormatOneFixture.everyGroup).map(\.id)
                    == [8])
        }
    }
}
