import Keychain
import Synchronization

/// Inodes the kernel holds that now stand for another item. When `sed -i`'s temp file is
/// renamed over an item, the item keeps its id (and attributes) and takes the temp's bytes,
/// while the kernel moves the temp's inode to the item's name: that inode must keep working
/// (`cat f` at once), so it becomes an alias of the item. Item ids are never reused, so an
/// alias can never point a new item's inode elsewhere.
final class InodeAliases: Sendable {
    /// Aliases kept at most; past it the table starts over (an evicted alias costs one
    /// ENOENT until the kernel looks the name up again, never a wrong item).
    static let capacity = 65_536

    private let aliases = Mutex<[UInt64: (ItemClass, Int64)]>([:])

    /// `ino` (the item `replaced`, which is gone) now stands for item `id`; so does every inode
    /// that stood for `replaced` (a temp renamed over an item whose own inode was an alias).
    func alias(_ ino: UInt64, replacing replaced: Int64, to itemClass: ItemClass, id: Int64) {
        aliases.withLock { table in
            if table.count >= Self.capacity { table.removeAll() }
            for (other, target) in table where target.0 == itemClass && target.1 == replaced {
                table[other] = (itemClass, id)
            }
            table[ino] = (itemClass, id)
        }
    }

    func target(of ino: UInt64) -> (ItemClass, Int64)? { aliases.withLock { $0[ino] } }
}
