import Foundation
import KeychainCrypto
import Testing

@testable import Keychain

// Issue 29, item 5b: a lookup of a missing item right after an incremental unlock (the mount's)
// is answered from its directory's name list instead of waiting for every bucket to verify
// (Keychain.provenAbsentByNameList), without ever answering "not found" for a row deleted behind
// the vault's back. Real vault files, tampered with through SQLite as an attacker would.

/// 2,000 items, ids 1–2000 in buckets 0–3: `s<i/500>`/`acct<i>`, and acct5 in s0 also as a
/// synchronizable item of the same name.
private func populated(_ v: TestVault) throws {
    _ = try v.keychain.addBatch(
        (1...2_000).map { NewItem(.genericPassword, genp("s\($0 / 500)", "acct\($0)"), data: bytes("secret-\($0)")) })
    _ = try v.keychain.add(
        .genericPassword, genp("s0", "acct5", [Schema.synchronizable: .bool(true)]), data: bytes("synced"))
    _ = try v.keychain.add(.internetPassword, inet("host.example", "bob", port: 443), data: bytes("web"))
}

/// An internet password's whole primary key (defaults but server, account and port), as a path
/// names one: a query naming fewer attributes is a search, which waits for every bucket.
private func inet(_ server: String, _ account: String, port: Int64) -> Attributes {
    var key: Attributes = [:]
    for attribute in Schema.primaryKey(of: .internetPassword)
    where attribute != Schema.accessGroup && attribute != Schema.synchronizable {
        key[attribute] = AttributeValue.defaultValue(for: attribute.type)
    }
    key[Schema.server] = .string(server)
    key[Schema.account] = .string(account)
    key[Schema.port] = .number(port)
    return key
}

/// Unlocked incrementally, as the mount's daemon is, without the background pass: every bucket
/// stays unverified until a request verifies it.
private func incrementalWithoutPass(_ v: TestVault) throws -> Keychain {
    let kc = try v.open().withoutBackgroundIntegrityPass()
    try kc.unlock(passphrase: try secure(testPassphrase), incrementalCheck: true)
    return kc
}

@Suite("A missing item proven absent from its name list")
struct AbsentByNameListTests {
    @Test(
        "a missing name, in a missing directory, in a named group, of either synchronizable state: not found, no bucket verified"
    )
    func missingWithoutEveryBucket() throws {
        try withVault { v in
            try populated(v)
            let kc = try incrementalWithoutPass(v)
            for query in [
                Query(.genericPassword, genp("s1", "acct-nosuch")),
                Query(.genericPassword, genp("nosuch-service", "acct600")),
                Query(
                    .genericPassword, genp("s3", "acct600", [Schema.accessGroup: .string("default")]), matchLimit: .all),
                Query(.genericPassword, genp("s1", "acct600x"), synchronizableAny: true),
                // An internet password's entry stores several fields: the other port is another item.
                Query(.internetPassword, inet("host.example", "bob", port: 8443)),
            ] {
                expectError(.itemNotFound) { try kc.copyMatching(query) }
            }
            #expect(!kc.integrityCheckComplete, "a missing name waited for every bucket")
            // Present items are still served through their own bucket, and the answer is the same
            // once every bucket is verified.
            #expect(try secret(kc, "s1", "acct600") == bytes("secret-600"))
            #expect(try kc.copyMatching(Query(.internetPassword, inet("host.example", "bob", port: 443))).count == 1)
            #expect(kc.waitForIntegrityCheck() == nil)
            expectError(.itemNotFound) { try kc.copyMatching(Query(.genericPassword, genp("s1", "acct-nosuch"))) }
        }
    }

    @Test("past the proofs' budget, each proof also verifies buckets (at least one): a burst of lookups ends the check")
    func budgetSpent() throws {
        try withVault { v in
            try populated(v)
            let kc = try incrementalWithoutPass(v)
            expectError(.itemNotFound) { try kc.copyMatching(Query(.genericPassword, genp("s1", "nosuch1"))) }
            #expect(!kc.integrityCheckComplete)
            #expect(kc.state.withLock { $0.integrity.verified.isEmpty }, "a proof within the budget verified a bucket")
            kc.state.withLock { $0.integrity.absenceProofs = Keychain.absenceProofBudget }
            // Buckets 0-3 hold the rows: each lookup verifies at least one more, until all are.
            var lookups = 0
            while !kc.integrityCheckComplete && lookups < 6 {
                let before = kc.state.withLock { $0.integrity.verified.count }
                lookups += 1
                expectError(.itemNotFound) {
                    try kc.copyMatching(Query(.genericPassword, genp("s1", "nosuch-\(lookups)")))
                }
                let after = kc.state.withLock { $0.integrity.verified.count }
                #expect(kc.integrityCheckComplete || after > before, "lookup \(lookups) verified no bucket")
            }
            #expect(kc.integrityCheckComplete, "6 lookups past the budget did not end the check")
        }
    }

    @Test("past the budget, a proof's own check finds a row deleted behind the vault's back in another bucket")
    func budgetSpentFindsDeletion() throws {
        try withVault { v in
            try populated(v)
            let kc = try incrementalWithoutPass(v)
            try v.raw().exec("DELETE FROM items WHERE id = 1800")
            kc.state.withLock { $0.integrity.absenceProofs = Keychain.absenceProofBudget }
            var failed = false
            for i in 0..<6 where !failed {
                do {
                    _ = try kc.copyMatching(Query(.genericPassword, genp("s1", "nosuch-\(i)")))
                } catch let e as KeychainError where e.status == .decode {
                    failed = true
                } catch {}
            }
            #expect(failed, "lookups that verified every bucket did not find the deleted row")
        }
    }

    @Test("a row deleted behind the vault's back: its entry stays, so the lookup verifies every bucket and fails")
    func deletedRowIsNotNotFound() throws {
        try withVault { v in
            try populated(v)
            try v.raw().exec("DELETE FROM items WHERE id = 1100")
            let kc = try incrementalWithoutPass(v)
            expectError(.decode, containing: ["integrity check failed", "items 1024–1535"]) {
                try kc.copyMatching(Query(.genericPassword, genp("s2", "acct1100")))
            }
        }
    }

    @Test("an entry of the same name in the other synchronizable state is doubt: every bucket is verified")
    func sameNameOtherSynchronizable() throws {
        try withVault { v in
            try populated(v)
            let kc = try incrementalWithoutPass(v)
            try v.raw().exec("DELETE FROM items WHERE id = 5")
            // acct5 (not synchronizable) was deleted; the synchronizable acct5 keeps an entry of
            // the same name, so the proof does not hold and the full check finds the deletion.
            expectError(.decode, containing: ["integrity check failed"]) {
                try kc.copyMatching(Query(.genericPassword, genp("s0", "acct5")))
            }
        }
    }

    @Test("the name lists' chunks deleted: no proof, the answer falls back to every bucket (still not found)")
    func tamperedNameListFallsBack() throws {
        try withVault { v in
            try populated(v)
            try v.raw().exec("DELETE FROM name_chunk")
            let kc = try incrementalWithoutPass(v)
            expectError(.itemNotFound) { try kc.copyMatching(Query(.genericPassword, genp("s1", "acct-nosuch"))) }
            #expect(kc.integrityCheckComplete, "an unproven 'not found' must verify every bucket")
        }
    }
}

/// The chunks a proof opened are kept (their names' hashes, by the chunk's keyed entry) until
/// every bucket is verified: a later proof in the directory opens only the chunks that changed,
/// and what it keeps never hides an entry.
@Suite("A proof of absence keeps the chunks it opened")
struct AbsenceChunksTests {
    private static func kept(_ kc: Keychain) -> Set<[UInt8]> {
        kc.state.withLock { Set($0.integrity.absenceChunks.values.flatMap(\.keys)) }
    }

    @Test(
        "a row deleted after a first proof of its directory: the kept chunk holds its name, so every bucket is verified"
    )
    func deletedAfterFirstProof() throws {
        try withVault { v in
            try populated(v)
            let kc = try incrementalWithoutPass(v)
            expectError(.itemNotFound) { try kc.copyMatching(Query(.genericPassword, genp("s1", "nosuch1"))) }
            #expect(!Self.kept(kc).isEmpty, "the proof kept nothing")
            try v.raw().exec("DELETE FROM items WHERE id = 600")
            expectError(.decode, containing: ["integrity check failed"]) {
                try kc.copyMatching(Query(.genericPassword, genp("s1", "acct600")))
            }
        }
    }

    @Test(
        "another process adds to the directory: the next proof opens the one changed chunk, and finds a new name deleted behind the vault's back"
    )
    func changedChunkOpenedAgain() throws {
        try withVault { v in
            try populated(v)
            let kc = try incrementalWithoutPass(v)
            expectError(.itemNotFound) { try kc.copyMatching(Query(.genericPassword, genp("s1", "nosuch1"))) }
            let before = Self.kept(kc)
            let other = try v.openUnlocked()
            let id = try other.add(.genericPassword, genp("s1", "fresh"), data: bytes("new")).id
            expectError(.itemNotFound) { try kc.copyMatching(Query(.genericPassword, genp("s1", "nosuch2"))) }
            let after = Self.kept(kc)
            #expect(
                before.subtracting(after).count == 1 && after.subtracting(before).count == 1,
                "\(before.count) → \(after.count)")
            #expect(!kc.integrityCheckComplete, "the second proof did not hold")
            try v.raw().exec("DELETE FROM items WHERE id = \(id)")
            expectError(.decode, containing: ["integrity check failed"]) {
                try kc.copyMatching(Query(.genericPassword, genp("s1", "fresh")))
            }
        }
    }

    @Test(
        "a kept chunk altered on disk: the list no longer authenticates, the proof gives up (still not found, every bucket verified)"
    )
    func alteredKeptChunk() throws {
        try withVault { v in
            try populated(v)
            let kc = try incrementalWithoutPass(v)
            expectError(.itemNotFound) { try kc.copyMatching(Query(.genericPassword, genp("s1", "nosuch1"))) }
            try v.raw().exec("UPDATE name_chunk SET sealed = sealed || x'00'")
            expectError(.itemNotFound) { try kc.copyMatching(Query(.genericPassword, genp("s1", "nosuch2"))) }
            #expect(kc.integrityCheckComplete, "a proof held over an altered list")
        }
    }
}
