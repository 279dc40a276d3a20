import Foundation
import KeychainCrypto
import Testing

@_spi(CallerRule) @testable import Keychain

// The format-5 fixture (Tests/Fixtures/format5): a vault made by commit 751cfd6's CLI and Secret
// Service provider with the same script as the format-4 fixture (so the same ids, secrets and
// listings: FormatFourFixture), in vault format 5: the sealed name lists, their buckets' entries
// XORed into the manifest's one top accumulator. It stands for the vaults users have before
// format 6 gave the name lists an accumulator of their own.

enum FormatFiveFixture {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fixtures/format5").path
    /// The fixture's passphrase (also in Tests/Fixtures/format5/passphrase).
    static let passphrase = "fixture passphrase: format 5"

    static func copy(into dir: String) throws -> (vault: String, deviceKey: String) {
        let vault = dir + "/format5.vault", deviceKey = dir + "/state/device.key"
        try FileManager.default.createDirectory(atPath: dir + "/state", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: directory + "/format5.vault", toPath: vault)
        try FileManager.default.copyItem(atPath: directory + "/device.key", toPath: deviceKey)
        return (vault, deviceKey)
    }

    /// What a migration must keep byte for byte: the format-4 fixture's rows, index rows, class
    /// keys and meta blobs, and the id buckets, name chunks and name buckets.
    static func preserved(_ db: RawDB) throws -> [[Cell]] {
        try FormatFourFixture.preserved(db)
            + db.query("SELECT bucket, accumulator, count FROM manifest_bucket ORDER BY bucket")
            + db.query("SELECT sidx, chunk, sealed FROM name_chunk ORDER BY sidx, chunk")
            + db.query("SELECT sidx, accumulator, count FROM name_bucket ORDER BY sidx")
    }
}

@Suite("The format-5 fixture")
struct FormatFiveFixtureTests {
    @Test("verify checks the format-5 fixture as format 5, changing nothing")
    func verifyBeforeMigration() throws {
        try withTempDir { dir throws in
            let (vault, deviceKey) = try FormatFiveFixture.copy(into: dir)
            #expect(try RawDB(vault).meta("format") == le64(5))
            #expect(try RawDB(vault).query("PRAGMA user_version") == [[.integer(4)]])
            let before = try FormatFiveFixture.preserved(RawDB(vault))
            let report = try Keychain.open(at: vault, deviceKeyPath: deviceKey).verify(
                passphrase: try secure(FormatFiveFixture.passphrase))
            #expect(report.isClean && report.format == 5, "\(report.failures) \(report.damaged)")
            #expect(try RawDB(vault).meta("format") == le64(5))
            #expect(try FormatFiveFixture.preserved(RawDB(vault)) == before)
        }
    }

    @Test("the format-5 fixture opens: every secret, listing and name list as made")
    func opens() throws {
        try withTempDir { dir throws in
            let (vault, deviceKey) = try FormatFiveFixture.copy(into: dir)
            let kc = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
            try kc.unlock(passphrase: try secure(FormatFiveFixture.passphrase))
            try FormatFourFixture.expectContents(kc)
            try FormatFourFixture.expectNameLists(kc)
        }
    }

    @Test(
        "the first unlock migrates format 5 to 7: rows, index rows, buckets, name chunks and buckets, keys and policy byte for byte; only the manifest changes; verify is clean"
    )
    func migrates() throws {
        for incremental in [false, true] {
            try withTempDir { dir throws in
                let (vault, deviceKey) = try FormatFiveFixture.copy(into: dir)
                let before = try FormatFiveFixture.preserved(RawDB(vault))
                let oldStored = try #require(try RawDB(vault).meta("manifest"))
                #expect(oldStored.count == Manifest.encodedBytes)
                let old = try #require(Manifest.decode(oldStored)).0
                let kc = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
                // The full check (the CLI's default) and the incremental one (a mount, a one-shot
                // command) both migrate: the Argon2id path does it before either check.
                try kc.unlock(passphrase: try secure(FormatFiveFixture.passphrase), incrementalCheck: incremental)
                let db = try RawDB(vault)
                #expect(try db.meta("format") == le64(currentVaultFormat))
                // Store schema 5 (the change log): format-5 code refuses the vault by its header
                // ("vault format 6 is newer than this keychainfs supports (5)").
                #expect(try db.query("PRAGMA user_version") == [[.integer(currentStoreSchema)]])
                #expect(try FormatFiveFixture.preserved(db) == before, "nothing but the manifest changed")
                let stored = try #require(try db.meta("manifest"))
                #expect(stored.count == Manifest.encodedBytesWithNames)
                let manifest = try #require(Manifest.decode(stored)).0
                #expect(manifest.counter == old.counter + 1 && manifest.count == 18 && manifest.highestID == 19)
                let names = try #require(manifest.names)
                // Format 5's top was the id buckets' and the lists' XORed together.
                #expect(Manifest.xor(manifest.accumulator, names) == old.accumulator)
                try FormatFourFixture.expectContents(kc)
                try FormatFourFixture.expectNameLists(kc)
                #expect(kc.waitForIntegrityCheck() == nil)
                let report = try kc.verify(passphrase: try secure(FormatFiveFixture.passphrase))
                #expect(
                    report.isClean && report.format == Int64(currentVaultFormat), "\(report.failures) \(report.damaged)"
                )

                // Opened again (incrementally, as a mount does): not migrated again.
                let again = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
                try again.unlock(passphrase: try secure(FormatFiveFixture.passphrase), incrementalCheck: true)
                #expect(again.waitForIntegrityCheck() == nil)
                #expect(try RawDB(vault).meta("manifest") == stored)
                try FormatFourFixture.expectNameLists(again)
            }
        }
    }

    @Test("a tampered format-5 vault is refused, not migrated: a name chunk deleted, or an item")
    func damagedFixtureIsNotMigrated() throws {
        for tamper in [
            "DELETE FROM name_chunk WHERE (sidx, chunk) = (SELECT sidx, chunk FROM name_chunk ORDER BY sidx LIMIT 1)",
            "DELETE FROM items WHERE id = 5",
        ] {
            try withTempDir { dir throws in
                let (vault, deviceKey) = try FormatFiveFixture.copy(into: dir)
                try RawDB(vault).exec(tamper)
                let kc = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
                expectError(.decode, containing: ["integrity check failed", "not migrated"]) {
                    try kc.unlock(passphrase: try secure(FormatFiveFixture.passphrase), incrementalCheck: true)
                }
                #expect(try RawDB(vault).meta("format") == le64(5))
                #expect(try RawDB(vault).meta("manifest")?.count == Manifest.encodedBytes)
            }
        }
    }
}
