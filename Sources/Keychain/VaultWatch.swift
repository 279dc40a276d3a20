import FoundationEssentials
import Glibc

#if canImport(Glibc)
    import Glibc
#endif

/// Tells when a vault file may have a new commit, whoever made it: inotify on the vault's
/// directory for writes to the vault or its write-ahead log (a commit appends to `-wal`; a
/// checkpoint writes the vault; a WAL made anew is created). No polling: the descriptor is
/// readable only after such a write. What changed is read from the vault's change log; a
/// wake-up with nothing new (this process's own commit, a checkpoint) costs one read of it.
public final class VaultWatch: @unchecked Sendable {
    // @unchecked: `fd` is set once; reads of it are the owner's thread's.
    /// The inotify descriptor, for a `poll` beside others.
    public let fd: Int32
    private let names: Set<String>

    public init(vault: String) throws {
        let absolute = vault.hasPrefix("/") ? vault : FileManager.default.currentDirectoryPath + "/" + vault
        let slash = absolute.lastIndex(of: "/")!
        let directory = slash == absolute.startIndex ? "/" : String(absolute[..<slash])
        let base = String(absolute[absolute.index(after: slash)...])
        names = [base, base + "-wal"]
        fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0 else {
            throw KeychainError(.io, "cannot watch \(vault): inotify: \(String(cString: strerror(errno)))")
        }
        // Not IN_CLOSE_WRITE: SQLite opens the vault and its WAL read-write even to read, so
        // every connection's close (the mount's integrity pass, a command's direct open) raised
        // it with no commit behind it, and each cost 200 polls of the change stamp
        // (afterVaultWrite). A commit writes the WAL (IN_MODIFY) before any close.
        let mask = UInt32(IN_MODIFY | IN_CREATE | IN_MOVED_TO)
        guard inotify_add_watch(fd, directory, mask) >= 0 else {
            let e = errno
            close(fd)
            throw KeychainError(.io, "cannot watch \(directory): inotify: \(String(cString: strerror(e)))")
        }
    }

    deinit { close(fd) }

    /// Reads the pending events; true when one was about the vault or its log.
    public func drain() -> Bool {
        var hit = false
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { return hit }
            var at = 0
            while at + 16 <= n {
                let length = buffer.withUnsafeBytes { Int($0.load(fromByteOffset: at + 12, as: UInt32.self)) }
                let nameBytes = buffer[(at + 16)..<min(n, at + 16 + length)].prefix { $0 != 0 }
                if names.contains(String(decoding: nameBytes, as: UTF8.self)) { hit = true }
                at += 16 + length
            }
        }
    }

    /// Waits (no timeout) until the vault or its log is written, or `other` is readable; true
    /// for the vault, false when `other` woke it.
    public func wait(orReadable other: Int32? = nil) -> Bool {
        while true {
            var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0)]
            if let other { fds.append(pollfd(fd: other, events: Int16(POLLIN), revents: 0)) }
            let n = poll(&fds, nfds_t(fds.count), -1)
            if n < 0 && errno == EINTR { continue }
            if fds.count > 1 && fds[1].revents != 0 { return false }
            if drain() { return true }
        }
    }
}

extension Keychain {
    /// After `VaultWatch` saw the vault's files written: runs `body` (a read of the change log
    /// after what it has handled) once a commit is visible to this process's reads, and once
    /// more 50 ms later. SQLite writes a commit's frames to the WAL (the write inotify reports)
    /// before it publishes the commit in the WAL index (a shared mapping, which raises no
    /// event), so the store's change stamp is read every millisecond, up to 200 ms, until it
    /// moves from `seen`; the second read catches a commit published after another one moved
    /// the stamp (this process's own). Only after a write: nothing runs while the vault is idle.
    public func afterVaultWrite(_ seen: inout [Int64]?, _ body: () -> Void) {
        for _ in 0..<200 {
            let now = try? changeStamp()
            if now != seen {
                seen = now
                break
            }
            usleep(1_000)
        }
        body()
        usleep(50_000)
        seen = (try? changeStamp()) ?? seen
        body()
    }
}
