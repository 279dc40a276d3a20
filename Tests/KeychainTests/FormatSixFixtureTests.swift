import Foundation
import KeychainCrypto
import Testing

@_spi(CallerRule) @testable import Keychain

// The format-6 fixture (Tests/Fixtures/format6): a vault made by commit 2b8256c's CLI and Secret
// Service provider with the format-5 script (so the same ids, secrets and listings:
// FormatFourFixture), in vault format 6: the name lists with their own accumulator in the
// manifest, before format 7 added the change log. It stands for the vaults users have before
// format 7.

enum FormatSixFixture {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fixtures/format6").path
    /// The fixture's passphrase (also in Tests/Fixtures/format6/passphrase).
    static let passphrase = "fixture passphrase: format 6"

    static func copy(into dir: String) throws -> (vault: String, deviceKey: String) {
        let vault = dir + "/format6.vault", deviceKey = dir + "/state/device.key"
        try FileManager.default.createDirectory(atPath: dir + "/state", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: directory + "/format6.vault", toPath: vault)
        try FileManager.default.copyItem(atPath: directory + "/device.key", toPath: deviceKey)
        return (vault, deviceKey)
    }
}

@Suite("The format-6 fixture")
struct FormatSixFixtureTests {
    @Test("verify checks the format-6 fixture as format 6, changing nothing")
    func verifyBeforeMigration() throws {
        try withTempDir { dir throws in
            let (vault, deviceKey) = try FormatSixFixture.copy(into: dir)
            #expect(try RawDB(vault).meta("format") == le64(6))
            #expect(try RawDB(vault).query("PRAGMA user_version") == [[.integer(4)]])
            let before = try FormatFiveFixture.preserved(RawDB(vault))
            let report = try Keychain.open(at: vault, deviceKeyPath: deviceKey).verify(
                passphrase: try secure(FormatSixFixture.passphrase))
            #expect(report.isClean && report.format == 6, "\(report.failures) \(report.damaged)")
            #expect(try RawDB(vault).meta("format") == le64(6))
            #expect(try FormatFiveFixture.preserved(RawDB(vault)) == before)
        }
    }

    @Test(
        "the first unlock migrates format 6 to 7: rows, index rows, buckets, name lists, keys and policy byte for byte; an empty change log; verify is clean; the next change is logged as 1"
    )
    func migrates() throws {
        for incremental in [false, true] {
            try withTempDir { dir throws in
                let (vault, deviceKey) = try FormatSixFixture.copy(into: dir)
                let before = try FormatFiveFixture.preserved(RawDB(vault))
                let oldStored = try #require(try RawDB(vault).meta("manifest"))
                let old = try #require(Manifest.decode(oldStored)).0
                let kc = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
                try kc.unlock(passphrase: try secure(FormatSixFixture.passphrase), incrementalCheck: incremental)
                let db = try RawDB(vault)
                #expect(try db.meta("format") == le64(currentVaultFormat))
                // Store schema 5: format-6 code refuses the file as newer by its user_version and
                // by its header ("vault format 7 is newer than this keychainfs supports (6)").
                #expect(try db.query("PRAGMA user_version") == [[.integer(currentStoreSchema)]])
                #expect(try FormatFiveFixture.preserved(db) == before, "nothing but the manifest changed")
                #expect(try db.query("SELECT count(*) FROM change_log") == [[.integer(0)]])
                let stored = try #require(try db.meta("manifest"))
                let manifest = try #require(Manifest.decode(stored)).0
                #expect(manifest.counter == old.counter + 1 && manifest.count == old.count)
                #expect(manifest.accumulator == old.accumulator && manifest.names == old.names)
                try FormatFourFixture.expectContents(kc)
                try FormatFourFixture.expectNameLists(kc)
                #expect(kc.waitForIntegrityCheck() == nil)
                let report = try kc.verify(passphrase: try secure(FormatSixFixture.passphrase))
                #expect(
                    report.isClean && report.format == Int64(currentVaultFormat), "\(report.failures) \(report.damaged)"
                )
                #expect(try kc.lastLoggedChange() == 0)

                // A change after the migration is the log's first row.
                _ = try kc.add(.genericPassword, genp("after", "migration"), data: bytes("x"))
                let page = try kc.changeLog(after: 0)
                #expect(page.changes.map(\.seq) == [1] && page.changes.first?.kind == .added)
                #expect(page.changes.first?.after?[Schema.account] == .string("migration"))

                // Opened again (incrementally, as a mount does): not migrated again, still clean.
                let again = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
                try again.unlock(passphrase: try secure(FormatSixFixture.passphrase), incrementalCheck: true)
                #expect(again.waitForIntegrityCheck() == nil)
                try FormatFourFixture.expectNameLists(again)
            }
        }
    }

    @Test("a tampered format-6 vault is refused, not migrated: a name chunk deleted, or an item")
    func damagedFixtureIsNotMigrated() throws {
        for tamper in [
            "DELETE FROM name_chunk WHERE (sidx, chunk) = (SELECT sidx, chunk FROM name_chunk ORDER BY sidx LIMIT 1)",
            "DELETE FROM items WHERE id = 5",
        ] {
            try withTempDir { dir throws in
                let (vault, deviceKey) = try FormatSixFixture.copy(into: dir)
                try RawDB(vault).exec(tamper)
                let kc = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
                expectError(.decode, containing: ["integrity check failed", "not migrated"]) {
                    try kc.unlock(passphrase: try secure(FormatSixFixture.passphrase), incrementalCheck: true)
                }
                #expect(try RawDB(vault).meta("format") == le64(6))
            }
        }
    }
}
