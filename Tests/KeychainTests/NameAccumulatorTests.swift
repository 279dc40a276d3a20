import Foundation
import KeychainCrypto
import KeychainStore
import Testing

@_spi(CallerRule) @testable import Keychain

// Vault format 6: the name lists' bucket entries have their own accumulator in the authenticated
// manifest (`Manifest.names`). An incremental unlock (the mount, a one-shot command) checks the
// id buckets' table against the top without folding the lists' buckets; the first listing folds
// them against `names`, the background pass too, and the full check at unlock and `verify` as
// before. A tampered list bucket is therefore refused before any listing answers from it.

@Suite("The name lists' own accumulator (format 6)")
struct NameAccumulatorTests {
    /// The ways a list's bucket row is tampered with in the file.
    enum Tamper: CaseIterable { case altered, deleted, added, replayed }

    /// Tampers with the name_bucket table of `v` (the bucket of the list of `big`).
    static func tamper(_ how: Tamper, _ v: TestVault, _ kc: Keychain) throws {
        let db = try v.raw()
        let chunks = try NameListTests.chunks(db)
        let big = try #require(Dictionary(grouping: chunks, by: \.sidx).values.max { $0.count < $1.count })
        let sidx = big[0].sidx
        switch how {
        case .altered:
            _ = try db.query("UPDATE name_bucket SET count = count + 1 WHERE sidx = ?", [.blob(sidx)])
        case .deleted:
            _ = try db.query("DELETE FROM name_bucket WHERE sidx = ?", [.blob(sidx)])
        case .added:
            _ = try db.query(
                "INSERT INTO name_bucket(sidx, accumulator, count) VALUES(?, ?, 1)",
                [.blob([UInt8](repeating: 7, count: 32)), .blob([UInt8](repeating: 9, count: 32))])
        case .replayed:
            // The list's bucket and chunks as they were, replayed after an add changed them.
            let oldChunks = try db.query("SELECT chunk, sealed FROM name_chunk WHERE sidx = ?", [.blob(sidx)])
            let oldBucket = try db.query("SELECT accumulator, count FROM name_bucket WHERE sidx = ?", [.blob(sidx)])
            _ = try kc.add(.genericPassword, NameListTests.genp("big", "later"), data: [5])
            _ = try db.query("DELETE FROM name_chunk WHERE sidx = ?", [.blob(sidx)])
            for row in oldChunks {
                _ = try db.query(
                    "INSERT INTO name_chunk(sidx, chunk, sealed) VALUES(?, ?, ?)", [.blob(sidx), row[0], row[1]])
            }
            _ = try db.query(
                "UPDATE name_bucket SET accumulator = ?, count = ? WHERE sidx = ?",
                [oldBucket[0][0], oldBucket[0][1], .blob(sidx)])
        }
    }

    @Test(
        "a list's bucket altered, deleted, added or replayed: an incremental unlock and reads by id go on; every listing fails errSecDecode; the background pass, the full unlock and verify refuse it"
    )
    func tamperedListBucket() throws {
        for how in Tamper.allCases {
            try NameListTests.withListedVault { v, kc in
                try Self.tamper(how, v, kc)
                // The one-shot command's unlock: the id buckets' table only.
                let once = try v.open().withoutBackgroundIntegrityPass()
                try once.unlock(passphrase: try secure(testPassphrase), incrementalCheck: true)
                #expect(try once.item(id: 1, itemClass: .genericPassword, withData: true).data == [2], "\(how)")
                for service in ["big", "small"] {
                    expectError(.decode, containing: ["name lists' bucket table does not match"]) {
                        try once.nameList(.genericPassword, grouping: .string(service))
                    }
                }
                // The mount's unlock: its background pass finds it and fails every read.
                let mounted = try v.open()
                try mounted.unlock(passphrase: try secure(testPassphrase), incrementalCheck: true)
                let failure = try #require(mounted.waitForIntegrityCheck(), "\(how)")
                #expect(failure.contains("name lists' bucket table does not match"), "\(how): \(failure)")
                expectError(.decode) { try mounted.item(id: 1, itemClass: .genericPassword, withData: true) }
                // The full check.
                expectError(.decode, containing: ["integrity check failed"]) { try v.openUnlocked() }
                #expect(!(try kc.verify(passphrase: try secure(testPassphrase)).isClean), "\(how)")
            }
        }
    }

    @Test("a list's chunk and bucket replayed together fail the listing after an incremental unlock")
    func replayedListAfterIncrementalUnlock() throws {
        try NameListTests.withListedVault { v, kc in
            try Self.tamper(.replayed, v, kc)
            let once = try v.open().withoutBackgroundIntegrityPass()
            try once.unlock(passphrase: try secure(testPassphrase), incrementalCheck: true)
            expectError(.decode, containing: ["bucket table does not match"]) {
                try once.nameList(.genericPassword, grouping: .string("big"))
            }
        }
    }

    @Test("writes keep the lists' accumulator: adds, renames and deletes, then a listing, the full unlock and verify")
    func writesKeepTheAccumulator() throws {
        try NameListTests.withListedVault { v, kc in
            let id = try kc.add(.genericPassword, NameListTests.genp("big", "x"), data: [1]).id
            try kc.update(
                Query(.genericPassword, NameListTests.genp("big", "x")),
                attributes: NameListTests.genp("elsewhere", "y"))
            try kc.delete(Query(.genericPassword, NameListTests.genp("big", "member1")))
            let once = try v.open().withoutBackgroundIntegrityPass()
            try once.unlock(passphrase: try secure(testPassphrase), incrementalCheck: true)
            #expect(try NameListTests.listed(once, "big").count == 999)
            #expect(try NameListTests.listed(once, "elsewhere") == [id: "y"])
            let report = try v.openUnlocked().verify(passphrase: try secure(testPassphrase))
            #expect(
                report.isClean && report.format == Int64(currentVaultFormat), "\(report.failures) \(report.damaged)")
            let stored = try #require(try v.raw().meta("manifest"))
            let manifest = try #require(Manifest.decode(stored)).0
            #expect(manifest.names != nil)
        }
    }

    @Test("a format-6 vault whose manifest has format 5's shape (no name accumulator) is refused")
    func manifestOfTheWrongShape() throws {
        try withVault { v in
            _ = try v.keychain.add(.genericPassword, NameListTests.genp("s", "a"), data: [1])
            let stored = try #require(try v.raw().meta("manifest"))
            // Format 5's layout: the body without `names`, then a tag's worth of bytes.
            let shortened = Array(stored[0..<88]) + Array(stored[120...])
            _ = try v.raw().query("UPDATE meta SET value = ? WHERE name = 'manifest'", [.blob(shortened)])
            expectError(.decode, containing: ["manifest is missing or malformed"]) { try v.openUnlocked() }
        }
    }
}
