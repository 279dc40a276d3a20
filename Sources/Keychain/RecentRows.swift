import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore
import Synchronization

/// Rows (without their data) and their decrypted attributes as this process read them: what
/// two kinds of read may save.
///
/// - **A second's reuse of the row** (`get`): `Keychain.item(…, withData: false, recentWithin:)`
///   may answer from an entry instead of reading and decrypting the row again. The
///   filesystem's stat and xattr reads use it (an `ls -l`, each `cat`'s fstat, each getxattr),
///   which already show changes made outside the mount only within a second (the kernel's
///   attribute and entry caches); nothing else does. What keeps such an entry true: it was read
///   after this process's commit count was taken, and is used so only while that count is
///   unchanged (any commit of this process, by any face, ends this use of every entry at once)
///   and while younger than the caller's limit (at most a second). The entry itself stays, for
///   the second use.
/// - **The attributes of a row read again** (`attributes(sameAs:metadataKey:)`): a row just read
///   from the store whose sealed attributes, id, class and version are byte for byte those of
///   the entry, under the same metadata key object, has the entry's attributes, with no AEAD
///   open and no decode. Opening is a function of exactly those inputs (they are the box, its
///   associated data and its key), and only boxes that opened are kept, so this answers what
///   opening would, at any age: every open of a file reads its row (the data is needed), and
///   this is most of what that read cost besides SQLite. A new metadata key (a rotation, an
///   unlock after the keys were wiped) is a new object: the entry's weak reference to the old
///   one is then nil or another object, and nothing matches. A query naming one item by its
///   primary key, outside a write transaction (`Keychain.matches`: the mount's lookup of a
///   name), uses and keeps entries the same way, so the open that follows a first lookup does
///   not open the box the lookup opened.
///
/// Visibility, the class and the lock state are still checked on every call
/// (`Keychain.visibleRow`, `Keychain.matches`). Holds no secret: attributes only, at most `capacity`.
final class RecentRows: Sendable {
    /// A weak reference: an entry must not keep a replaced key's guarded memory alive.
    final class KeyReference: @unchecked Sendable {
        weak var key: SecureBytes?
        init(_ key: SecureBytes) { self.key = key }
    }

    struct Entry {
        let row: StoredItem
        let attributes: Attributes
        let readAt: UInt64
        let commits: Int64
        let metadataKey: KeyReference
    }

    /// The oldest an entry is ever used, whatever a caller asks.
    static let longestLifetime: Double = 1.0
    let capacity: Int
    private let entries = Mutex<[Int64: Entry]>([:])

    init(capacity: Int = 4096) { self.capacity = capacity }

    /// The entry for `id`, if it is still good for a store whose commit count is `commits` and
    /// younger than `seconds`. An entry too old or from before a commit stays: the row read
    /// instead may well be the same box, whose attributes it then gives (`attributes(sameAs:)`).
    func get(_ id: Int64, commits: Int64, within seconds: Double) -> (StoredItem, Attributes)? {
        let now = MonotonicClock.coarseNanoseconds()
        let limit = UInt64(min(seconds, Self.longestLifetime) * 1e9)
        return entries.withLock { table in
            guard let e = table[id], e.commits == commits, now &- e.readAt < limit else { return nil }
            return (e.row, e.attributes)
        }
    }

    /// The attributes of the entry for `row.id`, if the entry was opened from exactly `row`'s
    /// sealed attributes (same id, class and version: the box's associated data) under
    /// `metadataKey`. `row` was just read from the store after the commit count was `commits`:
    /// the entry then counts as read now, as `put` would have made it.
    func attributes(sameAs row: StoredItem, metadataKey: SecureBytes, commits: Int64) -> Attributes? {
        let now = MonotonicClock.coarseNanoseconds()
        return entries.withLock { table in
            guard let e = table[row.id], e.metadataKey.key === metadataKey, e.row.itemClass == row.itemClass,
                e.row.version == row.version, e.row.sealedAttributes == row.sealedAttributes
            else { return nil }
            table[row.id] = Entry(
                row: e.row, attributes: e.attributes, readAt: now, commits: commits, metadataKey: e.metadataKey)
            return e.attributes
        }
    }

    /// Keeps a row read when the commit count was `commits` (taken before the read), with its
    /// attributes as opened under `metadataKey`.
    func put(_ row: StoredItem, _ attributes: Attributes, commits: Int64, metadataKey: SecureBytes) {
        var row = row
        row.sealedData = []  // never needed from here: a read with data goes to the store
        let entry = Entry(
            row: row, attributes: attributes, readAt: MonotonicClock.coarseNanoseconds(), commits: commits,
            metadataKey: KeyReference(metadataKey))
        entries.withLock { table in
            if table.count >= capacity { table.removeAll(keepingCapacity: true) }
            table[row.id] = entry
        }
    }
}
