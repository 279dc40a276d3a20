import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess

/// Inode numbers. Fixed for the root and the top-level directories; the item id tagged with
/// its class for items, so an item keeps its inode across renames and the daemon keeps no
/// path table; a table (`DirectoryTable`) for service/server directories; a tag of their own
/// for editor scratch and not-yet-added files (`PendingFiles`).
///
///     1                       the root
///     2 ..< 2 + top-level     /genp, /inet, /cert, /keys, /idnt, then any further view
///     1000 …                  service and server directories, in the order first seen
///     class tag << 40 | id    an item (tag 1…5: the class's place in `classes`)
///     6 << 40 | n             a generated file of /views (`ViewFiles.all[n]`)
///     7 << 40 | n             a scratch or pending file
enum Inode {
    static let root: UInt64 = 1
    /// The item classes in their tag order. Never reorder: inode numbers are handed to the
    /// kernel and must mean the same item for the life of a mount.
    static let classes: [ItemClass] = [.genericPassword, .internetPassword, .certificate, .key, .identity]
    static let itemShift: UInt64 = 40
    static let viewFileTag: UInt64 = 6
    static let scratchTag: UInt64 = 7
    static let firstTopLevel: UInt64 = 2
    static let firstDirectory: UInt64 = 1000

    /// The directory of a class at the top level (`/genp` …).
    static func classDirectory(_ c: ItemClass) -> UInt64 { firstTopLevel + UInt64(classes.firstIndex(of: c)!) }

    static func classOf(directory ino: UInt64) -> ItemClass? {
        (firstTopLevel..<(firstTopLevel + UInt64(classes.count))).contains(ino)
            ? classes[Int(ino - firstTopLevel)] : nil
    }

    static func item(_ c: ItemClass, id: Int64) -> UInt64 {
        (UInt64(classes.firstIndex(of: c)! + 1) << itemShift) | UInt64(id)
    }

    static func decodeItem(_ ino: UInt64) -> (ItemClass, Int64)? {
        let tag = ino >> itemShift
        guard tag >= 1 && tag <= UInt64(classes.count) else { return nil }
        return (classes[Int(tag - 1)], Int64(ino & ((1 << itemShift) - 1)))
    }

    static func viewFile(_ n: UInt64) -> UInt64 { (viewFileTag << itemShift) | n }
    static func scratch(_ n: UInt64) -> UInt64 { (scratchTag << itemShift) | n }
    static func isScratch(_ ino: UInt64) -> Bool { ino >> itemShift == scratchTag }
}
