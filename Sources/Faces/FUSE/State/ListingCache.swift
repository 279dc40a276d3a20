import Foundation
import Keychain
import KeychainAccess
import Synchronization

/// Directory listings (name → stat) of service/server directories, valid while the vault's
/// change stamp and the caller's access groups are the ones they were made for. Spelling
/// 10,000 names means decrypting 10,000 attribute sets, and `ls -l` then looks each name up
/// again: the second look is answered from here.
///
/// Bounded by entries, least recently used first out: a daemon that walked every directory of
/// a 100,000-item vault keeps at most `maxEntries` names (with their stats), not all of them.
/// A listing found stale is dropped at once (`evict`), not kept until pushed out.
final class ListingCache: Sendable {
    struct Listing: Sendable {
        let stamp: [Int64]
        let groups: [String]
        let entries: [(name: String, stat: NodeStat)]
        /// Keyed by the name's bytes: NFC and NFD spellings are two names (two items).
        let byName: [[UInt8]: NodeStat]

        init(stamp: [Int64], groups: [String], entries: [(name: String, stat: NodeStat)]) {
            self.stamp = stamp
            self.groups = groups
            self.entries = entries
            self.byName = Dictionary(
                entries.map { (Array($0.name.utf8), $0.stat) }, uniquingKeysWith: { first, _ in first })
        }

        func stat(named name: String) -> NodeStat? { byName[Array(name.utf8)] }

        func isValid(stamp: [Int64], groups: [String]) -> Bool { self.stamp == stamp && self.groups == groups }
    }

    /// Entries kept at most over all listings. An entry (its name, stat and by-name key) costs
    /// about 200 bytes, so this is a few MiB; it holds the largest directory the benchmark
    /// lists (10,000) with room for the directories around it. A listing larger than this is
    /// made for its request and not kept.
    static let defaultMaxEntries = 32_768

    let maxEntries: Int

    private struct Kept {
        var listing: Listing
        var lastUse: UInt64
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

    /// Drops a directory's listing (found stale: the vault changed since it was made).
    func evict(_ directory: UInt64) { state.withLock { $0.remove(directory) } }

    /// Listings and entries kept now.
    var size: (listings: Int, entries: Int) { state.withLock { ($0.kept.count, $0.entries) } }
}
