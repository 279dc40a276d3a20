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
}
