import Foundation
import KeychainCrypto
import KeychainStore
import Testing

@_spi(CallerRule) @testable import Keychain

// The name lists of vault format 5 (NameLists.swift) through the core: every write keeps them
// equal to the rows, a listing of a large directory opens a few dozen chunks, and a chunk
// altered, deleted, swapped or replayed fails the listing (errSecDecode) without failing reads
// by id; `verify` finds a list a writer got wrong.

@Suite("Name lists")
struct NameListTests {
    static let team = Caller(accessGroups: ["default", "team"], authenticationUI: .fail)

    static func genp(_ service: String, _ account: String, group: String? = nil) -> Attributes {
        var attributes: Attributes = [Schema.service: .string(service), Schema.account: .string(account)]
        if let group { attributes[Schema.accessGroup] = .string(group) }
        return attributes
    }

    /// The listing's (id, account) pairs.
    static func listed(_ kc: Keychain, _ service: String, caller: Caller = .default) throws -> [Int64: String] {
        var out: [Int64: String] = [:]
        for entry in try kc.nameList(.genericPassword, grouping: .string(service), caller: caller) {
            guard case .string(let account)? = entry.nameAttributes[Schema.account] else {
                Issue.record("entry \(entry.id) has no account")
                continue
            }
            out[entry.id] = account
        }
        return out
    }

    /// What the rows say (every item's id and account in the service), the oracle.
    static func rows(_ kc: Keychain, _ service: String, caller: Caller = .default) throws -> [Int64: String] {
        var out: [Int64: String] = [:]
        try kc.forEachItem(.genericPassword, grouping: .string(service), caller: caller) {
            out[$0.id] = $0.string(Schema.account)
        }
        return out
    }

    @Test("adds, batch adds, renames, group changes, data rewrites and deletes keep every list equal to the rows")
    func writesKeepTheLists() throws {
        try withVault { v throws in
            let kc = v.keychain
            var ids: [Int64] = []
            for i in 0..<30 { ids.append(try kc.add(.genericPassword, Self.genp("svc", "a\(i)"), data: [1]).id) }
            _ = try kc.addBatch(
                (0..<1_200).map { NewItem(.genericPassword, Self.genp("big", "b\($0)"), data: [2]) })
            // A rename within the service, one to another service, a group change, a data rewrite.
            try kc.update(Query(.genericPassword, Self.genp("svc", "a1")), attributes: [Schema.account: .string("z1")])
            try kc.update(Query(.genericPassword, Self.genp("svc", "a2")), attributes: [Schema.service: .string("big")])
            try kc.update(
                Query(.genericPassword, Self.genp("svc", "a3")), attributes: [Schema.accessGroup: .string("team")],
                caller: Self.team)
            let chunksBefore = try v.raw().query("SELECT sidx, chunk, sealed FROM name_chunk ORDER BY sidx, chunk")
            try kc.update(Query(.genericPassword, Self.genp("svc", "a4")), attributes: [:], data: [9, 9])
            #expect(
                try v.raw().query("SELECT sidx, chunk, sealed FROM name_chunk ORDER BY sidx, chunk") == chunksBefore,
                "a data rewrite re-seals no chunk")
            _ = try kc.delete(Query(.genericPassword, Self.genp("svc", "a5")))
            for i in stride(from: 0, to: 1_200, by: 3) {
                _ = try kc.delete(Query(.genericPassword, Self.genp("big", "b\(i)")))
            }

            for kc in [kc, try v.openUnlocked()] {
                for service in ["svc", "big"] {
                    for caller in [Caller.default, Self.team] {
                        #expect(try Self.listed(kc, service, caller: caller) == Self.rows(kc, service, caller: caller))
                    }
                }
                #expect(try Self.listed(kc, "svc")[ids[1]] == "z1")
                #expect(
                    try Self.listed(kc, "svc")[ids[3]] == nil
                        && Self.listed(kc, "svc", caller: Self.team)[ids[3]] == "a3")
                #expect(try Self.listed(kc, "big")[ids[2]] == "a2")
            }
            // 1,200 − 400 + 1 entries of about 15 bytes: several chunks, none over a page.
            let big = try v.raw().query("SELECT length(sealed) FROM name_chunk")
            #expect(big.count >= 4)
            #expect(big.allSatisfy { if case .integer(let n) = $0[0] { n <= 4_096 } else { false } })
            let report = try kc.verify(passphrase: try secure(testPassphrase))
            #expect(report.isClean, "\(report.failures) \(report.damaged)")
        }
    }

    /// A vault with one 1,000-entry service (several chunks) and one other, unlocked.
    static func withListedVault(_ body: (TestVault, Keychain) throws -> Void) throws {
        try withVault { v throws in
            _ = try v.keychain.addBatch(
                (0..<1_000).map { NewItem(.genericPassword, Self.genp("big", "member\($0)"), data: [2]) })
            _ = try v.keychain.add(.genericPassword, Self.genp("small", "s"), data: [3])
            try body(v, try v.openUnlocked())
        }
    }

    static func chunks(_ db: RawDB) throws -> [(sidx: [UInt8], chunk: Int64, sealed: [UInt8])] {
        try db.query("SELECT sidx, chunk, sealed FROM name_chunk ORDER BY sidx, chunk").map {
            guard case .blob(let sidx) = $0[0], case .integer(let chunk) = $0[1], case .blob(let sealed) = $0[2] else {
                throw RawDBError(description: "unexpected name_chunk row")
            }
            return (sidx, chunk, sealed)
        }
    }

    /// The listing of `big` fails with errSecDecode naming a list's bucket, nothing else; a read
    /// by id still works.
    static func expectListingFails(_ kc: Keychain, sourceLocation: SourceLocation = #_sourceLocation) throws {
        expectError(.decode, containing: ["the name list of directory bucket"], sourceLocation: sourceLocation) {
            try kc.nameList(.genericPassword, grouping: .string("big"))
        }
        do {
            _ = try kc.nameList(.genericPassword, grouping: .string("big"))
        } catch let e as KeychainError {
            #expect(!e.message.contains("member"), "the message names no account", sourceLocation: sourceLocation)
        }
        let item = try kc.item(id: 1, itemClass: .genericPassword, withData: true)
        #expect(item.data == [2], sourceLocation: sourceLocation)
    }

    @Test("a flipped byte, a deleted chunk, two chunks swapped: the listing fails errSecDecode; reads by id go on")
    func tamperedChunks() throws {
        for tamper in ["flip", "delete", "swap", "move"] {
            try Self.withListedVault { v, kc in
                let db = try v.raw()
                let chunks = try Self.chunks(db).filter { $0.sealed.count > 1_000 }
                try #require(chunks.count >= 2)
                let (a, b) = (chunks[0], chunks[1])
                switch tamper {
                case "flip":
                    var sealed = a.sealed
                    sealed[sealed.count / 2] ^= 1
                    _ = try db.query(
                        "UPDATE name_chunk SET sealed = ? WHERE sidx = ? AND chunk = ?",
                        [.blob(sealed), .blob(a.sidx), .integer(a.chunk)])
                case "delete":
                    _ = try db.query(
                        "DELETE FROM name_chunk WHERE sidx = ? AND chunk = ?", [.blob(a.sidx), .integer(a.chunk)])
                case "swap":
                    _ = try db.query(
                        "UPDATE name_chunk SET sealed = ? WHERE sidx = ? AND chunk = ?",
                        [.blob(b.sealed), .blob(a.sidx), .integer(a.chunk)])
                    _ = try db.query(
                        "UPDATE name_chunk SET sealed = ? WHERE sidx = ? AND chunk = ?",
                        [.blob(a.sealed), .blob(b.sidx), .integer(b.chunk)])
                default:
                    // A chunk moved to another key of its list (its sealed bytes unchanged).
                    _ = try db.query(
                        "UPDATE name_chunk SET chunk = ? WHERE sidx = ? AND chunk = ?",
                        [.integer(a.chunk - 1), .blob(a.sidx), .integer(a.chunk)])
                }
                try Self.expectListingFails(kc)
                #expect(try Self.listed(kc, "small").count == 1, "\(tamper): another directory's listing is unaffected")
                let report = try kc.verify(passphrase: try secure(testPassphrase))
                #expect(!report.isClean, "\(tamper): verify finds it")
            }
        }
    }

    @Test("an old chunk replayed (with or without its old bucket) fails the listing errSecDecode")
    func replayedChunk() throws {
        for withBucket in [false, true] {
            try Self.withListedVault { v, kc in
                let db = try v.raw()
                // The last chunk of `big` (the list with several chunks).
                let all = try Self.chunks(db)
                let big = try #require(Dictionary(grouping: all, by: \.sidx).values.max { $0.count < $1.count })
                let old = try #require(big.last)
                let oldBucket = try db.query(
                    "SELECT accumulator, count FROM name_bucket WHERE sidx = ?", [.blob(old.sidx)])
                // The last chunk of `big` changes when an item is added there.
                _ = try kc.add(.genericPassword, Self.genp("big", "new"), data: [4])
                _ = try kc.nameList(.genericPassword, grouping: .string("big"))
                _ = try db.query(
                    "INSERT OR REPLACE INTO name_chunk(sidx, chunk, sealed) VALUES(?, ?, ?)",
                    [.blob(old.sidx), .integer(old.chunk), .blob(old.sealed)])
                if withBucket, let row = oldBucket.first {
                    _ = try db.query(
                        "UPDATE name_bucket SET accumulator = ?, count = ? WHERE sidx = ?",
                        [row[0], row[1], .blob(old.sidx)])
                    expectError(.decode, containing: ["bucket table does not match"]) {
                        try kc.nameList(.genericPassword, grouping: .string("big"))
                    }
                } else {
                    try Self.expectListingFails(kc)
                }
            }
        }
    }

    @Test("verify reports a list a writer got wrong, though the manifest covers it (a desync)")
    func verifyFindsADesync() throws {
        try Self.withListedVault { v, kc in
            // A buggy writer: drops one entry from `big`'s list and re-signs the manifest over it.
            let keys = try kc.currentKeys()
            let sidx = kc.secondaryIndex(.genericPassword, group: "default", .string("big"), keys: keys)
            try kc.store.write { vault in
                let state = try AuthenticatedState.read(from: vault)
                var manifest = try state.verified(try vault.meta("manifest"), keys: keys.manifest)
                var changes = NameListChanges()
                changes.remove(7, from: sidx, .genericPassword)
                try NameLists(vaultID: kc.vaultID, keys: keys.manifest).apply(changes, to: vault, manifest: &manifest)
                try vault.setMeta("manifest", state.encode(manifest, keys: keys.manifest))
            }
            #expect(try Self.listed(kc, "big")[7] == nil, "the manifest covers the wrong list: the listing shows it")
            let report = try kc.verify(passphrase: try secure(testPassphrase))
            #expect(report.failures.contains { $0.contains("the name lists do not match the items in 1 directory") })
            #expect(report.damaged.isEmpty)
        }
    }

    @Test("a master-key rotation re-seals every list under the new keys")
    func rotation() throws {
        try Self.withListedVault { v, kc in
            let before = try Self.chunks(v.raw())
            try kc.rotateMasterKey(old: try secure(testPassphrase), new: try secure("rotated passphrase"))
            let after = try Self.chunks(v.raw())
            #expect(after.count == before.count)
            #expect(Set(after.map(\.sealed)).isDisjoint(with: before.map(\.sealed)))
            let reopened = try v.openUnlocked(passphrase: "rotated passphrase")
            #expect(try Self.listed(reopened, "big") == Self.rows(reopened, "big"))
            #expect(try Self.listed(reopened, "big").count == 1_000)
        }
    }
}
