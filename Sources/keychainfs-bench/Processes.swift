import Foundation
import Synchronization

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
        _ path: String, _ args: [String], stdin: String = "/dev/null", stdout: String?, stderr: String?,
        fds: [(Int32, Int32)] = [], environment: [String]? = nil, newSession: Bool = false
    ) throws -> pid_t {
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        if newSession { posix_spawnattr_setflags(&attributes, Self.setsidFlag) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, stdin, O_RDONLY, 0)
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

    /// Runs a command to completion, stdin from a file, output discarded; returns its status.
    static func run(_ path: String, _ args: [String], stdin: String, environment: [String]) throws -> Int32 {
        wait(try start(path, args, stdin: stdin, stdout: "/dev/null", stderr: "/dev/null", environment: environment))
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
        /// Stops of servers that are not children (a PostgreSQL cluster run by `pg_ctl`).
        var stops: [@Sendable () -> Void] = []
    }
    private let state = Mutex(State())
    /// Held for a whole run: a second caller (the main thread failing because the signal
    /// handler's run stopped its daemons) waits for the first to finish before it exits.
    private let running = NSLock()

    func addChild(_ pid: pid_t) { state.withLock { $0.children.append(pid) } }
    func removeChild(_ pid: pid_t) { state.withLock { $0.children.removeAll { $0 == pid } } }
    func addMountpoint(_ path: String) { state.withLock { $0.mountpoints.append(path) } }
    func addDirectory(_ path: String) { state.withLock { $0.directories.append(path) } }
    /// `stop` runs after the children and mounts are gone, before the directories are removed.
    func addStop(_ stop: @escaping @Sendable () -> Void) { state.withLock { $0.stops.append(stop) } }

    func run() {
        running.lock()
        defer { running.unlock() }
        let (kids, mounts, dirs, stops) = state.withLock { s -> ([pid_t], [String], [String], [@Sendable () -> Void]) in
            defer {
                s.children = []
                s.mountpoints = []
                s.directories = []
                s.stops = []
            }
            return (s.children, s.mountpoints, s.directories, s.stops)
        }
        for pid in kids { kill(pid, SIGTERM) }
        for pid in kids where Spawn.wait(pid, timeout: 10) == nil {
            // A daemon that does not leave on SIGTERM: detach its mount, then kill it.
            for m in mounts where MountTable.isMounted(m) { MountTable.lazyUnmount(m) }
            kill(pid, SIGKILL)
            _ = Spawn.wait(pid, timeout: 5)
        }
        for m in mounts where MountTable.isMounted(m) { MountTable.lazyUnmount(m) }
        for stop in stops.reversed() { stop() }
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
