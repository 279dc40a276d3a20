import Dispatch
import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore
import Synchronization

/// The highest commit counter this device has seen for one vault: one file per vault id in
/// `rollback/` beside the device key (directory 0700, file 0600), holding the counter as 20
/// decimal digits and a newline. Raised after every commit and at every unlock; a vault whose
/// authenticated counter is lower has been rolled back to an older copy of itself.
///
/// The file is rewritten in place with one fixed-size `pwrite` under `flock`, so concurrent
/// writers (a daemon and a CLI) never lose a raise to a torn file, and a mark is only ever
/// raised after the commit that reached it is durable: the mark never runs ahead of the vault,
/// so it cannot refuse an honest vault.
///
/// Durability (docs/security.md, "Rollback"): a mark that a power loss empties would switch the
/// protection off, so the file is fsynced, with its directory, when it is created; again at
/// every unlock (`makeDurable`); and about a second after a raise (`scheduleSync`, one pending
/// sync at a time, off the commit's path). The raise itself follows the commit's own fsync, so a
/// durable mark is never ahead of the vault: after a power loss it is at worst a little lower,
/// never gone.
///
/// The file is opened once and the descriptor kept (`held`): opening and closing it for the
/// check before every commit and the raise after it were two path walks per durable write. A
/// file unlinked or replaced meanwhile (its link count is 0) is opened again by path, so the
/// kept descriptor never reads or raises a mark that is no longer the device's.
final class RollbackMark: Sendable {
    let path: String
    /// The kept descriptor (-1: none yet). The mutex also orders this process's threads: a
    /// `flock` is held by the open file, so it does not exclude two threads sharing it.
    private let held = Mutex<Int32>(-1)
    /// Whether a deferred sync is pending (`scheduleSync`).
    private let syncPending = Atomic<Bool>(false)

    init(deviceKeyPath: String, vaultID: [UInt8]) {
        let hex = vaultID.map { AttributeText.hex($0, width: 2) }.joined()
        path = KeychainPaths.parent(of: deviceKeyPath) + "/rollback/" + hex
    }

    deinit {
        held.withLock { fd in if fd >= 0 { close(fd) } }
    }

    private static let recordBytes = 21

    /// The mark, or nil when this device has none for the vault (a vault new to this
    /// machine) or it cannot be read (then nothing is refused: an attacker who can write the
    /// state directory can remove it anyway).
    func read() -> Int64? {
        held.withLock { fd -> Int64? in
            if reopenIfGone(&fd, flags: O_RDWR) {
                flock(fd, LOCK_SH)
                defer { flock(fd, LOCK_UN) }
                return Self.value(fd)
            }
            // Missing, or not writable by this process: read it once, as it is.
            let once = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
            guard once >= 0 else { return nil }
            defer { close(once) }
            flock(once, LOCK_SH)
            return Self.value(once)
        }
    }

    /// Raises the mark to `counter` (never lowers it). Best effort: the commit it follows has
    /// happened whatever this does.
    func raise(to counter: Int64) {
        try? update { current in max(current ?? counter, counter) }
        scheduleSync()
    }

    /// Flushes the mark to disk now (at unlock).
    func makeDurable() {
        held.withLock { fd in
            if fd >= 0 { _ = fdatasync(fd) }
        }
    }

    /// Flushes the mark about a second from now, unless a flush is already pending: a burst of
    /// commits costs one fdatasync, and no commit waits for it. On `SerialWorker.deferred`: a
    /// DispatchQueue would wake the daemon every second for good (SerialWorker).
    private func scheduleSync() {
        guard syncPending.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        else { return }
        SerialWorker.deferred.after(seconds: 1) { [weak self] in
            guard let self else { return }
            syncPending.store(false, ordering: .releasing)
            makeDurable()
        }
    }

    /// Sets the mark to `counter`, also lowering it: `--accept-rollback`.
    func reset(to counter: Int64) throws {
        try update { _ in counter }
    }

    /// True when `fd` is an open descriptor of the file at `path` as it is now: the kept one
    /// when its file still has a name, else the file opened again (false: it cannot be).
    private func reopenIfGone(_ fd: inout Int32, flags: Int32, mode: mode_t = 0) -> Bool {
        if fd >= 0 {
            var s = stat()
            if fstat(fd, &s) == 0 && s.st_nlink > 0 { return true }
            close(fd)
            fd = -1
        }
        fd = open(path, flags | O_CLOEXEC | O_NOFOLLOW, mode)
        return fd >= 0
    }

    private func update(_ next: (Int64?) -> Int64) throws {
        try held.withLock { fd in
            // Every commit raises the mark: the directory is made only when the open says it is
            // missing (a stat per commit, and Foundation's formatting below, were 2% of a write).
            var madeDirectory = false
            if !reopenIfGone(&fd, flags: O_RDWR | O_CREAT, mode: 0o600) && errno == ENOENT {
                try FileManager.default.createDirectory(
                    atPath: KeychainPaths.parent(of: path), withIntermediateDirectories: true,
                    attributes: [.posixPermissions: 0o700])
                madeDirectory = true
                _ = reopenIfGone(&fd, flags: O_RDWR | O_CREAT, mode: 0o600)
            }
            guard fd >= 0 else {
                throw KeychainError(.io, "cannot open the rollback mark \(path): \(String(cString: strerror(errno)))")
            }
            flock(fd, LOCK_EX)
            defer { flock(fd, LOCK_UN) }
            let current = Self.value(fd)
            let value = next(current)
            if value == current { return }
            let record = Self.record(value)
            guard pwrite(fd, record, record.count, 0) == record.count else {
                throw KeychainError(.io, "cannot write the rollback mark \(path): \(String(cString: strerror(errno)))")
            }
            // A new mark (it held no value): durable at once, its name too, so a power loss
            // cannot leave an empty file, which reads as no mark at all.
            if current == nil {
                _ = fsync(fd)
                Self.syncDirectory(KeychainPaths.parent(of: path))
                if madeDirectory { Self.syncDirectory(KeychainPaths.parent(of: KeychainPaths.parent(of: path))) }
            }
        }
    }

    private static func syncDirectory(_ path: String) {
        let dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dir >= 0 else { return }
        _ = fsync(dir)
        close(dir)
    }

    /// The counter as 20 decimal digits (zero-padded; counters are never negative) and a newline.
    static func record(_ value: Int64) -> [UInt8] {
        var digits = [UInt8](repeating: UInt8(ascii: "0"), count: recordBytes)
        digits[recordBytes - 1] = UInt8(ascii: "\n")
        var v = UInt64(max(0, value))
        var i = recordBytes - 2
        while v > 0 && i >= 0 {
            digits[i] = UInt8(ascii: "0") + UInt8(v % 10)
            v /= 10
            i -= 1
        }
        return digits
    }

    private static func value(_ fd: Int32) -> Int64? {
        var buffer = [UInt8](repeating: 0, count: recordBytes)
        guard pread(fd, &buffer, recordBytes, 0) == recordBytes, buffer.last == 10 else { return nil }
        return Int64(String(decoding: buffer.dropLast(), as: UTF8.self))
    }
}
