import FoundationEssentials
import Glibc
import Synchronization

/// A process as seen in /proc: its thread-group id, its executable, and what tells it from
/// every other process that had or will have its pid: its start time (read before and after
/// the executable, so a pid reused in between is noticed), or, for a process identified
/// through its own pidfd and /proc directory, its pidfd's pidfs inode (`IdentityCache`).
public struct ProcessIdentity: Sendable {
    public let pid: pid_t
    public let executable: String?
    /// Clock ticks after boot (field 22 of /proc/<pid>/stat); nil when the process was told
    /// apart by its pidfs inode instead.
    public let startTime: UInt64?
    /// Spelled once, when the process is identified: every request of a cached caller hands
    /// them on (the audit line, presence grants), and interpolating them each time was a
    /// measurable part of an open.
    public let description: String
    /// `<pid>:<start time>` or `<pid>:pidfs-<inode>`: unique among all processes since boot.
    public let key: String

    init(pid: pid_t, executable: String?, startTime: UInt64) {
        self.init(pid: pid, executable: executable, startTime: startTime, distinctPart: "\(startTime)")
    }

    init(pid: pid_t, executable: String?, pidfsInode: UInt64) {
        self.init(pid: pid, executable: executable, startTime: nil, distinctPart: "pidfs-\(pidfsInode)")
    }

    private init(pid: pid_t, executable: String?, startTime: UInt64?, distinctPart: String) {
        self.pid = pid
        self.executable = executable
        self.startTime = startTime
        // The executable's path is the caller's to choose, and may hold a line break: spelled
        // out, so that it can neither end the audit line it goes into nor forge the next one.
        self.description =
            "pid \(pid) "
            + (executable.map { String(decoding: Log.printable($0, escapingBackslash: true), as: UTF8.self) } ?? "?")
        self.key = "\(pid):\(distinctPart)"
    }

    /// Thread → process, cached: /proc/<tid>/status is the slowest file to read (the kernel
    /// gathers memory statistics for it). An entry is trusted only while the thread's own
    /// start time is unchanged, so a reused thread id is looked up afresh.
    private static let threadCache = ThreadCache()

    final class ThreadCache: Sendable {
        private let entries = Mutex<[pid_t: (start: UInt64, tgid: pid_t)]>([:])
        func get(_ tid: pid_t) -> (start: UInt64, tgid: pid_t)? { entries.withLock { $0[tid] } }
        func set(_ tid: pid_t, _ value: (start: UInt64, tgid: pid_t)) {
            entries.withLock {
                if $0.count > 4096 { $0.removeAll() }
                $0[tid] = value
            }
        }
    }

    /// The thread group of `tid`, and the thread's start time (the process's, when the thread
    /// is the process's main thread: then the caller need not read it again). A caller that
    /// knows `tid` leads its process reads it through its directory instead (`leader(_:in:pidfsInode:)`).
    static func threadGroup(of tid: pid_t) -> (pid_t, UInt64)? {
        guard let start = startTime(of: tid) else { return nil }
        if let cached = threadCache.get(tid), cached.start == start { return (cached.tgid, start) }
        guard let tgid = readSmall(ProcPath.of(tid, "status"), { tgid(inStatus: $0) }) else { return nil }
        threadCache.set(tid, (start, tgid))
        return (tgid, start)
    }

    public static func of(tid: pid_t) -> ProcessIdentity? {
        guard tid > 0, let group = threadGroup(of: tid) else { return nil }
        return of(tid: tid, group: group)
    }

    /// The process of `tid`, whose thread group (and the thread's start time) `threadGroup`
    /// gave already.
    static func of(tid: pid_t, group: (pid_t, UInt64)) -> ProcessIdentity? {
        let (tgid, threadStart) = group
        // The executable is read every time (an execve keeps the pid and the start time).
        guard let before = tgid == tid ? threadStart : startTime(of: tgid) else { return nil }
        let exe = readLink(ProcPath.of(tgid, "exe"))
        guard let after = startTime(of: tgid), after == before else { return nil }
        return ProcessIdentity(pid: tgid, executable: exe, startTime: before)
    }

    /// A small /proc file with one read(2), handed to `parse` as bytes: Foundation's
    /// String(contentsOfFile:), and then String splitting, were most of identifying a new
    /// process (each `cat` is one).
    /// `path` is absolute, or relative to the directory `directory` (a held `/proc/<pid>`).
    static func readSmall<T>(
        _ path: [CChar], relativeTo directory: Int32 = AT_FDCWD, _ parse: (UnsafeBufferPointer<UInt8>) -> T?
    ) -> T? {
        let fd = path.withUnsafeBufferPointer { openat(directory, $0.baseAddress!, O_RDONLY | O_CLOEXEC) }
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 4096) { buffer -> T? in
            let n = read(fd, buffer.baseAddress, buffer.count)
            guard n > 0 else { return nil }
            return parse(UnsafeBufferPointer(rebasing: buffer[0..<n]))
        }
    }

    static func startTime(of pid: pid_t) -> UInt64? { readSmall(ProcPath.of(pid, "stat"), startTime(inStat:)) }

    /// The start time of the thread whose `/proc/<tid>` directory `directory` is.
    static func startTime(in directory: Int32) -> UInt64? {
        readSmall(Array("stat".utf8CString), relativeTo: directory, startTime(inStat:))
    }

    /// The process led by the thread whose `/proc/<tid>` directory `directory` is (opened
    /// O_PATH by the caller, who knows the thread leads its process). Everything is read
    /// through that directory, which stays bound to the one process it was opened for: after
    /// that process exits every read fails, even once its id is reused, so no read can mix two
    /// processes and the start time need not be read a second time to notice a reuse.
    /// `pidfsInode`: the inode of a pidfd of the process opened after the directory (nonzero
    /// only on pidfs), which then stands for the start time; /proc/<pid>/stat, the costliest
    /// file of an identification, is not read. If the process the directory names had exited
    /// before that pidfd was opened (a later process with its id), the link read fails and
    /// nothing is returned.
    static func leader(_ pid: pid_t, in directory: Int32, pidfsInode: UInt64) -> ProcessIdentity? {
        let exe = readLink(Array("exe".utf8CString), relativeTo: directory)
        if pidfsInode != 0 {
            guard let exe else { return nil }
            return ProcessIdentity(pid: pid, executable: exe, pidfsInode: pidfsInode)
        }
        guard let start = startTime(in: directory) else { return nil }
        return ProcessIdentity(pid: pid, executable: exe, startTime: start)
    }

    /// Field 22 of /proc/<pid>/stat (starttime): the 20th after the command name, which ends at
    /// the last `)` (the name itself may hold spaces and parentheses).
    static func startTime(inStat bytes: UnsafeBufferPointer<UInt8>) -> UInt64? {
        guard let close = bytes.lastIndex(of: UInt8(ascii: ")")) else { return nil }
        var field = 0
        var i = close + 1
        while i < bytes.count {
            if bytes[i] == UInt8(ascii: " ") {
                field += 1
                i += 1
                if field == 20 { return number(in: bytes, from: i) }
                continue
            }
            i += 1
        }
        return nil
    }

    /// The `Tgid:` line of /proc/<tid>/status.
    static func tgid(inStatus bytes: UnsafeBufferPointer<UInt8>) -> pid_t? {
        let key = Array("\nTgid:".utf8)
        var i = 0
        while i + key.count <= bytes.count {
            if bytes[i] == key[0] && (0..<key.count).allSatisfy({ bytes[i + $0] == key[$0] }) {
                var j = i + key.count
                while j < bytes.count && (bytes[j] == UInt8(ascii: " ") || bytes[j] == UInt8(ascii: "\t")) { j += 1 }
                return number(in: bytes, from: j).flatMap { pid_t(exactly: $0) }
            }
            i += 1
        }
        return nil
    }

    /// The decimal number at `start`, up to the first non-digit; nil if there is none.
    private static func number(in bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> UInt64? {
        var value: UInt64 = 0
        var i = start
        while i < bytes.count, bytes[i] >= UInt8(ascii: "0"), bytes[i] <= UInt8(ascii: "9") {
            let (times, o1) = value.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times.addingReportingOverflow(UInt64(bytes[i] - UInt8(ascii: "0")))
            if o1 || o2 { return nil }
            value = sum
            i += 1
        }
        return i > start ? value : nil
    }

    static func readLink(_ path: String) -> String? { readLink(Array(path.utf8CString)) }

    /// `path` is absolute, or relative to the directory `directory` (a held `/proc/<pid>`).
    static func readLink(_ path: [CChar], relativeTo directory: Int32 = AT_FDCWD) -> String? {
        withUnsafeTemporaryAllocation(of: CChar.self, capacity: 4096) { buffer -> String? in
            let n = path.withUnsafeBufferPointer {
                readlinkat(directory, $0.baseAddress!, buffer.baseAddress!, buffer.count - 1)
            }
            guard n > 0 else { return nil }
            return String(
                decoding: UnsafeRawBufferPointer(rebasing: UnsafeMutableRawBufferPointer(buffer)[0..<n]), as: UTF8.self)
        }
    }

    /// The controlling terminal of a process, for a pinentry prompt on it, or nil.
    public static func terminal(of pid: pid_t) -> String? {
        for fd in 0...2 {
            if let target = readLink("/proc/\(pid)/fd/\(fd)"),
                target.hasPrefix("/dev/pts/") || target.hasPrefix("/dev/tty")
            {
                return target
            }
        }
        return nil
    }

    /// One variable of a process's environment (DISPLAY, WAYLAND_DISPLAY), or nil.
    public static func environment(of pid: pid_t, _ name: String) -> String? {
        guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/environ") else { return nil }
        for entry in data.split(separator: 0) {
            let s = String(decoding: entry, as: UTF8.self)
            if s.hasPrefix(name + "=") { return String(s.dropFirst(name.count + 1)) }
        }
        return nil
    }
}
