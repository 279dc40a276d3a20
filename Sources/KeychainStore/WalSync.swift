import FoundationEssentials
import Glibc
import Synchronization

/// The vault's WAL file held open for `VaultStore.syncLog`: one `fdatasync` of it makes every
/// commit written to it so far durable, as `synchronous=FULL` would have at each of their
/// commits (the WAL is one file, written in order; a checkpoint syncs it before copying, and
/// starts it over only after the database file is synced). The group commit uses it to commit
/// without holding the write lock through the fsync (Keychain's CommitQueue.swift).
///
/// The descriptor is opened at the first sync and kept. The WAL goes only when the last
/// connection to the vault closes, and this process holds two; a WAL unlinked meanwhile all the
/// same (its link count is 0) is opened again by path. At each open the directory is synced
/// too, once, as SQLite does for a WAL it created, so that the file's name is durable with it.
final class WalSync: Sendable {
    let path: String
    private let held = Mutex<Int32>(-1)

    init(vaultPath: String) { path = vaultPath + "-wal" }

    deinit {
        held.withLock { fd in if fd >= 0 { close(fd) } }
    }

    /// `fdatasync` of the WAL: every frame written to it before the call is durable after it.
    /// Threads that call it together are served one at a time.
    func sync() throws {
        try held.withLock { fd in
            if fd >= 0 {
                var st = stat()
                if fstat(fd, &st) != 0 || st.st_nlink == 0 {
                    close(fd)
                    fd = -1
                }
            }
            if fd < 0 {
                let opened = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
                // No WAL: nothing is in one (the last connection's close checkpointed it,
                // synced the vault file and removed it).
                if opened < 0 && errno == ENOENT { return }
                guard opened >= 0 else { throw Self.failure("open \(path)") }
                let directory = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
                let dirFD = open(directory.isEmpty ? "/" : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                let dirSynced = dirFD >= 0 && fsync(dirFD) == 0
                if dirFD >= 0 { close(dirFD) }
                guard dirSynced else {
                    close(opened)
                    throw Self.failure("fsync of the directory of \(path)")
                }
                fd = opened
            }
            guard fdatasync(fd) == 0 else { throw Self.failure("fdatasync \(path)") }
        }
    }

    private static func failure(_ what: String) -> StoreError {
        let e = errno
        return StoreError.sqlite(code: ioerrFsync, message: "\(what): \(String(cString: strerror(e)))")
    }

    /// SQLITE_IOERR_FSYNC (SQLITE_IOERR | 4 << 8): what SQLite reports for a failed sync.
    private static let ioerrFsync: Int32 = 10 | (4 << 8)
}

extension VaultStore {
    /// Makes every commit written so far durable; outside the write lock, so the next
    /// transaction commits meanwhile.
    public func syncLog() throws { try wal.sync() }
}
