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
    /// CPU time a process has used, in clock ticks (utime + stime of /proc/PID/stat); 0 when gone.
    static func cpuTicks(pid: pid_t) -> Int {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = text.lastIndex(of: ")")
        else { return 0 }
        // After the command's closing parenthesis: state is field 3, utime and stime 14 and 15.
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let user = Int(fields[11]), let system = Int(fields[12]) else { return 0 }
        return user + system
    }

    static func field(_ name: String, pid: pid_t) -> String? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(name + ":") {
            return line.dropFirst(name.count + 1).trimmingCharacters(in: .whitespaces)
        }
        return nil
    }

    /// Context switches (voluntary and not) of each thread of a process, by thread id.
    static func contextSwitches(pid: pid_t) -> [String: Int] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        var out: [String: Int] = [:]
        for tid in tasks {
            guard let text = try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/status", encoding: .utf8) else {
                continue
            }
            for line in text.split(separator: "\n") where line.contains("ctxt_switches:") {
                out[tid, default: 0] +=
                    Int(line.split(separator: ":").last?.trimmingCharacters(in: .whitespaces) ?? "") ?? 0
            }
        }
        return out
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
