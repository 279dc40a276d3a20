import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import Synchronization
import SystemPackage

/// `/views/changes` (issue 30, point 4): the vault's item changes as a pollable file, the feed
/// `keychainfs watch` prints, one `SEQ OP CLASS PATH` line per change (` (was OLD)` after a
/// rename). Each open starts at the change log's end: a read returns the lines of the changes
/// committed since the open's cursor (and moves it), or nothing (0 bytes) when there are none;
/// `poll(2)` and `select(2)` wake on the next change (FUSE's poll notification). Only changes
/// to items of the opener's access groups are shown; never a secret. A reader that fell more
/// than the log's retention behind reads one `overflow` line and goes on from the log's end, as
/// an inotify watcher gets IN_Q_OVERFLOW.
struct ChangesFile: ViewFile {
    var name: String { "changes" }
    var ino: UInt64 { Inode.viewFile(1) }

    /// A stream has no size: a stat shows 0.
    func content(in fs: KeychainFileSystem, caller: Caller, opening: Bool) -> [UInt8] { [] }

    func open(flags: Int32, in fs: KeychainFileSystem, caller: Caller) throws -> OpenFile {
        try Self.refuseWriting(flags)
        let cursor = try fs.session(caller).lastChange()
        return OpenFile(
            ino: ino, target: .changes(ChangeFeed(caller: caller, cursor: cursor)), caller: caller, append: false)
    }
}

/// One open of `/views/changes`: its cursor, the lines read from the log but not yet handed
/// out (a read smaller than a line), and the poll waiting for the next change.
final class ChangeFeed: Sendable {
    let caller: Caller
    private struct State {
        var cursor: Int64
        var pending: [UInt8] = []
        /// Tells the kernel a poll on this handle may be ready (the FUSE poll handle's
        /// notification): called once, at the next commit or at release.
        var waiter: (@Sendable (_ notify: Bool) -> Void)?
    }
    private let state: Mutex<State>

    init(caller: Caller, cursor: Int64) {
        self.caller = caller
        state = Mutex(State(cursor: cursor))
    }

    /// Up to `size` bytes of whole or partial lines after the cursor.
    func read(_ size: Int, through session: KeychainSession) throws -> [UInt8] {
        try state.withLock { s in
            while s.pending.count < size {
                let read: (changes: [LoggedChange], through: Int64)
                do {
                    read = try session.changes(after: s.cursor)
                } catch let e as KeychainError where e.status == .dataNotAvailable {
                    let end = try session.lastChange()
                    s.pending += Array(
                        "overflow: the changes after \(s.cursor) are no longer kept; from \(end) on\n".utf8)
                    s.cursor = end
                    continue
                }
                for change in read.changes { s.pending += Self.line(change) }
                let moved = read.through != s.cursor
                s.cursor = read.through
                if !moved { break }
            }
            let out = Array(s.pending.prefix(size))
            s.pending.removeFirst(out.count)
            return out
        }
    }

    /// Whether a read would return something now.
    func ready(through session: KeychainSession) -> Bool {
        let (pending, cursor) = state.withLock { ($0.pending.isEmpty, $0.cursor) }
        guard pending else { return true }
        return ((try? session.lastChange()) ?? cursor) != cursor
    }

    /// Keeps the notification of a poll that found nothing (the previous one is let go).
    func wait(_ waiter: @escaping @Sendable (_ notify: Bool) -> Void) {
        let old = state.withLock { s in
            defer { s.waiter = waiter }
            return s.waiter
        }
        old?(false)
    }

    /// A change committed: the poll waiting on this feed is told.
    func wake() {
        state.withLock { s in
            defer { s.waiter = nil }; return s.waiter
        }?(true)
    }

    /// Released: the waiting poll is let go without a notification.
    func close() {
        state.withLock { s in
            defer { s.waiter = nil }; return s.waiter
        }?(false)
    }

    static func line(_ change: LoggedChange) -> [UInt8] {
        let (path, oldPath) = ChangePaths.paths(of: change)
        let line = ChangePaths.line(
            seq: change.seq, kind: change.kind, itemClass: change.itemClass, path: path, oldPath: oldPath)
        return Array((line + "\n").utf8)
    }
}

extension KeychainFileSystem {
    /// The change feed a handle reads, when it is an open of `/views/changes`.
    func changeFeed(handle: UInt64) -> ChangeFeed? {
        guard let file = try? openFiles.file(handle), case .changes(let feed) = file.currentTarget() else { return nil }
        return feed
    }
}
