import Foundation
import KeychainCrypto
import KeychainStore
import Testing

@_spi(CallerRule) @testable import Keychain

// A listing that takes the entries of unchanged chunks from the one made before
// (`Keychain.forEachNameListEntry`, `keptChunk`): after a change elsewhere every chunk is kept and
// none is opened; after a change in the list only the chunks it touched are decoded; a tampered
// chunk still fails the listing, kept or not.

@Suite("Name lists: chunks kept between listings")
struct NameListReuseTests {
    /// What a listing keeps, as the mount's listing cache keeps it: each chunk's first and last
    /// ids and its entries (id, account), by the chunk's keyed entry.
    struct Kept {
        var chunks: [[UInt8]: (first: Int64, last: Int64, entries: [(Int64, String)])] = [:]
        /// The chunks this listing decoded (not kept).
        var decoded = 0

        var all: [Int64: String] {
            var out: [Int64: String] = [:]
            for chunk in chunks.values { for (id, account) in chunk.entries { out[id] = account } }
            return out
        }
    }

    /// A listing of `service` that takes from `previous` what it can.
    static func list(_ kc: Keychain, _ service: String, previous: Kept = Kept()) throws -> Kept {
        var made = Kept()
        var open: [UInt8]?
        try kc.forEachNameListEntry(
            .genericPassword, grouping: .string(service),
            keptChunk: { previous.chunks[$0].map { ($0.first, $0.last) } },
            chunk: { entry, kept in
                if kept {
                    made.chunks[entry] = previous.chunks[entry]
                    open = nil
                } else {
                    made.decoded += 1
                    made.chunks[entry] = (Int64.max, Int64.min, [])
                    open = entry
                }
            }
        ) { entry in
            guard let open, case .string(let account)? = entry.nameAttributes[Schema.account] else {
                Issue.record("an entry outside a decoded chunk, or without an account")
                return
            }
            made.chunks[open]!.first = min(made.chunks[open]!.first, entry.id)
            made.chunks[open]!.last = max(made.chunks[open]!.last, entry.id)
            made.chunks[open]!.entries.append((entry.id, account))
        }
        return made
    }

    @Test("a change elsewhere keeps every chunk; a change in the list decodes only the chunks it touched")
    func keptChunks() throws {
        try NameListTests.withListedVault { v, kc in
            let first = try Self.list(kc, "big")
            #expect(first.chunks.count >= 2 && first.decoded == first.chunks.count)
            #expect(first.all == (try NameListTests.rows(kc, "big")))

            _ = try kc.add(.genericPassword, NameListTests.genp("small", "t"), data: [4])
            let second = try Self.list(kc, "big", previous: first)
            #expect(second.decoded == 0, "nothing in big changed: no chunk opened")
            #expect(second.all == first.all)

            try kc.update(
                Query(.genericPassword, NameListTests.genp("big", "member500")),
                attributes: [Schema.account: .string("renamed")])
            let third = try Self.list(kc, "big", previous: second)
            #expect(third.decoded >= 1 && third.decoded < third.chunks.count)
            #expect(third.all == (try NameListTests.rows(kc, "big")))
            #expect(third.all.values.contains("renamed") && !third.all.values.contains("member500"))
            // Taken from a listing of another list (same ids), nothing is kept.
            #expect(try Self.list(kc, "small", previous: third).decoded == 1)
        }
    }

    @Test("a tampered chunk fails the listing though the previous listing kept it")
    func tamperedKeptChunk() throws {
        try NameListTests.withListedVault { v, kc in
            let kept = try Self.list(kc, "big")
            let db = try v.raw()
            let chunk = try #require(try NameListTests.chunks(db).first { $0.sealed.count > 1_000 })
            var sealed = chunk.sealed
            sealed[sealed.count / 2] ^= 1
            _ = try db.query(
                "UPDATE name_chunk SET sealed = ? WHERE sidx = ? AND chunk = ?",
                [.blob(sealed), .blob(chunk.sidx), .integer(chunk.chunk)])
            expectError(.decode, containing: ["the name list of directory bucket"]) {
                _ = try Self.list(kc, "big", previous: kept)
            }
        }
    }

    @Test("a kept chunk whose ids no longer fit between its neighbours fails the listing")
    func keptChunkOutOfPlace() throws {
        try NameListTests.withListedVault { _, kc in
            var kept = try Self.list(kc, "big")
            // What the caller says it kept must fit the list's order: ids claimed past the next
            // chunk's start are refused, not trusted.
            for key in kept.chunks.keys { kept.chunks[key]!.last = Int64.max - 1 }
            expectError(.decode, containing: ["is malformed"]) {
                _ = try Self.list(kc, "big", previous: kept)
            }
        }
    }
}
