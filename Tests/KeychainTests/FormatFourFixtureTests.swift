import Foundation
import KeychainCrypto
import Testing

@_spi(CallerRule) @testable import Keychain

// The format-4 fixture (Tests/Fixtures/format4): a vault made by commit d7caa22's CLI and Secret
// Service provider, with the manifest's buckets of format 4: several services with several
// accounts, one service with an item in each access group, internet passwords sharing a server,
// a certificate, a key pair, an update and a deleted id. It stands for the vaults users have
// before the sealed name lists of format 5.

enum FormatFourFixture {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fixtures/format4").path
    /// The fixture's passphrase (also in Tests/Fixtures/format4/passphrase).
    static let passphrase = "fixture passphrase: format 4"

    static func copy(into dir: String) throws -> (vault: String, deviceKey: String) {
        let vault = dir + "/format4.vault", deviceKey = dir + "/state/device.key"
        try FileManager.default.createDirectory(atPath: dir + "/state", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: directory + "/format4.vault", toPath: vault)
        try FileManager.default.copyItem(atPath: directory + "/device.key", toPath: deviceKey)
        return (vault, deviceKey)
    }

    /// Both groups of the fixture's policy, presence given for every item.
    static let everyGroup = Caller(
        accessGroups: ["default", "team"], authenticationUI: .fail, presenceGrants: Set(Int64(1)...Int64(19)))

    /// What make-fixture.sh stored in password items: id and secret (15 was deleted).
    static let secrets: [Int64: String] = [
        1: "github alice", 2: "github bob v2", 3: "github carol", 4: "team secret", 5: "shared default",
        6: "shared team", 7: "presence secret", 8: "slash secret", 9: "inet secret", 10: "inet secret 2",
        11: "ftp secret", 12: "team inet", 16: "mail secret", 17: "git secret", 18: "app secret", 19: "app secret 2",
    ]
    static let internetIDs: Set<Int64> = [9, 10, 11, 12, 17]

    /// Every item row, index row, class key and the meta blobs a migration must keep byte for byte.
    static func preserved(_ db: RawDB) throws -> [[Cell]] {
        try db.query("SELECT id, \(RawDB.itemColumns.joined(separator: ", ")) FROM items ORDER BY id")
            + db.query("SELECT item_id, tag FROM attr_index ORDER BY item_id, tag")
            + db.query("SELECT protection, wrapped FROM class_keys ORDER BY protection")
            + db.query(
                "SELECT name, value FROM meta WHERE name IN ('access_policy', 'kdf_salt', 'vault_id') ORDER BY name")
    }

    /// The service and server directories' listings as the core gives them (class, grouping
    /// value → ids), for both groups and for the default group alone.
    static let listings: [(ItemClass, String, everyGroup: [Int64], defaultGroup: [Int64])] = [
        (.genericPassword, "github.com", [1, 2, 3], [1, 2, 3]),
        (.genericPassword, "deploy", [4], []),
        (.genericPassword, "shared", [5, 6], [5]),
        (.genericPassword, "bank", [7], [7]),
        (.genericPassword, "odd/service name", [8], [8]),
        (.genericPassword, "mail.example.org", [16], [16]),
        (.genericPassword, "fixture-app", [18, 19], [18, 19]),
        (.internetPassword, "example.com", [9, 10], [9, 10]),
        (.internetPassword, "ftp.example.org", [11], [11]),
        (.internetPassword, "db.example.net", [12], []),
        (.internetPassword, "git.example.com", [17], [17]),
        (.genericPassword, "no such service", [], []),
    ]

    static func listing(_ kc: Keychain, _ itemClass: ItemClass, _ value: String, caller: Caller) throws -> [Int64] {
        var ids: [Int64] = []
        try kc.forEachItem(itemClass, grouping: .string(value), caller: caller) { ids.append($0.id) }
        return ids
    }

    /// A directory's listing from its name lists (format 5): ids and each entry's name attributes
    /// as the item's own attributes give them.
    static func expectNameLists(_ kc: Keychain) throws {
        for (itemClass, value, every, defaultOnly) in listings {
            for (caller, ids) in [(everyGroup, every), (Caller.default, defaultOnly)] {
                let entries = try kc.nameList(itemClass, grouping: .string(value), caller: caller)
                #expect(entries.map(\.id) == ids, "\(itemClass) \(value)")
                for entry in entries {
                    let item = try kc.item(id: entry.id, itemClass: itemClass, withData: false, caller: everyGroup)
                    #expect(entry.sameName(as: NameListEntry(id: entry.id, itemClass, attributes: item.attributes)))
                    #expect(
                        entry.nameAttributes
                            == NameListEntry(id: entry.id, itemClass, attributes: item.attributes).nameAttributes)
                }
            }
        }
    }

    /// Every password item's secret, every listing, the certificate and the key as made.
    static func expectContents(_ kc: Keychain) throws {
        for (id, secret) in secrets {
            let itemClass: ItemClass = internetIDs.contains(id) ? .internetPassword : .genericPassword
            let item = try kc.item(id: id, itemClass: itemClass, withData: true, caller: everyGroup)
            #expect(item.data == bytes(secret), "item \(id)")
        }
        for (itemClass, value, every, defaultOnly) in listings {
            #expect(try listing(kc, itemClass, value, caller: everyGroup) == every, "\(itemClass) \(value)")
            #expect(try listing(kc, itemClass, value, caller: .default) == defaultOnly, "\(itemClass) \(value)")
        }
        let certificate = try kc.item(id: 13, itemClass: .certificate, withData: false, caller: everyGroup)
        #expect(certificate.string(Schema.label) == "Fixture CA")
        let key = try kc.item(id: 14, itemClass: .key, withData: false, caller: everyGroup)
        #expect(key.string(Schema.label) == "fixture-ed25519")
        expectError(.itemNotFound) { try kc.item(id: 15, itemClass: .genericPassword, withData: false) }
        #expect(try kc.secretServiceItems(matching: ["application": "fixture-app"]).map(\.id).sorted() == [18, 19])
    }
}

@Suite("The format-4 fixture")
struct FormatFourFixtureTests {
    @Test("verify checks the format-4 fixture as format 4, changing nothing")
    func verifyBeforeMigration() throws {
        try withTempDir { dir throws in
            let (vault, deviceKey) = try FormatFourFixture.copy(into: dir)
            let before = try FormatFourFixture.preserved(RawDB(vault))
            let report = try Keychain.open(at: vault, deviceKeyPath: deviceKey).verify(
                passphrase: try secure(FormatFourFixture.passphrase))
            #expect(report.isClean && report.format == 4, "\(report.failures) \(report.damaged)")
            #expect(try RawDB(vault).meta("format") == le64(4))
            #expect(try FormatFourFixture.preserved(RawDB(vault)) == before)
        }
    }

    @Test(
        "the first unlock migrates format 4 to 7: rows, index rows, buckets, keys and policy byte for byte; every listing as before; verify is clean"
    )
    func migrates() throws {
        try withTempDir { dir throws in
            let (vault, deviceKey) = try FormatFourFixture.copy(into: dir)
            #expect(try RawDB(vault).meta("format") == le64(4))
            #expect(try RawDB(vault).query("PRAGMA user_version") == [[.integer(3)]])
            let before = try FormatFourFixture.preserved(RawDB(vault))
            let bucketsBefore = try RawDB(vault).query("SELECT bucket, accumulator, count FROM manifest_bucket")
            let oldStored = try #require(try RawDB(vault).meta("manifest"))
            let oldCounter = try #require(Manifest.decode(oldStored)).0.counter
            let kc = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
            try kc.unlock(passphrase: try secure(FormatFourFixture.passphrase))
            let db = try RawDB(vault)
            #expect(try db.meta("format") == le64(currentVaultFormat))
            // Format-4 code (store schema 3) refuses user_version 4 as newer ("newer than this
            // keychainfs supports"), and its header check refuses format 6 the same way.
            #expect(try db.query("PRAGMA user_version") == [[.integer(currentStoreSchema)]])
            #expect(
                try FormatFourFixture.preserved(db) == before, "no item row, index row, class key or policy changed")
            #expect(try db.query("SELECT bucket, accumulator, count FROM manifest_bucket") == bucketsBefore)
            let stored = try #require(try db.meta("manifest"))
            let manifest = try #require(Manifest.decode(stored)).0
            #expect(manifest.counter == oldCounter + 1 && manifest.count == 18)
            // One list per (directory, group) of the password items: 11 services and servers,
            // `shared` in two groups; one chunk each at this size.
            #expect(try db.query("SELECT count(*) FROM name_bucket") == [[.integer(12)]])
            #expect(try db.query("SELECT count(*) FROM name_chunk") == [[.integer(12)]])
            // Every listing as the format-4 fixture was made (`listings`), walked over the rows and
            // read from the name lists.
            try FormatFourFixture.expectContents(kc)
            try FormatFourFixture.expectNameLists(kc)
            let report = try kc.verify(passphrase: try secure(FormatFourFixture.passphrase))
            #expect(
                report.isClean && report.format == Int64(currentVaultFormat), "\(report.failures) \(report.damaged)")

            // Opened again (incrementally, as a mount does): not migrated again.
            let again = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
            try again.unlock(passphrase: try secure(FormatFourFixture.passphrase), incrementalCheck: true)
            #expect(again.waitForIntegrityCheck() == nil)
            #expect(try db.meta("manifest") == (try RawDB(vault).meta("manifest")))
            try FormatFourFixture.expectNameLists(again)
        }
    }

    @Test("a tampered format-4 vault is refused, not migrated: the file keeps format 4 and schema 3")
    func damagedFixtureIsNotMigrated() throws {
        try withTempDir { dir throws in
            let (vault, deviceKey) = try FormatFourFixture.copy(into: dir)
            try RawDB(vault).exec("DELETE FROM items WHERE id = 5")
            let kc = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
            expectError(.decode, containing: ["integrity check failed", "not migrated"]) {
                try kc.unlock(passphrase: try secure(FormatFourFixture.passphrase))
            }
            #expect(try RawDB(vault).meta("format") == le64(4))
            #expect(try RawDB(vault).query("PRAGMA user_version") == [[.integer(3)]])
        }
    }
}
