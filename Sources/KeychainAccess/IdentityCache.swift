import CPlatform
import Foundation
import Synchronization

/// The identity of each calling thread, kept for the thread's lifetime so that a request from a
/// known thread costs two system calls instead of reading /proc three times (two `stat` files
/// and the `exe` link: ~58 µs of the 212 µs an open+read+close cost the daemon).
///
/// What makes an entry still true, checked on every use:
/// - **pid reuse**: the entry holds a pidfd of the thread (of the process when the thread leads
///   it). A pidfd names one process, never a later one with the same number, and polls readable
///   once that process (thread) has exited; a readable pidfd drops the entry, and the thread id
///   is identified afresh. So a reused id is never mistaken for the process that had it.
/// - **execve**: keeps the pid, the pidfd and the start time, so the entry also holds the
///   executable's device, inode and change time, from one `stat` of `/proc/<pid>/exe` taken
///   *before* the link was read. A different executable (or the same file renamed, which moves
///   its change time) no longer matches, and the process is identified afresh. Executing the
///   same file again changes nothing an access decision depends on.
/// Without pidfds (Linux before 5.3, or a thread that is not its process's leader before 6.9),
/// nothing is cached and every request identifies its caller from /proc as before.
public final class IdentityCache: Sendable {
    struct ExecutableStamp: Equatable {
        var device: UInt64
        var inode: UInt64
        var changed: Int
        var changedNanoseconds: Int
    }

    struct Entry {
        let process: ProcessIdentity
        let pidfd: Int32
        let stamp: ExecutableStamp
    }

    private let entries = Mutex<[pid_t: Entry]>([:])
    /// Most threads cached at once (each holds one pidfd); past it, exited ones are swept and
    /// then, if still full, everything is dropped.
    let capacity: Int

    public init(capacity: Int = 512) { self.capacity = capacity }

    deinit { entries.withLock { for e in $0.values { close(e.pidfd) } } }

    public var count: Int { entries.withLock { $0.count } }

    /// The process of thread `tid`: from the cache while its pidfd and executable still match,
    /// else from /proc (and then cached).
    public func process(tid: pid_t) -> ProcessIdentity? {
        guard tid > 0 else { return nil }
        if let entry = entries.withLock({ $0[tid] }) {
            if !Self.hasExited(entry.pidfd), let stamp = Self.stamp(of: entry.process.pid), stamp == entry.stamp {
                return entry.process
            }
            drop(tid, entry)
        }
        return identify(tid: tid)
    }

    private func identify(tid: pid_t) -> ProcessIdentity? {
        // The pidfd first: whatever is read from /proc afterwards is of this process or of a
        // later one with the same id; in the second case the pidfd is already readable.
        let (pidfd, isLeader) = Self.openPidfd(tid)
        // The executable's stamp before its path: an execve in between leaves a stamp that no
        // longer matches, and the next request identifies the process again.
        guard let group = ProcessIdentity.threadGroup(of: tid, isLeader: isLeader), let stamp = Self.stamp(of: group.0),
            let process = ProcessIdentity.of(tid: tid, group: group)
        else {
            if pidfd >= 0 { close(pidfd) }
            return ProcessIdentity.of(tid: tid)
        }
        // A pidfd whose process exited meanwhile is cached anyway: the next request polls it
        // and drops it (one system call less for every new process, as each `cat` is).
        guard pidfd >= 0 else { return process }
        let entry = Entry(process: process, pidfd: pidfd, stamp: stamp)
        let replaced = entries.withLock { table -> [Entry] in
            var gone: [Entry] = []
            if table.count >= capacity {
                for (id, e) in table where Self.hasExited(e.pidfd) {
                    gone.append(e)
                    table[id] = nil
                }
                if table.count >= capacity {
                    gone += table.values
                    table.removeAll()
                }
            }
            if let old = table.updateValue(entry, forKey: tid) { gone.append(old) }
            return gone
        }
        for e in replaced { close(e.pidfd) }
        return process
    }

    private func drop(_ tid: pid_t, _ entry: Entry) {
        let removed = entries.withLock { table -> Bool in
            guard let current = table[tid], current.pidfd == entry.pidfd else { return false }
            table[tid] = nil
            return true
        }
        if removed { close(entry.pidfd) }
    }

    /// A pidfd of the thread, and whether the thread leads its process (tid == pid). Without
    /// PIDFD_THREAD a pidfd is only given for a thread-group leader (EINVAL otherwise, on every
    /// kernel), so that open answers both at once: most callers (`cat`, `git`, one-threaded
    /// tools) are leaders, and their /proc/<tid>/status need not be read. Other threads: with
    /// PIDFD_THREAD (Linux 6.9), else none (-1).
    static func openPidfd(_ tid: pid_t) -> (fd: Int32, isLeader: Bool) {
        let fd = kcfs_pidfd_open(tid, 0)
        if fd >= 0 { return (fd, true) }
        return (kcfs_pidfd_open(tid, kcfs_pidfd_thread), false)
    }

    /// Whether the pidfd's process (thread) has exited: then its id may be someone else's now.
    static func hasExited(_ pidfd: Int32) -> Bool {
        var p = pollfd(fd: pidfd, events: Int16(POLLIN), revents: 0)
        return poll(&p, 1, 0) != 0
    }

    /// Device, inode and change time of the file `/proc/<pid>/exe` points at.
    static func stamp(of pid: pid_t) -> ExecutableStamp? {
        var st = stat()
        let ok = ProcPath.exe(pid).withUnsafeBufferPointer { stat($0.baseAddress!, &st) == 0 }
        guard ok else { return nil }
        return ExecutableStamp(
            device: UInt64(st.st_dev), inode: UInt64(st.st_ino), changed: st.st_ctim.tv_sec,
            changedNanoseconds: st.st_ctim.tv_nsec)
    }
}

/// `/proc/<pid>/<name>` spelled into a C string without Foundation or string interpolation.
enum ProcPath {
    static func of(_ pid: pid_t, _ name: StaticString) -> [CChar] {
        var out: [CChar] = []
        out.reserveCapacity(32)
        for byte in "/proc/".utf8 { out.append(CChar(bitPattern: byte)) }
        var digits: [CChar] = []
        var n = Int(pid)
        repeat {
            digits.append(CChar(48 + n % 10))
            n /= 10
        } while n > 0
        out += digits.reversed()
        out.append(CChar(bitPattern: UInt8(ascii: "/")))
        name.withUTF8Buffer { for byte in $0 { out.append(CChar(bitPattern: byte)) } }
        out.append(0)
        return out
    }

    static func exe(_ pid: pid_t) -> [CChar] { of(pid, "exe") }
}
