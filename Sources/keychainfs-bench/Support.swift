import Foundation
import Synchronization

// Timing, statistics, output, CPU pinning, child processes, mounts and cleanup.
// Nothing here knows about keychains or FUSE requests.

// MARK: Time

enum Clock {
    /// CLOCK_MONOTONIC in nanoseconds.
    static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    /// Seconds since `start` (a value of `now()`).
    static func since(_ start: UInt64) -> Double { Double(now() - start) / 1e9 }

    /// Runs `body` and returns its duration in seconds.
    @discardableResult
    static func time(_ body: () throws -> Void) rethrows -> Double {
        let t = now()
        try body()
        return since(t)
    }

    static func sleep(_ seconds: Double) {
        var ts = timespec(tv_sec: Int(seconds), tv_nsec: Int((seconds - Double(Int(seconds))) * 1e9))
        var rem = timespec()
        while nanosleep(&ts, &rem) != 0 && errno == EINTR { ts = rem }
    }
}

/// Latency samples in seconds.
struct Samples {
    private(set) var values: [Double] = []
    private var sorted: [Double]?

    init(_ values: [Double] = []) { self.values = values }

    mutating func add(_ v: Double) { values.append(v); sorted = nil }
    mutating func add(_ other: Samples) { values += other.values; sorted = nil }

    var count: Int { values.count }
    var total: Double { values.reduce(0, +) }
    var mean: Double { values.isEmpty ? .nan : total / Double(values.count) }
    /// Operations per second over the summed sample time.
    var rate: Double { total > 0 ? Double(values.count) / total : .nan }

    func percentile(_ p: Double) -> Double {
        let s = values.sorted()
        guard !s.isEmpty else { return .nan }
        let i = Swift.min(s.count - 1, Swift.max(0, Int((Double(s.count) * p).rounded(.up)) - 1))
        return s[i]
    }
    var p50: Double { percentile(0.50) }
    var p99: Double { percentile(0.99) }
    var max: Double { values.max() ?? .nan }
    var min: Double { values.min() ?? .nan }
}

/// A deterministic generator (SplitMix64), so every run picks the same items.
struct SeededRandom: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

// MARK: Formatting

enum Fmt {
    static func duration(_ s: Double) -> String {
        if s.isNaN { return "n/a" }
        if s < 0 { return "-" + duration(-s) }
        if s < 1e-6 { return String(format: "%.0f ns", s * 1e9) }
        if s < 1e-3 { return String(format: s < 1e-5 ? "%.2f µs" : "%.1f µs", s * 1e6) }
        if s < 1 { return String(format: s < 1e-2 ? "%.2f ms" : "%.1f ms", s * 1e3) }
        return String(format: "%.2f s", s)
    }

    static func rate(_ r: Double) -> String {
        if r.isNaN { return "n/a" }
        return grouped(Int(r.rounded())) + "/s"
    }

    static func grouped(_ n: Int) -> String {
        let digits = String(abs(n))
        var out = ""
        for (i, ch) in digits.enumerated() {
            if i > 0 && (digits.count - i) % 3 == 0 { out.append(",") }
            out.append(ch)
        }
        return (n < 0 ? "-" : "") + out
    }

    static func bytes(_ b: Double) -> String {
        if b.isNaN { return "n/a" }
        if b < 10 * 1024 { return String(format: "%.0f B", b) }
        if b < 10 * 1024 * 1024 { return String(format: "%.1f KiB", b / 1024) }
        return String(format: "%.1f MiB", b / 1024 / 1024)
    }

    /// A cost ratio (keychainfs ÷ floor).
    static func ratio(_ r: Double) -> String {
        if r.isNaN || r.isInfinite { return "n/a" }
        return r < 10 ? String(format: "%.2f×", r) : (r < 100 ? String(format: "%.1f×", r) : String(format: "%.0f×", r))
    }

    static func seconds(_ s: Double) -> String { String(format: "%.1f s", s) }
}

/// Lines of figures. Written straight to fd 1 so that nothing sits in a buffer when a
/// later step fails (print is fully buffered when stdout is not a terminal).
enum Out {
    static func line(_ text: String = "") {
        let s = text + "\n"
        _ = s.withCString { write(1, $0, strlen($0)) }
    }

    /// Progress notes go to stderr, so stdout holds the figures only.
    static func progress(_ text: String) {
        let s = "keychainfs-bench: " + text + "\n"
        _ = s.withCString { write(2, $0, strlen($0)) }
    }

    /// Prints rows as aligned columns (first column left-aligned, others left-aligned too,
    /// separated by two spaces).
    static func table(_ rows: [[String]], indent: Int = 2) {
        guard let width = rows.map(\.count).max() else { return }
        var widths = [Int](repeating: 0, count: width)
        for row in rows { for (i, cell) in row.enumerated() { widths[i] = Swift.max(widths[i], cell.count) } }
        for row in rows {
            var s = String(repeating: " ", count: indent)
            for (i, cell) in row.enumerated() {
                s += cell
                if i < row.count - 1 { s += String(repeating: " ", count: widths[i] - cell.count + 2) }
            }
            line(s)
        }
    }
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

// MARK: CPU pinning

/// sched_setaffinity / sched_getaffinity are not in Swift's Glibc module (they need
/// _GNU_SOURCE); they are plain libc symbols, reached through dlsym.
enum Affinity {
    private typealias Call = @convention(c) (pid_t, Int, UnsafeMutableRawPointer?) -> Int32

    private static func call(_ name: String) -> Call? {
        guard let sym = dlsym(nil, name) else { return nil }
        return unsafeBitCast(sym, to: Call.self)
    }

    /// Pins the calling process (and every thread and child it creates afterwards) to `cpu`.
    static func pin(cpu: Int) throws {
        guard let set = call("sched_setaffinity") else { throw BenchError("sched_setaffinity not found") }
        var mask = [UInt64](repeating: 0, count: 16)
        mask[cpu / 64] |= 1 << UInt64(cpu % 64)
        let rc = mask.withUnsafeMutableBytes { set(0, $0.count, $0.baseAddress) }
        guard rc == 0 else { throw BenchError("cannot pin to CPU \(cpu): \(String(cString: strerror(errno)))") }
    }

    /// The CPUs the calling thread may run on.
    static func current() -> [Int] {
        guard let get = call("sched_getaffinity") else { return [] }
        var mask = [UInt64](repeating: 0, count: 16)
        guard mask.withUnsafeMutableBytes({ get(0, $0.count, $0.baseAddress) }) == 0 else { return [] }
        return (0..<1024).filter { mask[$0 / 64] & (1 << UInt64($0 % 64)) != 0 }
    }

    /// `Cpus_allowed_list` of another process (to show the daemons are pinned too).
    static func allowedList(pid: pid_t) -> String {
        ProcStatus.field("Cpus_allowed_list", pid: pid) ?? "?"
    }
}

/// The parent-death signal: a daemon child gets SIGTERM (and so unmounts) if the bench
/// process dies without cleaning up. prctl is variadic; called through dlsym with its
/// fixed five-argument form.
enum ParentDeath {
    static func terminateWithParent() {
        typealias Prctl = @convention(c) (Int32, UInt, UInt, UInt, UInt) -> Int32
        guard let sym = dlsym(nil, "prctl") else { return }
        let prctl = unsafeBitCast(sym, to: Prctl.self)
        _ = prctl(1 /* PR_SET_PDEATHSIG */, UInt(SIGTERM), 0, 0, 0)
    }
}

// MARK: /proc

enum ProcStatus {
    static func field(_ name: String, pid: pid_t) -> String? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(name + ":") {
            return line.dropFirst(name.count + 1).trimmingCharacters(in: .whitespaces)
        }
        return nil
    }

    /// A `kB` field of /proc/<pid>/status, in bytes.
    static func kilobytes(_ name: String, pid: pid_t) -> Double {
        guard let v = field(name, pid: pid), let kb = Double(v.split(separator: " ").first ?? "") else { return .nan }
        return kb * 1024
    }
}

enum MountTable {
    static func mountpoints() -> [String] {
        guard let text = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            return fields.count > 4 ? String(fields[4]) : nil
        }
    }

    static func isMounted(_ path: String) -> Bool { mountpoints().contains(path) }

    /// `fusermount3 -u -z`: detaches even a mount whose daemon is dead or hung.
    static func lazyUnmount(_ path: String) {
        if let pid = try? Spawn.start(
            "/usr/bin/fusermount3", ["-u", "-z", path], stdout: "/dev/null", stderr: "/dev/null")
        {
            _ = Spawn.wait(pid)
        }
    }
}

// MARK: Child processes

enum Spawn {
    /// The running executable, so daemon children run this very binary.
    static let selfPath: String = {
        var buf = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &buf, buf.count - 1)
        return n > 0
            ? String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self) : CommandLine.arguments[0]
    }()

    /// posix_spawn with stdout/stderr redirected to files and extra descriptors mapped
    /// (source fd → child fd). stdin is /dev/null. `newSession`: the child starts a session
    /// of its own (setsid), as a daemon users start does (`keychainfs mount` without `-f`
    /// calls setsid). The scheduler groups tasks by session (autogroup): a daemon in its
    /// reader's session is scheduled against that reader differently, and costs a different
    /// CPU per request, than the one users run (docs/benchmarks.md, "How it measures").
    static func start(
        _ path: String, _ args: [String], stdout: String?, stderr: String?,
        fds: [(Int32, Int32)] = [], environment: [String]? = nil, newSession: Bool = false
    ) throws -> pid_t {
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        if newSession { posix_spawnattr_setflags(&attributes, Self.setsidFlag) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        if let stdout { posix_spawn_file_actions_addopen(&actions, 1, stdout, O_WRONLY | O_CREAT | O_APPEND, 0o600) }
        if let stderr { posix_spawn_file_actions_addopen(&actions, 2, stderr, O_WRONLY | O_CREAT | O_APPEND, 0o600) }
        for (source, target) in fds { posix_spawn_file_actions_adddup2(&actions, source, target) }
        let argv = ([path] + args).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let rc: Int32
        if let environment {
            let envp = environment.map { strdup($0) } + [nil]
            defer { envp.forEach { free($0) } }
            rc = posix_spawn(&pid, path, &actions, &attributes, argv, envp)
        } else {
            rc = posix_spawn(&pid, path, &actions, &attributes, argv, environ)
        }
        guard rc == 0 else { throw BenchError("cannot start \(path): \(String(cString: strerror(rc)))") }
        return pid
    }

    /// glibc's POSIX_SPAWN_SETSID (2.26 and later), which spawn.h declares only under
    /// _GNU_SOURCE, so Swift's Glibc module does not have it.
    static let setsidFlag: Int16 = 0x80

    /// Waits for a child; returns its exit status (128+signal if killed).
    @discardableResult
    static func wait(_ pid: pid_t) -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            if errno != EINTR { return -1 }
        }
        if status & 0x7f == 0 { return (status >> 8) & 0xff }
        return 128 + (status & 0x7f)
    }

    /// Waits up to `timeout` seconds; nil if the child is still running.
    static func wait(_ pid: pid_t, timeout: Double) -> Int32? {
        let deadline = Clock.now() + UInt64(timeout * 1e9)
        var status: Int32 = 0
        while true {
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid { return status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f) }
            if r < 0 && errno != EINTR { return -1 }
            if Clock.now() > deadline { return nil }
            Clock.sleep(0.01)
        }
    }

    /// Runs a command to completion with output discarded; returns (status, seconds).
    static func run(_ path: String, _ args: [String], environment: [String]? = nil) throws -> (Int32, Double) {
        let t = Clock.now()
        let pid = try start(path, args, stdout: "/dev/null", stderr: "/dev/null", environment: environment)
        let status = wait(pid)
        return (status, Clock.since(t))
    }
}

// MARK: Cleanup

/// Everything the run creates outside its own memory: daemon children, mountpoints and
/// temp directories. `run()` is idempotent and is called on normal exit, on errors and on
/// SIGINT/SIGTERM/SIGHUP.
final class Cleanup: Sendable {
    static let shared = Cleanup()
    private struct State {
        var children: [pid_t] = []
        var mountpoints: [String] = []
        var directories: [String] = []
    }
    private let state = Mutex(State())
    /// Held for a whole run: a second caller (the main thread failing because the signal
    /// handler's run stopped its daemons) waits for the first to finish before it exits.
    private let running = NSLock()

    func addChild(_ pid: pid_t) { state.withLock { $0.children.append(pid) } }
    func removeChild(_ pid: pid_t) { state.withLock { $0.children.removeAll { $0 == pid } } }
    func addMountpoint(_ path: String) { state.withLock { $0.mountpoints.append(path) } }
    func addDirectory(_ path: String) { state.withLock { $0.directories.append(path) } }

    func run() {
        running.lock()
        defer { running.unlock() }
        let (kids, mounts, dirs) = state.withLock { s -> ([pid_t], [String], [String]) in
            defer {
                s.children = []
                s.mountpoints = []
                s.directories = []
            }
            return (s.children, s.mountpoints, s.directories)
        }
        for pid in kids { kill(pid, SIGTERM) }
        for pid in kids where Spawn.wait(pid, timeout: 10) == nil {
            // A daemon that does not leave on SIGTERM: detach its mount, then kill it.
            for m in mounts where MountTable.isMounted(m) { MountTable.lazyUnmount(m) }
            kill(pid, SIGKILL)
            _ = Spawn.wait(pid, timeout: 5)
        }
        for m in mounts where MountTable.isMounted(m) { MountTable.lazyUnmount(m) }
        for d in dirs {
            // Never recurse into a live mount: it would delete through it.
            if MountTable.mountpoints().contains(where: { $0 == d || $0.hasPrefix(d + "/") }) {
                Out.progress("warning: a mount is still live under \(d); leaving the directory in place")
                continue
            }
            try? FileManager.default.removeItem(atPath: d)
        }
    }

    /// On SIGINT/SIGTERM/SIGHUP: clean up, then exit 130. Handled on a dispatch queue, so
    /// it runs even while the main thread is blocked in a call into a mount.
    func installSignalHandlers() {
        for sig in [SIGINT, SIGTERM, SIGHUP] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            // The handler holds its source: the sources live as long as the process.
            source.setEventHandler { [source] in
                _ = source
                Out.progress("signal \(sig): unmounting and removing temp files")
                Cleanup.shared.run()
                exit(130)
            }
            source.resume()
        }
        signal(SIGPIPE, SIG_IGN)
    }
}

/// A private temp directory under `base`, removed by `Cleanup`.
func makeTempDirectory(base: String, prefix: String) throws -> String {
    var template = Array((base + "/" + prefix + "XXXXXX").utf8CString)
    guard let p = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
        throw BenchError("mkdtemp in \(base): \(String(cString: strerror(errno)))")
    }
    let path = String(cString: p)
    Cleanup.shared.addDirectory(path)
    return path
}

func fileSize(_ path: String) -> Double {
    var st = stat()
    return stat(path, &st) == 0 ? Double(st.st_size) : 0
}

/// The filesystem type of the mount holding a directory, for the header (fsync costs
/// differ wildly between a disk and tmpfs).
func filesystemType(_ path: String) -> String {
    guard let text = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return "?" }
    var best = (length: -1, type: "?")
    for line in text.split(separator: "\n") {
        let fields = line.split(separator: " ").map(String.init)
        guard fields.count > 4, let dash = fields.firstIndex(of: "-"), fields.count > dash + 1 else { continue }
        let mp = fields[4]
        let covers = mp == "/" || path == mp || path.hasPrefix(mp + "/")
        if covers && mp.count > best.length { best = (mp.count, fields[dash + 1]) }
    }
    return best.type
}
