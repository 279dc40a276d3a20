import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

// A service or server directory listed from its sealed name lists (vault format 5,
// NameLists.swift): one read of the caller's groups' lists and of the manifest, a few dozen
// chunks opened, no item's attribute box opened.

extension Keychain {
    /// The entries (id and name attributes) of the items of `itemClass` whose grouping attribute
    /// (service, server) is `value`, in every access group of the caller, in id order. Checked in
    /// one snapshot: the manifest's tag, the rollback mark, the id bucket table against the tag's
    /// top accumulator and the name lists' bucket table against its own (format 6; once per state
    /// of the vault), and each list's chunks against its bucket; then each chunk opened with the
    /// AD of its place. A list that does not match is errSecDecode naming the list's bucket only
    /// (nothing read from a chunk); it fails this listing, not the vault's other reads, whose
    /// rows are checked by their own buckets.
    public func nameList(
        _ itemClass: ItemClass, grouping value: AttributeValue, caller callerArgument: Caller? = nil
    ) throws -> [NameListEntry] {
        var out: [NameListEntry] = []
        try forEachNameListEntry(itemClass, grouping: value, caller: callerArgument) { out.append($0) }
        return out
    }

    /// The same entries handed to `body` one at a time, as their chunks are decoded: a listing
    /// of 10,000 names keeps no array of entries. A damaged chunk throws after `body` has seen
    /// the entries before it, so a caller drops what it gathered when this throws.
    ///
    /// `keptChunk` and `chunk` let a caller that kept what it made of an earlier listing of the
    /// same list (one access group) take a chunk's entries from there: `keptChunk` is asked, for
    /// each chunk, with the chunk's keyed entry in its list's bucket (`NameLists.chunkEntry`: its
    /// list, place and sealed bytes, under the manifest's entry key; the same bytes this listing
    /// compares with the authenticated bucket), whether the caller holds the entries it decoded
    /// from those bytes, by the ids of the first and last. `chunk` is told, before each chunk,
    /// its keyed entry and whether it is kept: a kept chunk hands no entries to `body` (the
    /// caller copies its own, decoded from the same bytes under the same key and AD), and only its
    /// ids are checked against its neighbours'. With several groups neither is called.
    /// `expecting` is told, before the first chunk, how many chunks the list has (one group:
    /// a caller sizes what it gathers from it).
    public func forEachNameListEntry(
        _ itemClass: ItemClass, grouping value: AttributeValue, caller callerArgument: Caller? = nil,
        expecting: (_ chunks: Int) -> Void = { _ in },
        keptChunk: ([UInt8]) -> (first: Int64, last: Int64)? = { _ in nil },
        chunk chunkStarts: ([UInt8], _ kept: Bool) throws -> Void = { _, _ in },
        _ body: (NameListEntry) throws -> Void
    ) throws {
        guard NameLists.listedClasses.contains(itemClass) else {
            throw KeychainError(.param, "\(itemClass.rawValue) items are not listed by directory")
        }
        let call = callContext(callerArgument)
        let keys = try call.unlockedKeys()
        let groups = call.caller.accessGroups
        try state.withLock { s in
            if let failure = s.integrity.failure { throw KeychainError(.decode, failure) }
        }
        let lists = NameLists(vaultID: vaultID, keys: keys.manifest)
        let indexes = groups.map { secondaryIndex(itemClass, group: $0, value, keys: keys) }
        let sealed = try readVerifyingTable(keys: keys, names: true) { vault, _, _ in
            try indexes.map { sidx in
                let chunks = try vault.nameChunks(secondaryIndex: sidx)
                let entries = chunks.map { NameLists.chunkEntry(sidx, $0.chunk, $0.sealed, key: keys.manifest.entry) }
                let found = NameLists.tally(entries)
                let want = try NameLists.stored(vault, sidx)
                guard found == want else {
                    throw KeychainError(
                        .decode,
                        "vault integrity check failed: \(NameLists.describe(sidx)) does not match the authenticated manifest (\(found.count) chunks found, \(want.count) expected): chunks were altered, deleted, added, swapped or replayed from an older copy"
                    )
                }
                return (chunks, entries)
            }
        }
        // One group's list is in id order as it is stored; several are merged by id.
        var merged: [NameListEntry] = []
        for (group, (sidx, (chunks, entries))) in zip(groups, zip(indexes, sealed)) {
            if groups.count == 1 { expecting(chunks.count) }
            var last = Int64.min
            for (position, (chunk, box)) in chunks.enumerated() {
                let next = position + 1 < chunks.count ? chunks[position + 1].chunk : Int64.max
                if groups.count == 1 {
                    if let kept = keptChunk(entries[position]) {
                        // Its entries were in id order and in its range when decoded (the entry
                        // binds the chunk's number); here only its place among its neighbours.
                        guard kept.first <= kept.last, kept.first > last, kept.first >= chunk, kept.last < next else {
                            throw KeychainError(
                                .decode, "vault integrity check failed: \(NameLists.describe(sidx)) is malformed")
                        }
                        try chunkStarts(entries[position], true)
                        last = kept.last
                        continue
                    }
                    try chunkStarts(entries[position], false)
                }
                try lists.forEachEntry(box, itemClass, sidx, chunk, accessGroup: group, groupingValue: value) { entry in
                    // Where an honest writer puts it: in id order, in its chunk's range. (Its
                    // group is the list's: the chunk opens only under its list's sidx.)
                    guard entry.id > last, entry.id >= chunk, entry.id < next else {
                        throw KeychainError(
                            .decode, "vault integrity check failed: \(NameLists.describe(sidx)) is malformed")
                    }
                    last = entry.id
                    if groups.count > 1 { merged.append(entry) } else { try body(entry) }
                }
            }
        }
        guard groups.count > 1 else { return }
        merged.sort { $0.id < $1.id }
        for entry in merged { try body(entry) }
    }
}
