import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

/// Vault format 5 keeps, beside the rows, one sealed name list per secondary-index value (per
/// service or server directory and access group) of the classes listed in directories (generic
/// and internet passwords), so a directory is listed by opening a few dozen chunks instead of
/// every item's attribute box:
///
/// - a list is its entries (item id and the attributes its file name is spelled from,
///   `NameListEntry`) in id order, cut into chunks of about one page (`NameListCodec`); a chunk
///   is keyed by the lowest id it may hold, so an entry belongs to the chunk with the greatest
///   key at or below its id (or the first chunk), and a change re-seals only that chunk (split
///   in two when it outgrows a page, removed when it empties);
/// - each chunk is sealed under the metadata key (the attribute boxes' key: a name list holds
///   attribute values and nothing else) with an AD binding the table, vault id, class,
///   secondary index, chunk key and format, so no chunk opens anywhere but where it was written;
/// - each list has a bucket (`name_bucket`): the XOR of its chunks' keyed entries and their
///   count; each bucket's keyed entry is XORed into the manifest's name-list accumulator
///   (`Manifest.names`, format 6; format 5 XORed them into the top beside the id buckets'), so
///   the authenticated tag covers every chunk, and a listing checks its own list's chunks
///   against its bucket in the snapshot where it checks the lists' bucket table against the
///   tag (`Keychain.nameList`).
///
/// The lists are kept by the writer every write transaction goes through (ManifestedWriter):
/// an insert, a delete, or a replace that changes the row's class, primary or secondary index
/// (a rename, a new access group) changes the list; a rewrite of the data does not.
/// docs/security.md, "Name lists (vault format 5)", states the argument in full.
struct NameLists {
    /// The classes listed in service/server directories.
    static let listedClasses: Set<ItemClass> = [.genericPassword, .internetPassword]

    let vaultID: [UInt8]
    let keys: ManifestKeys

    // MARK: Sealing

    /// AD of a chunk: `kcfs/name-chunk/v1`, the table, the vault id, the class, the secondary
    /// index, the chunk key and the format. A chunk moved to another list, another position,
    /// another class or another vault does not open.
    private func chunkAD(_ itemClass: ItemClass, _ sidx: [UInt8], _ chunk: Int64) -> [UInt8] {
        Framing.frame([
            Framing.text("kcfs/name-chunk/v1"), Framing.text("name_chunk"), vaultID, Framing.text(itemClass.rawValue),
            sidx, Framing.int(chunk), Framing.int(VaultHeader.nameListFormat),
        ])
    }

    func seal(_ plain: [UInt8], _ itemClass: ItemClass, _ sidx: [UInt8], _ chunk: Int64) throws -> [UInt8] {
        try AEAD.seal(plain, associatedData: chunkAD(itemClass, sidx, chunk), key: keys.metadata)
    }

    /// The chunk's entries, of the list of `accessGroup` (not stored per entry: pass "" where only
    /// the stored fields matter, as when a chunk is cut again), each with `groupingValue`;
    /// errSecDecode when it does not open or decode.
    func open(
        _ sealed: [UInt8], _ itemClass: ItemClass, _ sidx: [UInt8], _ chunk: Int64, accessGroup: String = "",
        groupingValue: AttributeValue? = nil
    ) throws -> [NameListEntry] {
        var out: [NameListEntry] = []
        try forEachEntry(sealed, itemClass, sidx, chunk, accessGroup: accessGroup, groupingValue: groupingValue) {
            out.append($0)
        }
        return out
    }

    /// The same, each entry handed to `body` as it is decoded (`NameListCodec.forEachEntry`).
    func forEachEntry(
        _ sealed: [UInt8], _ itemClass: ItemClass, _ sidx: [UInt8], _ chunk: Int64, accessGroup: String,
        groupingValue: AttributeValue?, _ body: (NameListEntry) throws -> Void
    ) throws {
        guard let plain = try? AEAD.open(sealed, associatedData: chunkAD(itemClass, sidx, chunk), key: keys.metadata)
        else {
            throw KeychainError(
                .decode, "vault integrity check failed: a chunk of \(Self.describe(sidx)) does not authenticate")
        }
        try NameListCodec.forEachEntry(
            plain, itemClass: itemClass, accessGroup: accessGroup, groupingValue: groupingValue, body)
    }

    /// The class and name-list entry of a row of a listed class, its attributes opened (nil for
    /// other classes). errSecDecode when the attributes do not authenticate.
    func entry(of row: StoredItem) throws -> (ItemClass, NameListEntry)? {
        guard let itemClass = ItemClass(rawValue: row.itemClass), Self.listedClasses.contains(itemClass) else {
            return nil
        }
        let attributes = try Keychain.openAttributes(
            row, itemClass: itemClass, vaultID: vaultID, metadataKey: keys.metadata)
        return (itemClass, NameListEntry(id: row.id, itemClass, attributes: attributes))
    }

    // MARK: The manifest's name buckets

    /// A chunk's keyed entry in its list's bucket (domain `kcfs/manifest-name-chunk/v1`).
    static func chunkEntry(_ sidx: [UInt8], _ chunk: Int64, _ sealed: [UInt8], key: SecureBytes) -> [UInt8] {
        KeyedHash.hash(
            Framing.frame([
                Framing.text("kcfs/manifest-name-chunk/v1"), sidx, Framing.int(chunk), KeyedHash.digest([sealed]),
            ]), key: key)
    }

    /// A list's bucket's keyed entry in the top accumulator (domain `kcfs/manifest-name-bucket/v1`,
    /// never an id bucket's); zeros for an empty list, which has no bucket.
    static func bucketEntry(_ sidx: [UInt8], _ value: ManifestBucket, key: SecureBytes) -> [UInt8] {
        guard !value.isEmpty else { return Manifest.zeros }
        return KeyedHash.hash(
            Framing.frame([
                Framing.text("kcfs/manifest-name-bucket/v1"), sidx, Framing.int(value.count), value.accumulator,
            ]), key: key)
    }

    /// The XOR of every list bucket's entry: the manifest's `names` (format 5: what the name
    /// lists added to the top accumulator). The same fold over the stored buckets, read one by one.
    static func foldStored(_ vault: any ItemStoreReader, key: SecureBytes) throws -> [UInt8] {
        var top = ManifestBucket()
        try vault.forEachNameBucket { sidx, accumulator, count in
            top.xor(bucketEntry(sidx, ManifestBucket(accumulator: accumulator, count: count), key: key))
        }
        return top.accumulator
    }

    static func fold(_ buckets: [[UInt8]: ManifestBucket], key: SecureBytes) -> [UInt8] {
        var top = ManifestBucket()
        for (sidx, value) in buckets { top.xor(bucketEntry(sidx, value, key: key)) }
        return top.accumulator
    }

    /// One list's bucket as its chunks make it, from their entries (`chunkEntry`).
    static func tally(_ entries: [[UInt8]]) -> ManifestBucket {
        var bucket = ManifestBucket()
        for entry in entries {
            bucket.xor(entry)
            bucket.count += 1
        }
        return bucket
    }

    /// Every list's bucket as the stored chunks make it.
    static func tally(_ vault: any ItemStoreReader, key: SecureBytes) throws -> [[UInt8]: ManifestBucket] {
        var buckets: [[UInt8]: ManifestBucket] = [:]
        try vault.forEachNameChunk { sidx, chunk, sealed in
            buckets[sidx, default: ManifestBucket()].xor(chunkEntry(sidx, chunk, sealed, key: key))
            buckets[sidx, default: ManifestBucket()].count += 1
        }
        return buckets
    }

    /// One list's stored bucket; empty when the list has none.
    static func stored(_ vault: any ItemStoreReader, _ sidx: [UInt8]) throws -> ManifestBucket {
        try vault.nameBucket(secondaryIndex: sidx).map { ManifestBucket(accumulator: $0.accumulator, count: $0.count) }
            ?? ManifestBucket()
    }

    static func stored(_ vault: any ItemStoreReader) throws -> [[UInt8]: ManifestBucket] {
        try vault.nameBuckets().mapValues { ManifestBucket(accumulator: $0.accumulator, count: $0.count) }
    }

    /// How a list is named in messages and logs: the first bytes of its keyed secondary index,
    /// nothing read from a row or a chunk.
    static func describe(_ sidx: [UInt8]) -> String {
        "the name list of directory bucket " + sidx.prefix(6).map { AttributeText.hex($0, width: 2) }.joined()
    }

    /// The lists whose stored bucket differs from the one found, named, at most ten.
    static func differing(found: [[UInt8]: ManifestBucket], stored: [[UInt8]: ManifestBucket]) -> String? {
        let differing = Set(found.keys).union(stored.keys).filter {
            found[$0] ?? ManifestBucket() != stored[$0] ?? ManifestBucket()
        }
        guard !differing.isEmpty else { return nil }
        let named = differing.prefix(10).map(describe).joined(separator: ", ")
        return differing.count > 10 ? "\(named) and \(differing.count - 10) more" : named
    }

    // MARK: Building and keeping

    /// Every list made anew from the rows (migration to format 5, rotation): the old chunks and
    /// buckets removed, each list written in chunks, its bucket stored. Returns the buckets.
    @discardableResult
    func rebuild(in vault: any ItemStoreWriter) throws -> [[UInt8]: ManifestBucket] {
        try vault.clearNameLists()
        var lists: [[UInt8]: (itemClass: ItemClass, entries: [NameListEntry])] = [:]
        try vault.forEachItem { row in
            guard let (itemClass, entry) = try entry(of: row) else { return }
            lists[row.secondaryIndex, default: (itemClass, [])].entries.append(entry)
        }
        var buckets: [[UInt8]: ManifestBucket] = [:]
        for (sidx, list) in lists {
            var bucket = ManifestBucket()
            for (first, plain) in NameListCodec.chunks(list.entries) {
                let sealed = try seal(plain, list.itemClass, sidx, first)
                try vault.setNameChunk(secondaryIndex: sidx, chunk: first, sealed: sealed)
                bucket.xor(Self.chunkEntry(sidx, first, sealed, key: keys.entry))
                bucket.count += 1
            }
            try vault.setNameBucket(secondaryIndex: sidx, (bucket.accumulator, bucket.count))
            buckets[sidx] = bucket
        }
        return buckets
    }

    /// Applies one transaction's list changes: per list touched, the chunks that hold the changed
    /// ids are opened, changed, cut again and re-sealed (the others are left as they are); the
    /// list's bucket and the top accumulator follow.
    func apply(_ changes: NameListChanges, to vault: any ItemStoreWriter, manifest: inout Manifest) throws {
        for (sidx, change) in changes.lists {
            let old = try Self.stored(vault, sidx)
            var bucket = old
            // The chunks a change falls in (each read by one probe: a list is not read whole), by
            // key, with their entries; Int64.min: the list had no chunk yet.
            var stored: [Int64: [UInt8]] = [:]
            var touched: [Int64: [NameListEntry]] = [:]
            for (id, entry) in change.entries {
                var key = Int64.min
                if let found = try vault.nameChunk(secondaryIndex: sidx, holding: id) {
                    key = found.chunk
                    if stored[key] == nil { stored[key] = found.sealed }
                }
                if touched[key] == nil {
                    touched[key] = key == .min ? [] : try open(stored[key]!, change.itemClass, sidx, key)
                }
                touched[key]!.removeAll { $0.id == id }
                if let entry { touched[key]!.append(entry) }
            }
            for (key, entries) in touched {
                var lowest = Int64.max
                if key != .min, let sealed = stored[key] {
                    let chunk = key
                    try vault.setNameChunk(secondaryIndex: sidx, chunk: chunk, sealed: nil)
                    bucket.xor(Self.chunkEntry(sidx, chunk, sealed, key: keys.entry))
                    bucket.count -= 1
                    lowest = chunk
                }
                for (index, (first, plain)) in NameListCodec.chunks(entries).enumerated() {
                    // The first piece keeps the chunk's key (lower only if an entry below it came in).
                    let chunk = index == 0 ? min(lowest, first) : first
                    let sealed = try seal(plain, change.itemClass, sidx, chunk)
                    try vault.setNameChunk(secondaryIndex: sidx, chunk: chunk, sealed: sealed)
                    bucket.xor(Self.chunkEntry(sidx, chunk, sealed, key: keys.entry))
                    bucket.count += 1
                }
            }
            // Format 6: the lists' own accumulator (a commit runs on today's format only).
            var top = ManifestBucket(accumulator: manifest.names ?? Manifest.zeros)
            top.xor(Self.bucketEntry(sidx, old, key: keys.entry))
            top.xor(Self.bucketEntry(sidx, bucket, key: keys.entry))
            manifest.names = top.accumulator
            try vault.setNameBucket(secondaryIndex: sidx, bucket.isEmpty ? nil : (bucket.accumulator, bucket.count))
        }
    }
}

/// The name-list changes one write transaction makes, kept by `ManifestedWriter` and applied
/// once, when the transaction commits: per list, each changed id's entry after the
/// transaction (nil: no longer in this list).
struct NameListChanges {
    private(set) var lists: [[UInt8]: (itemClass: ItemClass, entries: [Int64: NameListEntry?])] = [:]

    mutating func remove(_ id: Int64, from sidx: [UInt8], _ itemClass: ItemClass) {
        lists[sidx, default: (itemClass, [:])].entries[id] = .some(nil)
    }

    mutating func add(_ entry: NameListEntry, to sidx: [UInt8], _ itemClass: ItemClass) {
        lists[sidx, default: (itemClass, [:])].entries[entry.id] = .some(entry)
    }
}
