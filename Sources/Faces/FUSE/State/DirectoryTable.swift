import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import Synchronization

/// Service and server directories (`/genp/<service>`, `/inet/<server>`): their inode numbers,
/// and the ones made with mkdir that hold no item yet (they live in daemon memory only, as a
/// directory exists in the vault only through its items).
final class DirectoryTable: Sendable {
    private struct State {
        /// Keyed by class and the spelling's bytes (NFC and NFD services are two directories).
        var byKey: [[UInt8]: UInt64] = [:]
        var byInode: [UInt64: (ItemClass, String)] = [:]
        var next = Inode.firstDirectory
        var empty: Set<UInt64> = []
        /// Directories a lookup found holding an item the caller's groups can see, and the
        /// change stamp and groups it was found at (`seen(_:_:stamp:groups:)`).
        var seen: [UInt64: (stamp: [Int64], groups: [String])] = [:]

        static func key(_ c: ItemClass, _ spelling: String) -> [UInt8] {
            Array(c.rawValue.utf8) + [UInt8(ascii: "/")] + Array(spelling.utf8)
        }

        mutating func inode(_ c: ItemClass, _ spelling: String) -> UInt64 {
            let key = Self.key(c, spelling)
            if let ino = byKey[key] { return ino }
            let ino = next
            next += 1
            byKey[key] = ino
            byInode[ino] = (c, spelling)
            return ino
        }
    }

    private let state = Mutex(State())

    /// The inode of a directory, made on first use and stable for the life of the mount.
    func inode(_ c: ItemClass, _ spelling: String) -> UInt64 { state.withLock { $0.inode(c, spelling) } }

    /// The inode of a directory a lookup found holding an item at this change stamp, for the
    /// same access groups: it still holds one (no commit anywhere since, by any process), so a
    /// lookup of it again (a cold `stat`, each name of a path) needs no index probe. Positive
    /// answers only; forgotten at lock (`forgetSeen`), and the caller checks the lock state.
    func seen(_ c: ItemClass, _ spelling: String, stamp: [Int64], groups: [String]) -> UInt64? {
        state.withLock { s in
            guard let ino = s.byKey[State.key(c, spelling)], let seen = s.seen[ino], seen.stamp == stamp,
                seen.groups == groups
            else { return nil }
            return ino
        }
    }

    /// Records that a lookup found `ino` holding an item at `stamp` for `groups` (at most 4,096
    /// kept: past that the record starts again).
    func markSeen(_ ino: UInt64, stamp: [Int64], groups: [String]) {
        state.withLock { s in
            if s.seen.count >= 4_096 { s.seen.removeAll(keepingCapacity: true) }
            s.seen[ino] = (stamp, groups)
        }
    }

    /// Forgets every lookup's finding (the keychain locked).
    func forgetSeen() { state.withLock { $0.seen.removeAll() } }

    /// The class and spelling of a directory inode.
    func directory(_ ino: UInt64) -> (ItemClass, String)? { state.withLock { $0.byInode[ino] } }

    /// The inode of a directory made with mkdir that holds no item yet, if `spelling` is one.
    func emptyDirectory(_ c: ItemClass, _ spelling: String) -> UInt64? {
        state.withLock { s in s.byKey[State.key(c, spelling)].flatMap { s.empty.contains($0) ? $0 : nil } }
    }

    func isEmptyDirectory(_ ino: UInt64) -> Bool { state.withLock { $0.empty.contains(ino) } }

    /// Records a directory made with mkdir; returns its inode.
    @discardableResult
    func markEmpty(_ c: ItemClass, _ spelling: String) -> UInt64 {
        state.withLock { s in
            let ino = s.inode(c, spelling)
            s.empty.insert(ino)
            return ino
        }
    }

    /// A directory that now holds an item, or was removed or renamed.
    func unmarkEmpty(_ ino: UInt64) { _ = state.withLock { $0.empty.remove(ino) } }

    /// A directory renamed. The kernel moves the directory's inode to the new name, so that
    /// inode now is the new directory (its listing right after the rename is the moved items);
    /// the old name gets a new inode if it is ever looked up again. An empty directory stays
    /// one under its new name. A directory the rename replaced (an empty one, made with mkdir
    /// or kept) is gone: its inode no longer names a directory, nor is it listed or looked up.
    func renamed(_ from: UInt64, to c: ItemClass, _ spelling: String, empty: Bool) {
        state.withLock { s in
            let wasEmpty = s.empty.remove(from) != nil
            if let (oldClass, oldSpelling) = s.byInode[from] {
                s.byKey.removeValue(forKey: State.key(oldClass, oldSpelling))
            }
            if let replaced = s.byKey[State.key(c, spelling)], replaced != from {
                s.empty.remove(replaced)
                s.byInode.removeValue(forKey: replaced)
            }
            s.byKey[State.key(c, spelling)] = from
            s.byInode[from] = (c, spelling)
            if empty || wasEmpty { s.empty.insert(from) }
        }
    }

    /// Keeps a directory whose last item went through the mount, as mkdir keeps a new one: a
    /// shell sitting in it keeps a working directory, until rmdir (or unmount).
    func keep(_ ino: UInt64) { _ = state.withLock { $0.empty.insert(ino) } }

    /// The spellings of the empty directories of a class.
    func emptyDirectories(of c: ItemClass) -> [(spelling: String, ino: UInt64)] {
        state.withLock { s in
            s.empty.compactMap { ino in s.byInode[ino].flatMap { $0.0 == c ? (spelling: $0.1, ino: ino) : nil } }
        }
    }
}
