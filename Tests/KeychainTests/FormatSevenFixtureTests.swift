import Foundation
import KeychainCrypto
import Testing

@_spi(CallerRule) @testable import Keychain

// The format-7 fixture (Tests/Fixtures/format7): a vault made by commit 858cf45's CLI and
// Secret Service provider, in vault format 7 (the change log), before format 8 added the sync
// tables. It stands for the vaults users have before format 8.

enum FormatSevenFixture {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fixtures/format7").path
    static let passphrase = "fixture passphrase: format 7"

    static func copy(into dir: String) throws -> (vault: String, deviceKey: String) {
        let vault = dir + "/format7.vault", deviceKey = dir + "/state/device.key"
        try FileManager.default.createDirectory(atPath: dir + "/state", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: directory + "/format7.vault", toPath: vault)
        try FileManager.default.copyItem(atPath: directory + "/device.key", toPath: deviceKey)
        return (vault, deviceKey)
    }

    /// Every table format 7 had, byte for byte, the change log included.
    static func preserved(_ db: RawDB) throws -> [[Cell]] {
        try FormatFiveFixture.preserved(db)
            + db.query("SELECT seq, class, item_id, op, sealed FROM change_log ORDER BY seq")
    }
}

@Suite("The format-7 fixture")
struct FormatSevenFixtureTests {
    @Test("verify checks the format-7 fixture as format 7, changing nothing")
    func verifyBeforeMigration() throws {
        try withTempDir { dir throws in
            let (vault, deviceKey) = try FormatSevenFixture.copy(into: dir)
            #expect(try RawDB(vault).meta("format") == le64(7))
            #expect(try RawDB(vault).query("PRAGMA user_version") == [[.integer(5)]])
            let before = try FormatSevenFixture.preserved(RawDB(vault))
            let report = try Keychain.open(at: vault, deviceKeyPath: deviceKey).verify(
                passphrase: try secure(FormatSevenFixture.passphrase))
            #expect(report.isClean && report.format == 7, "\(report.failures) \(report.damaged)")
            #expect(try FormatSevenFixture.preserved(RawDB(vault)) == before)
        }
    }

    @Test(
        "the first unlock migrates format 7 to 8: every row, list, bucket and change-log row byte for byte, empty sync tables, verify clean, the log goes on at 24"
    )
    func migrates() throws {
        for incremental in [false, true] {
            try withTempDir { dir throws in
                let (vault, deviceKey) = try FormatSevenFixture.copy(into: dir)
                let before = try FormatSevenFixture.preserved(RawDB(vault))
                let kc = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
                try kc.unlock(passphrase: try secure(FormatSevenFixture.passphrase), incrementalCheck: incremental)
                let db = try RawDB(vault)
                #expect(try db.meta("format") == le64(8))
                #expect(try db.query("PRAGMA user_version") == [[.integer(6)]])
                #expect(try FormatSevenFixture.preserved(db) == before, "nothing but the manifest changed")
                for table in ["sync_state", "sync_record", "sync_outbox", "sync_conflict"] {
                    #expect(try db.query("SELECT count(*) FROM \(table)") == [[.integer(0)]], "\(table)")
                }
                #expect(kc.waitForIntegrityCheck() == nil)
                let every = FormatFourFixture.everyGroup
                for (service, account, secret) in [
                    ("github.com", "bob", "github bob v2"), ("github.com", "carol", "github carol"),
                    ("github.com", "dora", "device only"),
                ] {
                    let item = try #require(
                        try kc.copyMatching(
                            Query(
                                .genericPassword, genp(service, account), returnData: true,
                                synchronizableAny: true), caller: every
                        ).first)
                    #expect(item.data == bytes(secret), "\(service) \(account)")
                }
                let report = try kc.verify(passphrase: try secure(FormatSevenFixture.passphrase))
                #expect(report.isClean && report.format == 8, "\(report.failures) \(report.damaged)")
                #expect(try kc.lastLoggedChange() == 23)
                _ = try kc.add(.genericPassword, genp("after", "migration"), data: bytes("x"))
                #expect(try kc.changeLog(after: 23).changes.map(\.seq) == [24])
            }
        }
    }
}
