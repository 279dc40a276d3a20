import Foundation
import KeychainCrypto
import Testing

@testable import Keychain

// The format-3 fixture (Tests/Fixtures/format3): a vault made by commit ec33941's CLI and
// Secret Service provider (secret-tool on a private bus), with the attribute index and the flat
// manifest accumulator of format 3.

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
    @Test("today's code opens the format-3 fixture: every secret, search and the full check")
    func opens() throws {
        try withTempDir { dir throws in
            let (vault, deviceKey) = try FormatThreeFixture.copy(into: dir)
            #expect(try RawDB(vault).meta("format") == le64(3))
            #expect(try RawDB(vault).query("PRAGMA user_version") == [[.integer(2)]])
            let kc = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
            try kc.unlock(passphrase: try secure(FormatThreeFixture.passphrase))
            try FormatThreeFixture.expectContents(kc)
            let report = try kc.verify(passphrase: try secure(FormatThreeFixture.passphrase))
            #expect(report.isClean, "\(report.failures) \(report.damaged)")
        }
    }
}
