import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import KeychainCrypto
import SystemPackage
import Synchronization

/// One change a handle made to its view of a file, kept until it is committed: a commit
/// replays them onto the item as it is then, so two handles writing different ranges both
/// land (as on ext4), and appends go to the end of what is stored at commit time.
enum FileEdit: Sendable {
    case write(offset: Int, bytes: [UInt8])
    case append([UInt8])
    case truncate(Int)

    func apply(to content: inout [UInt8]) {
        switch self {
        case .write(let offset, let bytes): bytes.withUnsafeBytes { FileBytes.write($0, into: &content, at: offset) }
        case .append(let bytes): content += bytes
        case .truncate(let size): FileBytes.resize(&content, to: size)
        }
    }
}

/// An open file handle: what it is open on, who opened it (the access decision taken at open
/// is bound to the handle: RELEASE carries no caller), and what it sees.
///
/// An item handle sees a **snapshot**: the item's content decrypted once at open, plus its own
/// edits. Readers therefore see one committed state whole (never a pending create, never a
/// torn mix of two commits), and an fd keeps reading its data after the item is unlinked or
/// replaced, as on ext4. Before each read the item's class key is checked again, so a lock
/// stops open handles as it stops new opens.
///
/// The life of an item handle's edits, stated once:
///
///     clean ──write / ftruncate / open with O_TRUNC──► dirty (edits recorded, view updated)
///     dirty ──commit (flush = every close(2), fsync; release if neither came)──► clean:
///         the edits are replayed onto the stored content in one SecItemUpdate, and the
///         view becomes what was stored. Edits that land during a commit stay for the next.
///     any ──write past 1 MiB──► refused (EFBIG): the edits are dropped, and every later
///         commit fails with EFBIG after putting back what the item held at open, if this
///         handle had committed something since: the stored secret ends as it was
///
/// Nothing is committed after the reply that acknowledged it: close(2) returns after the
/// FLUSH that committed the bytes.
final class OpenFile: Sendable {
    enum Target: Sendable {
        /// An item (an identity is `.item(.identity, certificateID)`, read-only).
        case item(ItemClass, Int64)
        /// An editor scratch file or a pending certificate, in daemon memory.
        case memory(MemoryFile)
        /// A file of /views: the bytes generated at open, read-only.
        case generated([UInt8])
        /// `/views/changes`: the change feed read from the open's cursor on (ChangesView.swift).
        case changes(ChangeFeed)
    }

    struct State {
        var target: Target
        /// Item handles opened read-only: the content decrypted at open, in guarded memory
        /// (GuardedBytes); reads serve it, and `original`, `snapshot` and `view` stay empty.
        /// Let go (wiped) at release or revocation.
        var guarded: GuardedBytes?
        /// Item handles: the content when opened: what a refused handle puts back.
        var original: [UInt8] = []
        /// Item handles: the content as of open (or this handle's last commit).
        var snapshot: [UInt8] = []
        /// Item handles: the snapshot with this handle's edits applied: what it reads.
        var view: [UInt8] = []
        /// The vault's change stamp (`Keychain.changeStamp`) at which `snapshot` was known to be
        /// the stored content, or nil. A commit that finds the stamp unchanged (nothing committed
        /// anywhere since) replays its edits on the snapshot instead of reading the item back.
        var snapshotStamp: [Int64]?
        var edits: [FileEdit] = []
        /// Bytes held by `edits`; past twice the size limit they collapse into one rewrite.
        var editBytes = 0
        var failed: Errno?
        /// The FUSE lock owners (one per process's file table) that wrote through this handle
        /// since its last commit: a FLUSH from another one (a forked child closing the
        /// descriptor it inherited, or exec closing it) commits nothing of theirs.
        var writers: Set<UInt64> = []
        /// Bumped by every change; a commit clears only the edits it stored.
        var generation = 0
        /// Whether a read through this handle filled the kernel's page cache (an `mmap` of the
        /// file: see `KeychainFileSystem.read`); its release then drops the file's cached pages.
        var pageCacheFilled = false
        /// Item handles: set when the handle was revoked (the rule is `Revocation`'s): its copies
        /// of the secret are wiped, and every later read, write and commit fails with this.
        var revoked: Errno?
        /// Item handles: when (CLOCK_MONOTONIC, ns) the open's decision was last known to hold,
        /// and the vault's change stamp then (nil: not taken yet).
        var decidedAt: UInt64 = 0
        var decidedStamp: [Int64]?
        /// Item handles: a change made through this mount touched the item: decide again at
        /// the next read, whatever the time.
        var mustDecideAgain = false
        /// Item handles opened with O_TRUNC on an item that was empty then (or made by a create
        /// with O_TRUNC): their edits start with a truncation like any other O_TRUNC handle's,
        /// so a commit replays the handle's writes on nothing (one writer's whole value, never
        /// a mix with another's), but that truncation alone commits nothing: on a file that was
        /// empty, ext4's O_TRUNC changed nothing either.
        var deferredTruncation = false
        /// Item handles of a create whose empty item was committed without an fsync: its close
        /// or fsync makes it durable (`Keychain.makeCommitsDurable`) unless a durable commit of
        /// this handle's edits did.
        var owesDurableCreate = false

        /// Revokes the handle: wipes what it holds of the secret. Edits it had not committed are
        /// lost with it, which its next commit reports (close(2) fails with `errno`).
        mutating func revoke(_ errno: Errno) {
            guard revoked == nil else { return }
            revoked = errno
            if dirty && failed == nil { failed = errno }
            dropContent()
        }

        /// Lets go of every copy of the secret the handle holds (revocation, release).
        mutating func dropContent() {
            guarded = nil
            FileBytes.wipe(&view)
            FileBytes.wipe(&snapshot)
            FileBytes.wipe(&original)
            edits = []
            editBytes = 0
        }

        /// A read-only handle's content: copied into guarded memory for as long as the handle
        /// lasts, and the arrays it came through (`content`, and the decrypted `source` it was
        /// made from, which may share its storage) overwritten now.
        mutating func holdReadOnly(_ content: [UInt8], madeFrom source: [UInt8]?) throws {
            guarded = try GuardedBytes(copying: content)
            FileBytes.wipeShared(content)
            if let source { FileBytes.wipeShared(source) }
        }

        var dirty: Bool { !edits.isEmpty && !(deferredTruncation && edits.count == 1) }

        /// Records the truncation an O_TRUNC open makes (`deferredTruncation` when the item was
        /// empty).
        mutating func truncateAtOpen() throws {
            deferredTruncation = view.isEmpty
            try truncateItem(to: 0)
        }

        /// Applies a write to an item handle's view under the size rule.
        mutating func writeItem(_ bytes: UnsafeRawBufferPointer, at offset: Int, append: Bool) throws -> Int {
            if let revoked { throw revoked }
            if let failed { throw failed }
            let start = append ? view.count : offset
            guard start + bytes.count <= Keychain.maxDataSize else {
                // Drop what was buffered: the commit at close must not store a truncated secret.
                refuse(.fileTooLarge)
                throw Errno.fileTooLarge
            }
            FileBytes.write(bytes, into: &view, at: start)
            record(append ? .append(Array(bytes)) : .write(offset: offset, bytes: Array(bytes)), size: bytes.count)
            return bytes.count
        }

        mutating func truncateItem(to size: Int) throws {
            if let revoked { throw revoked }
            if let failed { throw failed }
            FileBytes.resize(&view, to: size)
            record(.truncate(size), size: 0)
        }

        private mutating func record(_ edit: FileEdit, size: Int) {
            edits.append(edit)
            editBytes += size
            if editBytes > 2 * Keychain.maxDataSize {
                // Many small writes: one rewrite of the whole view replays the same.
                edits = [.truncate(0), .write(offset: 0, bytes: view)]
                editBytes = view.count
            }
            generation += 1
        }

        /// Drops the handle's edits. If it already committed some (a shell's `> f` commits the
        /// truncation at its first flush, before writing), its next commit puts back what the
        /// item held when it was opened: an oversized write loses nothing.
        mutating func refuse(_ errno: Errno) {
            failed = errno
            deferredTruncation = false
            edits = snapshot == original ? [] : [.truncate(0), .write(offset: 0, bytes: original)]
            editBytes = original.count
            view = original
        }

        /// What a commit must replay, if anything. A FLUSH (`flushOwner`) commits only the
        /// edits of a process that wrote through the handle, or edits nobody wrote (O_TRUNC,
        /// ftruncate); fsync and release commit whatever is there.
        func pendingCommit(flushOwner: UInt64? = nil) -> (edits: [FileEdit], generation: Int)? {
            guard dirty else { return nil }
            if let flushOwner, !writers.isEmpty, !writers.contains(flushOwner) { return nil }
            return (edits, generation)
        }

        /// After `stored` was committed from the edits of `generation`: those edits are done;
        /// edits made meanwhile stay and are applied to the new snapshot.
        mutating func committed(_ stored: [UInt8], editCount: Int, stamp: [Int64]?) {
            let later = Array(edits.dropFirst(editCount))
            deferredTruncation = false
            owesDurableCreate = false
            snapshot = stored
            snapshotStamp = stamp
            view = stored
            for edit in later { edit.apply(to: &view) }
            edits = later
            if later.isEmpty { writers = [] }
            editBytes = later.reduce(0) {
                switch $1 {
                case .write(_, let b), .append(let b): $0 + b.count
                case .truncate: $0
                }
            }
        }
    }

    let ino: UInt64
    let caller: Caller
    let append: Bool
    /// The protection class of the item when opened: checked before each read.
    let accessibility: Accessibility?
    /// The item's stat when opened: what fstat shows once the item is gone.
    let openedStat: NodeStat?
    let state: Mutex<State>

    init(
        ino: UInt64, target: Target, caller: Caller, append: Bool, accessibility: Accessibility? = nil,
        openedStat: NodeStat? = nil
    ) {
        self.ino = ino
        self.caller = caller
        self.append = append
        self.accessibility = accessibility
        self.openedStat = openedStat
        var initial = State(target: target)
        initial.decidedAt = MonotonicClock.nanoseconds()
        self.state = Mutex(initial)
    }

    /// The target, after following a pending certificate that another handle on the same new
    /// file added meanwhile: this handle then reads and writes the item (its view is what the
    /// file held when it was added), not the old memory file.
    func currentTarget() -> Target {
        state.withLock { s in
            if case .memory(let file) = s.target, let (c, id) = file.state.withLock({ $0.added }) {
                s.target = .item(c, id)
                s.original = file.state.withLock { $0.addedContent }
                s.snapshot = s.original
                s.snapshotStamp = nil
                s.view = s.original
                s.edits = []
            }
            return s.target
        }
    }
}

/// The handle numbers open on one inode. Nearly always one (each `cat`, each open+read+close),
/// which is kept without a set of its own: a set made at every open and freed at its release
/// was an allocation and a hash each way.
struct InodeHandles {
    /// Set whenever any handle is open (a removed `first` is replaced from `others`).
    private(set) var first: UInt64?
    private var others: Set<UInt64> = []

    init(_ handle: UInt64) { first = handle }

    var isEmpty: Bool { first == nil }

    var all: [UInt64] {
        guard let first else { return [] }
        return others.isEmpty ? [first] : [first] + others
    }

    mutating func insert(_ handle: UInt64) {
        if first == nil { first = handle } else if first != handle { others.insert(handle) }
    }

    mutating func remove(_ handle: UInt64) {
        if first == handle { first = others.popFirst() } else { others.remove(handle) }
    }
}

/// The open handles of a mount by handle number.
final class OpenFiles: Sendable {
    private struct State {
        var files: [UInt64: OpenFile] = [:]
        /// Handle numbers by inode: getattr asks about one inode's handles on every call, so it
        /// must not walk every open file of the mount.
        var handlesByInode: [UInt64: InodeHandles] = [:]
        var next: UInt64 = 1

        func open(on ino: UInt64) -> [OpenFile] { (handlesByInode[ino]?.all ?? []).compactMap { files[$0] } }
    }

    private let state = Mutex(State())

    func register(_ file: OpenFile) -> UInt64 {
        state.withLock { s in
            let handle = s.next
            s.next += 1
            s.files[handle] = file
            // Not changed in place through the table's subscript, which costs allocations of its
            // own (the accessor frames): one more handle on the inode is put back whole.
            if var handles = s.handlesByInode.updateValue(InodeHandles(handle), forKey: file.ino) {
                handles.insert(handle)
                s.handlesByInode.updateValue(handles, forKey: file.ino)
            }
            return handle
        }
    }

    func file(_ handle: UInt64) throws -> OpenFile {
        guard let file = state.withLock({ $0.files[handle] }) else { throw Errno.badFileDescriptor }
        return file
    }

    func remove(_ handle: UInt64) -> OpenFile? {
        state.withLock { s in
            guard let file = s.files.removeValue(forKey: handle) else { return nil }
            if var handles = s.handlesByInode.removeValue(forKey: file.ino) {
                handles.remove(handle)
                if !handles.isEmpty { s.handlesByInode.updateValue(handles, forKey: file.ino) }
            }
            return file
        }
    }

    /// The stat of an item that is gone (unlinked, replaced) while handles are still open on
    /// its inode, as those handles see it: fstat of such an fd works, as on ext4. Only handles
    /// opened with the caller's access groups answer (a stat never reveals another group's item).
    func orphanStat(of ino: UInt64, for caller: Caller) -> NodeStat? {
        let open = state.withLock {
            $0.open(on: ino).first { $0.openedStat != nil && $0.caller.accessGroups == caller.accessGroups }
        }
        guard let open, var stat = open.openedStat else { return nil }
        stat.size = open.state.withLock { $0.guarded?.count ?? $0.view.count }
        return stat
    }

    /// Every open item handle (for a lock, which revokes some of them).
    /// The change feeds open on `/views/changes`.
    func changeFeeds() -> [ChangeFeed] {
        state.withLock { Array($0.files.values) }.compactMap {
            if case .changes(let feed) = $0.state.withLock({ $0.target }) { feed } else { nil }
        }
    }

    func itemHandles() -> [OpenFile] {
        let files = state.withLock { Array($0.files.values) }
        return files.filter { if case .item = $0.state.withLock({ $0.target }) { true } else { false } }
    }

    /// Marks the handles open on `ino` (but `except`) to decide again at their next read: a
    /// change through this mount touched the item.
    func mustDecideAgain(on ino: UInt64, except: OpenFile? = nil) {
        for file in state.withLock({ $0.open(on: ino) }) where file !== except {
            file.state.withLock { $0.mustDecideAgain = true }
        }
    }

    /// Whether a handle open on `ino` filled the kernel's page cache (an `mmap` of the file).
    func pageCacheFilled(on ino: UInt64) -> Bool {
        state.withLock { $0.open(on: ino) }.contains { file in file.state.withLock { $0.pageCacheFilled } }
    }

    /// The size of the file as handles with uncommitted edits see it, if any is open on
    /// `ino`: what `stat`/`fstat` report, as on ext4 (the kernel asks without naming the
    /// handle; with several writers, the largest view answers, as the extents would).
    func uncommittedSize(of ino: UInt64) -> Int? {
        let open = state.withLock { $0.open(on: ino) }
        return open.compactMap { file in file.state.withLock { $0.dirty ? $0.view.count : nil } }.max()
    }
}
