import Foundation
import KeychainCrypto
import Testing

@testable import Keychain

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
    @Test("today's code opens the format-4 fixture: every secret, listing, group and search as made; verify is clean")
    func opens() throws {
        try withTempDir { dir throws in
            let (vault, deviceKey) = try FormatFourFixture.copy(into: dir)
            #expect(try RawDB(vault).meta("format") == le64(4))
            #expect(try RawDB(vault).query("PRAGMA user_version") == [[.integer(3)]])
            let kc = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
            try kc.unlock(passphrase: try secure(FormatFourFixture.passphrase))
            try FormatFourFixture.expectContents(kc)
            let report = try kc.verify(passphrase: try secure(FormatFourFixture.passphrase))
            #expect(report.isClean, "\(report.failures) \(report.damaged)")
        }
    }
}
