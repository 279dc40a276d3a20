import Foundation
import Synchronization

/// A process as seen in /proc: its thread-group id, executable and start time. The start
/// time is read before and after the executable, so a pid reused in between is noticed.
public struct ProcessIdentity: Sendable {
    public let pid: pid_t
    public let executable: String?
    public let startTime: UInt64

    public var description: String { "pid \(pid) \(executable ?? "?")" }
    public var key: String { "\(pid):\(startTime)" }

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
    /// is the process's main thread: then the caller need not read it again).
    static func threadGroup(of tid: pid_t) -> (pid_t, UInt64)? {
        guard let start = startTime(of: tid) else { return nil }
        if let cached = threadCache.get(tid), cached.start == start { return (cached.tgid, start) }
        guard let status = readSmall("/proc/\(tid)/status"),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Tgid:") }),
            let tgid = pid_t(line.dropFirst(5).trimmingCharacters(in: .whitespaces))
        else { return nil }
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
        let exe = readLink("/proc/\(tgid)/exe")
        guard let after = startTime(of: tgid), after == before else { return nil }
        return ProcessIdentity(pid: tgid, executable: exe, startTime: before)
    }

    /// A small /proc file with plain read(2): Foundation's String(contentsOfFile:) cost a
    /// third of the daemon's time per open.
    static func readSmall(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { return nil }
        return String(decoding: buffer[0..<n], as: UTF8.self)
    }

    static func startTime(of pid: pid_t) -> UInt64? {
        guard let stat = readSmall("/proc/\(pid)/stat"), let close = stat.lastIndex(of: ")") else { return nil }
        // Fields after the command name; starttime is field 22 overall, 20th after ")".
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        return fields.count > 19 ? UInt64(fields[19]) : nil
    }

    static func readLink(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink(path, &buffer, buffer.count - 1)
        guard n > 0 else { return nil }
        return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
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
