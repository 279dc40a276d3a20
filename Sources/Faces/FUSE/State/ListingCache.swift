import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import Synchronization

/// Directory listings (name → inode) of service/server directories and of `/genp`, `/inet`,
/// valid while the vault's change stamp and the caller's access groups are the ones they were
/// made for. `ls -l` looks each listed name up again: which inode a name is comes from here
/// (the entry's stat, size and times, is read by id at the lookup, so that a write of an
/// item's data does not need its directory's listing made again).
///
/// Bounded by entries, least recently used first out: a daemon that walked every directory of
/// a 100,000-item vault keeps at most `maxEntries` names (with their inodes), not all of them.
/// A listing found stale is dropped at once (`evict`), not kept until pushed out.
final class ListingCache: Sendable {
    struct Listing: Sendable {
        let stamp: [Int64]
        let groups: [String]
        /// As readdir answers them: a first listing is not copied into another array for it.
        let entries: [DirectoryEntry]
        /// A service/server directory's: where each chunk of its name list put its names in
        /// `entries`, by the chunk's keyed entry (`Keychain.forEachNameListEntry`), so that the
        /// listing made after a change elsewhere in the vault takes them instead of opening and
        /// spelling the chunk again.
        let chunks: [[UInt8]: Chunk]
        /// Keyed by the name's bytes: NFC and NFD spellings are two names (two items). Made at the
        /// first lookup, not with the listing: a readdir alone (`ls -f`, a glob) looks nothing up.
        private let byName = NameIndex()

        init(stamp: [Int64], groups: [String], entries: [DirectoryEntry], chunks: [[UInt8]: Chunk] = [:]) {
            self.stamp = stamp
            self.groups = groups
            self.entries = entries
            self.chunks = chunks
        }

        func ino(named name: String) -> UInt64? { byName.ino(named: name, in: entries) }

        func isValid(stamp: [Int64], groups: [String]) -> Bool { self.stamp == stamp && self.groups == groups }
    }

    /// A chunk of a name list as a listing holds it: the ids of its first and last entries
    /// (every entry of the chunk, listed here or not) and the range of `entries` its names fill.
    struct Chunk: Sendable {
        let first: Int64
        let last: Int64
        let range: Range<Int>
    }

    /// A listing's entries and chunks, as `listItems` makes them.
    struct Made {
        var entries: [DirectoryEntry]
        var chunks: [[UInt8]: Chunk] = [:]
    }

    /// Entries kept at most over all listings. An entry (its name, inode and by-name key) costs
    /// about 150 bytes, so this is a few MiB; it holds the largest directory the benchmark
    /// lists (10,000) with room for the directories around it. A listing larger than this is
    /// made for its request and not kept.
    static let defaultMaxEntries = 32_768

    let maxEntries: Int

    private struct Kept {
        var listing: Listing
        var lastUse: UInt64
        /// Stats of listed items read at their lookups while the listing is valid (`remember`):
        /// at most one per entry, gone with the listing.
        var stats: [UInt64: NodeStat] = [:]
    }

    private struct State {
        var kept: [UInt64: Kept] = [:]
        var entries = 0
        var clock: UInt64 = 0

        mutating func remove(_ directory: UInt64) {
            if let old = kept.removeValue(forKey: directory) { entries -= old.listing.entries.count }
        }
    }

    private let state = Mutex(State())

    init(maxEntries: Int = ListingCache.defaultMaxEntries) { self.maxEntries = maxEntries }

    func listing(_ directory: UInt64) -> Listing? {
        state.withLock { s in
            guard s.kept[directory] != nil else { return nil }
            s.clock += 1
            s.kept[directory]!.lastUse = s.clock
            return s.kept[directory]!.listing
        }
    }

    func store(_ listing: Listing, for directory: UInt64) {
        state.withLock { s in
            s.remove(directory)
            guard listing.entries.count <= maxEntries else { return }
            // Least recently used out until the new listing fits. Listings are few (one per
            // directory walked), so a scan for the oldest is cheaper than keeping an order.
            while s.entries + listing.entries.count > maxEntries,
                let oldest = s.kept.min(by: { $0.value.lastUse < $1.value.lastUse })?.key
            {
                s.remove(oldest)
            }
            s.clock += 1
            s.kept[directory] = Kept(listing: listing, lastUse: s.clock)
            s.entries += listing.entries.count
        }
    }

    /// The stat of a listed item, read at an earlier lookup while the vault was as it is now
    /// (`stamp`, the listing's).
    func stat(of item: UInt64, in directory: UInt64, stamp: [Int64]) -> NodeStat? {
        state.withLock { s in
            guard let kept = s.kept[directory], kept.listing.stamp == stamp else { return nil }
            return kept.stats[item]
        }
    }

    /// Keeps an item's stat with its directory's listing, if that listing is still the one made
    /// at `stamp`: the next lookup of the name (`ls -l` again, an open) reads no row. Any change to
    /// the vault changes the stamp, and the listing and its stats go together.
    func remember(_ stat: NodeStat, in directory: UInt64, stamp: [Int64]) {
        state.withLock { s in
            guard s.kept[directory]?.listing.stamp == stamp else { return }
            s.kept[directory]!.stats[stat.ino] = stat
        }
    }

    /// Drops a directory's listing (found stale: the vault changed since it was made).
    func evict(_ directory: UInt64) { state.withLock { $0.remove(directory) } }

    /// Listings and entries kept now.
    var size: (listings: Int, entries: Int) { state.withLock { ($0.kept.count, $0.entries) } }
}

/// A name compared and hashed by its UTF-8 bytes (Swift's String equality is canonical
/// equivalence: NFC and NFD spellings are two names here), without copying the bytes out.
struct NameBytes: Hashable, Sendable {
    let name: String

    init(_ name: String) { self.name = name }

    static func == (a: NameBytes, b: NameBytes) -> Bool { a.name.utf8.elementsEqual(b.name.utf8) }

    func hash(into hasher: inout Hasher) {
        var name = name
        name.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
    }
}

/// A listing's names → inodes, made once, at the first lookup that needs it.
final class NameIndex: Sendable {
    private let index = Mutex<[NameBytes: UInt64]?>(nil)

    func ino(named name: String, in entries: [DirectoryEntry]) -> UInt64? {
        index.withLock { index in
            if index == nil {
                var made: [NameBytes: UInt64] = [:]
                made.reserveCapacity(entries.count)
                for entry in entries where made[NameBytes(entry.name)] == nil {
                    made[NameBytes(entry.name)] = entry.ino
                }
                index = made
            }
            return index![NameBytes(name)]
        }
    }
}
