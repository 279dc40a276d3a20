import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import SystemPackage
import Synchronization

/// A file whose bytes live in daemon memory, never in the vault:
/// - an editor's scratch file (`.f.swp`, `f~`, docs/paths.md lists the patterns), which stays
///   in memory for its whole life;
/// - a certificate being written through the mount (a *pending certificate*): a certificate
///   cannot exist empty, so it becomes an item (SecItemAdd) at the first commit (close, fsync)
///   that has bytes. Every other class is an item from its `creat(2)` on.
///
/// The life of a pending certificate, stated once:
///
///     created ──write/truncate──► created (bytes in memory)
///     created ──commit with bytes──► added(class, id)          SecItemAdd
///     created ──commit refused (not a certificate)──► gone: the name is free again
///     created ──EFBIG──► refused: bytes dropped, every later commit fails, nothing is added
///     created ──unlink──► gone: never becomes an item
///     added: the inode stays an alias of the item, because the kernel may still hold it
///
/// Its entries are given to the kernel with no cache lifetime, so a name that goes (refused,
/// unlinked) is never a ghost.
final class MemoryFile: Sendable {
    enum Kind: Sendable {
        case editorScratch
        /// What the file becomes when added: its class and key attributes from its path.
        case pendingItem(ItemClass, Attributes)
    }

    struct State {
        var parent: UInt64
        var name: String
        var data: [UInt8] = []
        var modified = Date()
        /// Set once a pending item was added: the item it now is, and the bytes it was
        /// added with (what another handle on the file then sees).
        var added: (ItemClass, Int64)?
        var addedContent: [UInt8] = []
    }

    let ino: UInt64
    let kind: Kind
    /// The access group of the process that made it: a vim swap file holds the secret being
    /// edited, so scratch files are visible only to processes in that group.
    let ownerGroup: String
    let state: Mutex<State>

    init(ino: UInt64, kind: Kind, parent: UInt64, name: String, ownerGroup: String) {
        self.ino = ino
        self.kind = kind
        self.ownerGroup = ownerGroup
        self.state = Mutex(State(parent: parent, name: name))
    }

    var isPendingItem: Bool {
        if case .pendingItem = kind { return true }
        return false
    }

    /// Editor scratch files may hold more than an item (an editor's undo file), but not
    /// without bound; a pending item has the keychain's limit.
    var sizeLimit: Int { isPendingItem ? Keychain.maxDataSize : Keychain.maxDataSize * 4 }

    func isVisible(to caller: Caller) -> Bool { caller.canSee(accessGroup: ownerGroup) }

    func stat() -> NodeStat {
        state.withLock {
            NodeStat(
                ino: ino, isDirectory: false, size: $0.data.count, modified: $0.modified, created: $0.modified,
                uncached: true)
        }
    }
}

/// Every memory file of the mount, and the items this daemon added through the mount whose
/// attributes nobody has set since: temp files of `sed -i` and friends. Renamed onto an
/// existing item, such a file gives it its bytes (the target keeps its attributes) instead of
/// replacing it.
final class MemoryFiles: Sendable {
    private struct State {
        var files: [UInt64: MemoryFile] = [:]
        var next: UInt64 = 1
        var freshItems = RecentItems()
        var createdItems = RecentItems()
    }

    private let state = Mutex(State())

    func make(_ kind: MemoryFile.Kind, parent: UInt64, name: String, caller: Caller) -> MemoryFile {
        state.withLock { s in
            let file = MemoryFile(
                ino: Inode.scratch(s.next), kind: kind, parent: parent, name: name,
                ownerGroup: caller.accessGroups.first ?? Caller.defaultAccessGroup)
            s.next += 1
            s.files[file.ino] = file
            return file
        }
    }

    func file(_ ino: UInt64) -> MemoryFile? { state.withLock { $0.files[ino] } }

    /// Runs `body` while `file` is in the table and cannot leave it (unlink waits); nil when it
    /// is gone. Lock order: the table, then a handle, then a memory file.
    func whilePresent<R>(_ file: MemoryFile, _ body: () -> R) -> R? {
        state.withLock { $0.files[file.ino] != nil ? body() : nil }
    }

    /// The memory file (not yet added) named `name` in `parent`, whoever can see it.
    func named(_ name: String, in parent: UInt64) -> MemoryFile? {
        state.withLock { s in
            s.files.values.first { file in
                file.state.withLock { $0.parent == parent && PathCodec.same($0.name, name) && $0.added == nil }
            }
        }
    }

    /// The memory files (not yet added) of a directory.
    func files(in parent: UInt64) -> [MemoryFile] {
        state.withLock { s in
            s.files.values.filter { file in file.state.withLock { $0.parent == parent && $0.added == nil } }
        }
    }

    func remove(_ file: MemoryFile) { _ = state.withLock { $0.files.removeValue(forKey: file.ino) } }

    /// Moves a scratch file to another name, replacing a scratch file already there.
    func move(_ file: MemoryFile, to parent: UInt64, name: String) {
        state.withLock { s in
            if let old = s.files.values.first(where: { other in
                other !== file && other.state.withLock { $0.parent == parent && PathCodec.same($0.name, name) }
            }) {
                s.files.removeValue(forKey: old.ino)
            }
            file.state.withLock {
                $0.parent = parent
                $0.name = name
            }
        }
    }

    func markFresh(_ id: Int64) { state.withLock { $0.freshItems.insert(id) } }
    func isFresh(_ id: Int64) -> Bool { state.withLock { $0.freshItems.contains(id) } }
    func forgetFresh(_ id: Int64) { state.withLock { $0.freshItems.remove(id) } }

    /// Items created through the mount and not renamed since (whatever attributes were set on
    /// them): where rsync's temp files are (XattrNamespaces.swift). Bounded as the fresh ones.
    func markCreated(_ id: Int64) { state.withLock { $0.createdItems.insert(id) } }
    func isCreatedHere(_ id: Int64) -> Bool { state.withLock { $0.createdItems.contains(id) } }
    func forgetCreated(_ id: Int64) { state.withLock { $0.createdItems.remove(id) } }
}

/// A set of item ids remembered up to `capacity`; past it the set starts over (for the fresh
/// items: an old temp file renamed over an item then replaces it instead of giving it its
/// bytes; nothing is lost).
struct RecentItems {
    static let capacity = 65_536
    private var ids: Set<Int64> = []

    mutating func insert(_ id: Int64) {
        if ids.count >= Self.capacity { ids.removeAll() }
        ids.insert(id)
    }
    func contains(_ id: Int64) -> Bool { ids.contains(id) }
    mutating func remove(_ id: Int64) { ids.remove(id) }
}
