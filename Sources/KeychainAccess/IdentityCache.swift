import CPlatform
import FoundationEssentials
import Glibc
import Synchronization

/// The identity of each calling thread, kept for the thread's lifetime so that a request from a
/// known thread costs one system call instead of reading /proc three times (two `stat` files
/// and the `exe` link: ~58 µs of the 212 µs an open+read+close cost the daemon).
///
/// Each entry holds `/proc/<tid>` opened as a directory (O_PATH). Such a descriptor stays
/// bound to the thread it was opened for: once that thread has exited, every lookup under it
/// fails (ENOENT), even after its id was given to a new thread. The one check per request is
/// a `stat` of `exe` under that descriptor, and it answers both questions:
/// - **pid reuse**: the thread (or its process) has exited, and the stat fails. The entry is
///   dropped and the thread id is identified afresh, so a reused id is never mistaken for the
///   process that had it.
/// - **execve**: the stat gives the executable's device, inode and change time, compared with
///   those of the entry (taken *before* the link was read, at identification). A different
///   executable (or the same file renamed, which moves its change time) no longer matches,
///   and the process is identified afresh. Executing the same file again changes nothing an
///   access decision depends on. An execve by another thread of the process ends every other
///   thread (their descriptors then fail), and the thread that called it takes the process's
///   id, whose own descriptor sees the new executable.
/// Before, the entry held a pidfd, polled for exit, and the path `/proc/<pid>/exe` was
/// resolved from the root on each request: two system calls and two more path components.
public final class IdentityCache: Sendable {
    struct ExecutableStamp: Equatable {
        var device: UInt64
        var inode: UInt64
        var changed: Int
        var changedNanoseconds: Int
    }

    struct Entry {
        let process: ProcessIdentity
        /// `/proc/<tid>`, opened O_PATH: bound to the thread it was opened for.
        let threadDirectory: Int32
        let stamp: ExecutableStamp
    }

    private let entries = Mutex<[pid_t: Entry]>([:])
    /// Most threads cached at once (each holds one descriptor); past it, everything is dropped.
    let capacity: Int

    public init(capacity: Int = 512) { self.capacity = capacity }

    deinit { entries.withLock { for e in $0.values { close(e.threadDirectory) } } }

    public var count: Int { entries.withLock { $0.count } }

    /// Why thread `tid`'s process may be running code that is not its executable's (traced, not
    /// dumpable, started with LD_PRELOAD, LD_AUDIT or LD_LIBRARY_PATH: `PeerProcess.taint`), read
    /// now under the thread's held directory (a tracer can attach at any time); nil when none,
    /// and when the thread is not cached (then `process(tid:)` has just failed).
    public func taint(tid: pid_t) -> String? {
        guard let entry = entries.withLock({ $0[tid] }) else { return nil }
        return PeerProcess.taint(in: entry.threadDirectory)
    }

    /// The process of thread `tid`: from the cache while its thread lives and its executable
    /// still matches, else from /proc (and then cached).
    public func process(tid: pid_t) -> ProcessIdentity? {
        guard tid > 0 else { return nil }
        if let entry = entries.withLock({ $0[tid] }) {
            if let stamp = Self.stamp(in: entry.threadDirectory), stamp == entry.stamp { return entry.process }
            drop(tid, entry)
        }
        return identify(tid: tid)
    }

    private func identify(tid: pid_t) -> ProcessIdentity? {
        // The directory first: whatever is read from /proc afterwards is of this thread or of a
        // later one with the same id; in the second case the directory's lookups already fail.
        let directory = ProcPath.of(tid).withUnsafeBufferPointer {
            open($0.baseAddress!, kcfs_o_path | O_DIRECTORY | O_CLOEXEC)
        }
        guard directory >= 0 else { return ProcessIdentity.of(tid: tid) }
        // The executable's stamp before its path: an execve in between leaves a stamp that no
        // longer matches, and the next request identifies the process again.
        let stamp: ExecutableStamp?
        let identified: ProcessIdentity?
        let pidfd = kcfs_pidfd_open(tid, 0)
        if pidfd >= 0 {
            // A pidfd without PIDFD_THREAD is only given for a thread-group leader (EINVAL
            // otherwise, on every kernel): most callers (`cat`, `git`, one-threaded tools).
            // All the rest is read through the directory.
            let inode = Self.pidfdsHaveInodes ? kcfs_fd_inode(pidfd) : 0
            close(pidfd)
            stamp = Self.stamp(in: directory)
            identified = ProcessIdentity.leader(tid, in: directory, pidfsInode: inode)
        } else {
            let group = ProcessIdentity.threadGroup(of: tid)
            stamp = Self.stamp(in: directory)
            identified = group.flatMap { ProcessIdentity.of(tid: tid, group: $0) }
        }
        guard let stamp, let process = identified else {
            close(directory)
            return ProcessIdentity.of(tid: tid)
        }
        // A thread that exited meanwhile is cached anyway: the next request's stat fails and
        // drops it (one system call less for every new process, as each `cat` is).
        // A full table is emptied whole. Nearly all its entries are of processes that made one
        // request and exited (each `cat`); telling them from live ones took a `stat` each, 2 %
        // of a `cat`'s daemon CPU. A live process dropped with them is identified again at its
        // next request, as if new: the same key, one identification more per `capacity` new
        // processes. The descriptors are closed with the table unlocked.
        let entry = Entry(process: process, threadDirectory: directory, stamp: stamp)
        let replaced = entries.withLock { table -> [Entry] in
            var gone: [Entry] = []
            if table.count >= capacity {
                gone += table.values
                table.removeAll()
            }
            if let old = table.updateValue(entry, forKey: tid) { gone.append(old) }
            return gone
        }
        for e in replaced { close(e.threadDirectory) }
        return process
    }

    private func drop(_ tid: pid_t, _ entry: Entry) {
        let removed = entries.withLock { table -> Bool in
            guard let current = table[tid], current.threadDirectory == entry.threadDirectory else { return false }
            table[tid] = nil
            return true
        }
        if removed { close(entry.threadDirectory) }
    }

    /// Whether pidfds live on pidfs here (Linux 6.9+), found once from a pidfd of this process:
    /// the kernel does not change while it runs.
    static let pidfdsHaveInodes: Bool = {
        let fd = kcfs_pidfd_open(getpid(), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return kcfs_is_pidfs(fd) != 0
    }()

    /// Device, inode and change time of the file `exe` points at in a `/proc/<tid>` directory;
    /// nil once that thread has exited.
    static func stamp(in threadDirectory: Int32) -> ExecutableStamp? {
        var st = stat()
        guard fstatat(threadDirectory, "exe", &st, 0) == 0 else { return nil }
        return ExecutableStamp(
            device: UInt64(st.st_dev), inode: UInt64(st.st_ino), changed: st.st_ctim.tv_sec,
            changedNanoseconds: st.st_ctim.tv_nsec)
    }
}

/// `/proc/<pid>` and `/proc/<pid>/<name>` spelled into a C string without Foundation or
/// string interpolation, in one array (every new caller's identification spells one).
enum ProcPath {
    static func of(_ pid: pid_t, _ name: StaticString) -> [CChar] {
        var path = directory(pid, room: 1 + name.utf8CodeUnitCount)
        path.append(CChar(bitPattern: UInt8(ascii: "/")))
        name.withUTF8Buffer { for byte in $0 { path.append(CChar(bitPattern: byte)) } }
        path.append(0)
        return path
    }

    static func of(_ pid: pid_t) -> [CChar] {
        var path = directory(pid, room: 0)
        path.append(0)
        return path
    }

    /// `/proc/<pid>`, not terminated, with room for `room` more bytes and the NUL.
    private static func directory(_ pid: pid_t, room: Int) -> [CChar] {
        var path: [CChar] = []
        path.reserveCapacity(18 + room)
        for byte in "/proc/".utf8 { path.append(CChar(bitPattern: byte)) }
        if pid < 0 { path.append(CChar(bitPattern: UInt8(ascii: "-"))) }
        let start = path.count
        var magnitude = pid.magnitude
        repeat {
            path.append(CChar(bitPattern: UInt8(ascii: "0") + UInt8(magnitude % 10)))
            magnitude /= 10
        } while magnitude > 0
        path[start...].reverse()
        return path
    }
}
