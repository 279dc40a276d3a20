import Foundation
import KeychainStore
import Synchronization

/// Rows (without their data) and their decrypted attributes as this process read them a moment
/// ago (at most a second): what `Keychain.item(…, withData: false, recentWithin:)` may answer from
/// instead of reading and decrypting the row again. The filesystem's stat and xattr reads use
/// it (an `ls -l`, each `cat`'s fstat, each getxattr), which already show changes made outside
/// the mount only within a second (the kernel's attribute and entry caches); nothing else does.
///
/// What keeps an entry true: it was read after this process's commit count was taken, and is
/// used only while that count is unchanged (any commit of this process, by any face, drops
/// every entry at once) and while younger than the caller's limit (at most a second). Visibility, the class and the lock state
/// are still checked on every call (`Keychain.visibleRow`): only the store read and the AEAD
/// open of the attributes are saved. Holds no secret: attributes only, at most `capacity`.
final class RecentRows: Sendable {
    struct Entry {
        let row: StoredItem
        let attributes: Attributes
        let readAt: UInt64
        let commits: Int64
    }

    /// The oldest an entry is ever used, whatever a caller asks.
    static let longestLifetime: Double = 1.0
    let capacity: Int
    private let entries = Mutex<[Int64: Entry]>([:])

    init(capacity: Int = 4096) { self.capacity = capacity }

    /// The entry for `id`, if it is still good for a store whose commit count is `commits` and
    /// younger than `seconds`.
    func get(_ id: Int64, commits: Int64, within seconds: Double) -> (StoredItem, Attributes)? {
        let now = MonotonicClock.coarseNanoseconds()
        let limit = UInt64(min(seconds, Self.longestLifetime) * 1e9)
        return entries.withLock { table in
            guard let e = table[id] else { return nil }
            guard e.commits == commits, now &- e.readAt < limit else {
                table[id] = nil
                return nil
            }
            return (e.row, e.attributes)
        }
    }

    /// Keeps a row read when the commit count was `commits` (taken before the read).
    func put(_ row: StoredItem, _ attributes: Attributes, commits: Int64) {
        var row = row
        row.sealedData = []  // never needed from here: a read with data goes to the store
        let entry = Entry(
            row: row, attributes: attributes, readAt: MonotonicClock.coarseNanoseconds(), commits: commits)
        entries.withLock { table in
            if table.count >= capacity { table.removeAll(keepingCapacity: true) }
            table[row.id] = entry
        }
    }
}
