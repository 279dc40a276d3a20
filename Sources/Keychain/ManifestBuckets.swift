import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

/// Vault format 4 splits the manifest's accumulator into buckets of item ids, so one item's rows
/// can be checked against the authenticated manifest without reading the whole table:
///
/// - bucket `b` holds the ids `b·width … b·width + width − 1` (bucket 0 also every id below 0,
///   so every id a file can hold has exactly one bucket); its rows are read by one range scan of
///   the primary key and its attribute-index rows by one of the index by item id;
/// - a bucket's `accumulator` is the XOR of the entries (`Manifest.entry`, `Manifest.tagEntry`)
///   of its rows and attribute-index rows, `count` its number of rows; both are stored in the
///   `manifest_bucket` table, a bucket with nothing in it not at all;
/// - the authenticated manifest's `accumulator` is the XOR over every stored bucket of its keyed
///   entry `entry(b, accumulator, count)`, and its `count` their sum. So the tag covers every
///   bucket, a commit rewrites the buckets it touched and XORs each one's old entry out of the
///   top and its new entry in (O(1) per bucket), and the unlock checks the tag over the bucket
///   table alone (one entry per bucket), leaving each bucket's rows for later.
///
/// Why the buckets cannot be recombined: a bucket entry is keyed BLAKE2b under the manifest's
/// entry key, like a row entry, so the top accumulator is an MSet-XOR-Hash over the set of
/// (bucket, accumulator, count) triples exactly as format 3's was over the rows; a table of
/// triples taken from several honest states, or with one dropped or altered, XORs to the
/// authenticated top only by predicting BLAKE2b outputs. Inside a bucket the format-3 argument
/// holds as it was, over the bucket's rows. docs/security.md states it in full.
enum ManifestBuckets {
    /// Item ids per bucket: 100,000 items are 196 buckets; one bucket is 512 rows and their
    /// index rows (about 1,500 keyed hashes, a millisecond or two).
    static let width: Int64 = 512

    static func bucket(of id: Int64) -> Int64 { max(id, 0) / width }

    /// The ids bucket `bucket` covers.
    static func ids(in bucket: Int64) -> ClosedRange<Int64> {
        (bucket == 0 ? Int64.min : bucket * width)...(bucket * width + width - 1)
    }

    /// How a bucket is named in messages and logs: its id range, nothing read from it.
    static func describe(_ bucket: Int64) -> String {
        "items \(max(bucket * width, 0))–\(bucket * width + width - 1) (manifest bucket \(bucket))"
    }

    /// The bucket's keyed entry in the top accumulator (zeros for an empty bucket, which is not
    /// stored), under the domain `kcfs/manifest-bucket/v1` (never a row's or an index row's).
    static func entry(_ bucket: Int64, _ value: ManifestBucket, key: SecureBytes) -> [UInt8] {
        guard !value.isEmpty else { return Manifest.zeros }
        return KeyedHash.hash(
            Framing.frame([
                Framing.text("kcfs/manifest-bucket/v1"), Framing.int(bucket), Framing.int(value.count),
                value.accumulator,
            ]), key: key)
    }

    /// The top accumulator and row count a set of buckets stands for.
    static func fold(_ buckets: [Int64: ManifestBucket], key: SecureBytes) -> (accumulator: [UInt8], count: Int64) {
        var top = ManifestBucket()
        for (bucket, value) in buckets {
            top.xor(entry(bucket, value, key: key))
            top.count += value.count
        }
        return (top.accumulator, top.count)
    }

    /// The buckets of what the store holds (all of it, or the ids in `ids`): every row's entry
    /// and every attribute-index row's entry XORed into its item's bucket.
    static func tally(
        _ vault: any ItemStoreReader, key: SecureBytes, ids: ClosedRange<Int64>? = nil
    ) throws -> [Int64: ManifestBucket] {
        var buckets: [Int64: ManifestBucket] = [:]
        func row(_ row: StoredItem) {
            buckets[bucket(of: row.id), default: ManifestBucket()].xor(Manifest.entry(row, key: key))
            buckets[bucket(of: row.id), default: ManifestBucket()].count += 1
        }
        func tag(_ itemID: Int64, _ tag: [UInt8]) {
            buckets[bucket(of: itemID), default: ManifestBucket()].xor(Manifest.tagEntry(itemID: itemID, tag, key: key))
        }
        if let ids {
            try vault.forEachItem(ids: ids, row)
            try vault.forEachAttributeTag(itemIDs: ids, tag)
        } else {
            try vault.forEachItem(row)
            try vault.forEachAttributeTag(tag)
        }
        return buckets.filter { !$0.value.isEmpty }
    }

    /// The stored bucket table.
    static func stored(_ vault: any ItemStoreReader) throws -> [Int64: ManifestBucket] {
        try vault.manifestBuckets().mapValues { ManifestBucket(accumulator: $0.accumulator, count: $0.count) }
    }

    /// Writes a whole bucket table (migration, rotation), replacing what was stored.
    static func write(_ buckets: [Int64: ManifestBucket], to vault: any ItemStoreWriter) throws {
        try vault.clearManifestBuckets()
        for (bucket, value) in buckets where !value.isEmpty {
            try vault.setManifestBucket(bucket, (value.accumulator, value.count))
        }
    }

    /// The buckets whose stored value differs from the one found, named, at most ten.
    static func differing(found: [Int64: ManifestBucket], stored: [Int64: ManifestBucket]) -> String? {
        let differing = Set(found.keys).union(stored.keys).sorted().filter {
            found[$0] ?? ManifestBucket() != stored[$0] ?? ManifestBucket()
        }
        guard !differing.isEmpty else { return nil }
        let named = differing.prefix(10).map(describe).joined(separator: ", ")
        return differing.count > 10 ? "\(named) and \(differing.count - 10) more" : named
    }
}

/// One bucket's accumulator and row count (or a change to them: XOR and difference).
struct ManifestBucket: Equatable, Sendable {
    var accumulator = Manifest.zeros
    var count: Int64 = 0

    var isEmpty: Bool { count == 0 && accumulator == Manifest.zeros }

    mutating func xor(_ entry: [UInt8]) {
        for i in 0..<32 { accumulator[i] ^= entry[i] }
    }

    /// This bucket with `change` applied.
    func applying(_ change: ManifestBucket) -> ManifestBucket {
        var next = self
        next.xor(change.accumulator)
        next.count += change.count
        return next
    }
}

/// The changes one write transaction makes to the buckets, kept by `ManifestedWriter` and
/// folded into the stored buckets and the top accumulator once, when the transaction commits.
struct BucketChanges {
    private(set) var changes: [Int64: ManifestBucket] = [:]

    mutating func toggle(_ itemID: Int64, _ entry: [UInt8]) {
        changes[ManifestBuckets.bucket(of: itemID), default: ManifestBucket()].xor(entry)
    }

    mutating func count(_ itemID: Int64, _ delta: Int64) {
        changes[ManifestBuckets.bucket(of: itemID), default: ManifestBucket()].count += delta
    }

    /// Applies the changes to the stored buckets and to `manifest`'s top accumulator: per
    /// bucket touched, one read and one write of its row and two keyed hashes.
    func fold(into manifest: inout Manifest, vault: any ItemStoreWriter, key: SecureBytes) throws {
        for (bucket, change) in changes where !change.isEmpty {
            let old =
                try vault.manifestBucket(bucket).map { ManifestBucket(accumulator: $0.accumulator, count: $0.count) }
                ?? ManifestBucket()
            let new = old.applying(change)
            var top = ManifestBucket(accumulator: manifest.accumulator)
            top.xor(ManifestBuckets.entry(bucket, old, key: key))
            top.xor(ManifestBuckets.entry(bucket, new, key: key))
            manifest.accumulator = top.accumulator
            try vault.setManifestBucket(bucket, new.isEmpty ? nil : (new.accumulator, new.count))
        }
    }
}
