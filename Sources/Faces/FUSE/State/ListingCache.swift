import Foundation
import Keychain
import KeychainAccess
import Synchronization

/// Directory listings (name → stat) of service/server directories, valid while the vault's
/// change stamp and the caller's access groups are the ones they were made for. Spelling
/// 10,000 names means decrypting 10,000 attribute sets, and `ls -l` then looks each name up
/// again: the second look is answered from here.
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

    /// Listings kept at most; past it the cache starts over (a listing is cheap to make again
    /// compared with the memory of a daemon that walked 100,000 directories).
    static let capacity = 256

    private let listings = Mutex<[UInt64: Listing]>([:])

    func listing(_ directory: UInt64) -> Listing? { listings.withLock { $0[directory] } }

    func store(_ listing: Listing, for directory: UInt64) {
        listings.withLock {
            if $0.count >= Self.capacity { $0.removeAll() }
            $0[directory] = listing
        }
    }
}
