import Foundation
import KeychainCrypto
import Testing

@testable import Keychain

// The incremental integrity check of format 4 (Keychain+IncrementalCheck.swift), through the
// core on a real vault file, tampered with through SQLite as an attacker with the file would.

/// 2,000 items (ids 1–2000: buckets 0 to 3 of 512 ids), `s<i/500>`/`acct<i>` holding `secret-<i>`.
private func populated(_ v: TestVault) throws {
    _ = try v.keychain.addBatch(
        (1...2_000).map { NewItem(.genericPassword, genp("s\($0 / 500)", "acct\($0)"), data: bytes("secret-\($0)")) })
}

private func read(_ kc: Keychain, _ i: Int) throws -> [UInt8]? {
    try kc.item(id: Int64(i), itemClass: .genericPassword, withData: true).data
}

/// Unlocked with the incremental check, as the mount's daemon does.
private func incremental(_ v: TestVault) throws -> Keychain {
    let kc = try v.open()
    try kc.unlock(passphrase: try secure(testPassphrase), incrementalCheck: true)
    return kc
}

@Suite("Incremental integrity check")
struct IncrementalCheckTests {
    @Test("a clean vault: reads are served before the background pass ends, which then verifies every bucket")
    func clean() throws {
        try withVault { v in
            try populated(v)
            #expect(try v.raw().query("SELECT count(*) FROM manifest_bucket") == [[.integer(4)]])
            let kc = try incremental(v)
            #expect(try read(kc, 1_500) == bytes("secret-1500"))
            #expect(kc.waitForIntegrityCheck() == nil)
            #expect(kc.integrityCheckComplete)
            #expect(try kc.copyMatching(Query(.genericPassword, matchLimit: .all)).count == 2_000)
            // The daemon's own writes keep its buckets (and the vault) verified.
            _ = try kc.add(.genericPassword, genp("new", "x"), data: bytes("n"))
            _ = try kc.delete(Query(.genericPassword, genp("s0", "acct7")))
            #expect(try read(kc, 2_001) == bytes("n"))
            _ = try v.openUnlocked()
        }
    }

    @Test(
        "a row deleted: unlock succeeds, the bucket's reads fail errSecDecode naming its id range, then every read"
    )
    func rowDeleted() throws {
        try withVault { v in
            try populated(v)
            try v.raw().exec("DELETE FROM items WHERE id = 1100")
            let kc = try incremental(v)
            expectError(.decode, containing: ["integrity check failed", "items 1024–1535", "rows were deleted"]) {
                try read(kc, 1_101)
            }
            // Every other bucket fails the same way from then on (never served from a tampered vault).
            expectError(.decode, containing: ["items 1024–1535"]) { try read(kc, 3) }
            expectError(.decode, containing: ["items 1024–1535"]) {
                try kc.copyMatching(Query(.genericPassword, matchLimit: .all))
            }
            #expect(kc.waitForIntegrityCheck()?.contains("items 1024–1535") == true)
            // The full check refuses it at unlock, naming the bucket.
            expectError(.decode, containing: ["rows were deleted", "items 1024–1535"]) { try v.openUnlocked() }
        }
    }

    @Test("the background pass finds a tampered bucket no read asked for; reads fail after it")
    func backgroundFinds() throws {
        try withVault { v in
            try populated(v)
            try v.raw().flipByte("attrs", id: 1_900) { $0 / 2 }
            let kc = try incremental(v)
            let failure = kc.waitForIntegrityCheck()
            #expect(failure?.contains("items 1536–2047") == true, "\(failure ?? "none")")
            #expect(failure?.contains("1900 (genp)") == true, "the damaged row is named: \(failure ?? "none")")
            expectError(.decode, containing: ["items 1536–2047"]) { try read(kc, 5) }
        }
    }

    @Test("an attribute-index row deleted fails its item's bucket")
    func indexRowDeleted() throws {
        try withVault { v in
            try populated(v)
            let before = try v.raw().query("SELECT count(*) FROM attr_index WHERE item_id = 600")
            #expect(before != [[.integer(0)]], "the item has index rows")
            try v.raw().exec(
                "DELETE FROM attr_index WHERE item_id = 600 AND tag = (SELECT tag FROM attr_index WHERE item_id = 600 LIMIT 1)"
            )
            let kc = try incremental(v)
            expectError(.decode, containing: ["items 512–1023", "attribute-index entries"]) { try read(kc, 600) }
        }
    }

    @Test("the bucket table altered, or a bucket row deleted, is refused at unlock by the tag")
    func bucketTableTampered() throws {
        try withVault { v in
            try populated(v)
            let clean = try v.raw().query("SELECT bucket, accumulator, count FROM manifest_bucket WHERE bucket = 2")
            try v.raw().exec("DELETE FROM manifest_bucket WHERE bucket = 2")
            expectError(.decode, containing: ["bucket table does not match"]) { try incremental(v) }
            // A bucket row and its rows removed together still disagree with the tag.
            try v.raw().exec("DELETE FROM items WHERE id BETWEEN 1024 AND 1535")
            expectError(.decode, containing: ["bucket table does not match"]) { try incremental(v) }
            #expect(clean.count == 1)
        }
    }

    @Test("keychainfs verify still checks every bucket and names the one that differs")
    func verifyNamesBucket() throws {
        try withVault { v in
            try populated(v)
            try v.raw().exec("DELETE FROM items WHERE id = 700")
            let report = try v.open().verify(passphrase: try secure(testPassphrase))
            #expect(!report.isClean)
            #expect(report.failures.contains { $0.contains("rows were deleted") && $0.contains("items 512–1023") })
        }
    }

    @Test("a master-key rotation rewrites the buckets under the new key: the rotated vault verifies both ways")
    func rotation() throws {
        try withVault { v in
            try populated(v)
            try v.keychain.rotateMasterKey(old: try secure(testPassphrase), new: try secure("rotated"))
            let kc = try v.open()
            try kc.unlock(passphrase: try secure("rotated"), incrementalCheck: true)
            #expect(kc.waitForIntegrityCheck() == nil)
            #expect(try read(kc, 2_000) == bytes("secret-2000"))
            _ = try v.openUnlocked(passphrase: "rotated")
        }
    }

    @Test(
        "the bucket table is folded once per state of the vault: a bucket table changed after a verified read is still caught by the next bucket's check"
    )
    func tableCheckedAgainAfterACommit() throws {
        try withVault { v in
            try populated(v)
            let kc = try v.open().withoutBackgroundIntegrityPass()
            try kc.unlock(passphrase: try secure(testPassphrase), incrementalCheck: true)
            #expect(try read(kc, 3) == bytes("secret-3"))
            #expect(try read(kc, 600) == bytes("secret-600"))
            // Another process alters bucket 1's stored value (its rows stay as they were): only the
            // table against the authenticated top can see it, and bucket 3's own rows match.
            try v.raw().exec("UPDATE manifest_bucket SET accumulator = zeroblob(length(accumulator)) WHERE bucket = 1")
            expectError(.decode, containing: ["bucket table does not match"]) { try read(kc, 1_700) }
        }
    }
}
