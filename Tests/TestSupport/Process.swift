import Foundation

#if canImport(Glibc)
    import Glibc
#endif

// The one way the tests start a process: posix_spawn in a new session (no controlling
// terminal, so nothing can prompt on the developer's terminal), stdin/stdout/stderr on files
// (never pipes, so a grandchild that keeps a descriptor can never make us wait for EOF),
// nothing else of the test process leaking in, signals at their defaults, optional extra
// descriptors (`--passphrase-fd 3`), a working directory, and a deadline after which the
// child's whole process group gets SIGTERM and, 2 s later, SIGKILL. The status is collected
// with waitpid on this pid only (Foundation.Process misses the exit of a child whose own
// child lives on, as `keychainfs mount`'s daemon does, and cannot setsid or pass fd 3).

/// What a finished (or timed-out) process left behind.
public struct RunResult: Sendable {
    /// Exit status; 128+signal when killed; 124 when timed out.
    public var status: Int32
    public var timedOut: Bool
    public var stdoutBytes: [UInt8]
    public var stderrBytes: [UInt8]

    public init(status: Int32, timedOut: Bool = false, stdoutBytes: [UInt8], stderrBytes: [UInt8]) {
        self.status = status; self.timedOut = timedOut; self.stdoutBytes = stdoutBytes; self.stderrBytes = stderrBytes
    }

    public var stdout: String { String(decoding: stdoutBytes, as: UTF8.self) }
    public var stderr: String { String(decoding: stderrBytes, as: UTF8.self) }
    /// Non-empty stdout lines, without a trailing carriage return.
    public var lines: [String] {
        stdout.split(separator: "\n").map { $0.hasSuffix("\r") ? String($0.dropLast()) : String($0) }.filter {
            !$0.isEmpty
        }
    }
    public var summary: String {
        "exit \(status)\(timedOut ? " (timed out)" : ""); stdout: \(stdout.prefix(800)); stderr: \(stderr.prefix(800))"
    }
}

/// A child started by `spawnProcess`, not yet waited for.
public final class Spawned: @unchecked Sendable {
    // @unchecked: `status` is guarded by `lock`; the rest is immutable.
    public let pid: pid_t
    public let outPath: String
    public let errPath: String
    public let started = Date()
    /// Files made for this child (stdin, extra descriptors), removed once it is waited for.
    let inputPaths: [String]
    private let lock = NSLock()
    private var status: Int32?

    init(pid: pid_t, outPath: String, errPath: String, inputPaths: [String]) {
        self.pid = pid; self.outPath = outPath; self.errPath = errPath; self.inputPaths = inputPaths
    }

    public var stdoutSoFar: String { (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? "" }
    public var stderrSoFar: String { (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? "" }

    /// Reaps the child if it has exited; true while it runs.
    public var isRunning: Bool {
        lock.withLock {
            if status != nil { return false }
            var raw: Int32 = 0
            let r = waitpid(pid, &raw, WNOHANG)
            if r == pid {
                let sig = raw & 0x7f
                status = sig != 0 ? 128 + sig : (raw >> 8) & 0xff
                return false
            }
            if r < 0 && errno == ECHILD { status = -1; return false }
            return true
        }
    }

    /// Ends the child's process group (it leads its own session) and the child.
    public func kill(_ signal: Int32) {
        _ = Glibc.kill(-pid, signal)
        _ = Glibc.kill(pid, signal)
    }

    /// Waits up to `timeout` seconds; on expiry SIGTERM, then SIGKILL 2 s later, and status
    /// 124. Never blocks much longer than `timeout` + 7 s.
    public func wait(timeout: Double) -> RunResult {
        let deadline = Date().addingTimeInterval(timeout)
        var timedOut = false
        var pause: useconds_t = 500
        while isRunning {
            if Date() >= deadline {
                timedOut = true
                kill(SIGTERM)
                if !waitUntil(2, { !isRunning }) {
                    kill(SIGKILL)
                    _ = waitUntil(5) { !isRunning }
                }
                break
            }
            usleep(pause)
            pause = min(pause * 2, 5_000)
        }
        let code = timedOut ? 124 : (lock.withLock { status } ?? -1)
        let out = (try? Data(contentsOf: URL(fileURLWithPath: outPath))).map { [UInt8]($0) } ?? []
        let err = (try? Data(contentsOf: URL(fileURLWithPath: errPath))).map { [UInt8]($0) } ?? []
        for path in [outPath, errPath] + inputPaths { unlink(path) }
        return RunResult(status: code, timedOut: timedOut, stdoutBytes: out, stderrBytes: err)
    }
}

/// glibc's posix_spawn_file_actions_addchdir_np (2.29+), which the Glibc module does not import.
private let addchdirNP:
    (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32)? = {
        guard let symbol = dlsym(nil, "posix_spawn_file_actions_addchdir_np") else { return nil }
        return unsafeBitCast(
            symbol,
            to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32).self)
    }()

private let ioCounter = NSLock()
nonisolated(unsafe) private var ioSerial = 0

/// Starts `executable args` with `env` as its whole environment, not waiting. `stdin` nil is
/// /dev/null; `extraDescriptors` maps a descriptor number (3…) to bytes the child can read
/// there. Its stdout and stderr go to files in `ioDirectory` (default: the temp directory).
public func spawnProcess(
    _ executable: String, _ args: [String], stdin: [UInt8]? = nil,
    extraDescriptors: [Int32: [UInt8]] = [:], env: [String: String],
    cwd: String? = nil, ioDirectory: String? = nil
) throws -> Spawned {
    let serial = ioCounter.withLock {
        ioSerial += 1; return ioSerial
    }
    let dir = ioDirectory ?? NSTemporaryDirectory()
    let base = dir + "/keychainfs-io-\(getpid())-\(serial)"
    let outPath = base + ".out", errPath = base + ".err"
    var inputs: [String] = []
    func file(_ suffix: String, _ bytes: [UInt8]) throws -> String {
        let path = base + suffix
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        inputs.append(path)
        return path
    }
    let inPath = try stdin.map { try file(".in", $0) } ?? "/dev/null"
    let extras = try extraDescriptors.sorted { $0.key < $1.key }.map { ($0.key, try file(".fd\($0.key)", $0.value)) }

    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, inPath, O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, outPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    posix_spawn_file_actions_addopen(&actions, 2, errPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    // Nothing of the test process leaks in (glibc ignores closing a descriptor that is not open).
    for fd in Int32(3)..<1024 { posix_spawn_file_actions_addclose(&actions, fd) }
    for (fd, path) in extras { posix_spawn_file_actions_addopen(&actions, fd, path, O_RDONLY, 0) }
    if let cwd {
        guard let addchdir = addchdirNP else {
            throw HarnessError("posix_spawn_file_actions_addchdir_np is missing (glibc < 2.29)")
        }
        _ = addchdir(&actions, cwd)
    }

    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var defaults = sigset_t()
    sigfillset(&defaults)
    sigdelset(&defaults, SIGKILL)
    sigdelset(&defaults, SIGSTOP)
    posix_spawnattr_setsigdefault(&attributes, &defaults)
    var mask = sigset_t()
    sigemptyset(&mask)
    posix_spawnattr_setsigmask(&attributes, &mask)
    // 0x80 is POSIX_SPAWN_SETSID (glibc ≥ 2.26): a new session without a controlling terminal.
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK) | 0x80)

    let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + args).map { strdup($0) } + [nil]
    let envp: [UnsafeMutablePointer<CChar>?] = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer { for p in argv + envp { free(p) } }
    var pid = pid_t()
    let rc = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
    guard rc == 0 else {
        for path in inputs { unlink(path) }
        throw HarnessError("posix_spawn \(executable): \(errnoText(rc))")
    }
    return Spawned(pid: pid, outPath: outPath, errPath: errPath, inputPaths: inputs)
}

/// `spawnProcess` and wait: the result, or status 124 and `timedOut` after `timeout` seconds.
public func runProcess(
    _ executable: String, _ args: [String], stdin: [UInt8]? = nil,
    extraDescriptors: [Int32: [UInt8]] = [:], env: [String: String],
    cwd: String? = nil, ioDirectory: String? = nil, timeout: Double = 60
) throws -> RunResult {
    try spawnProcess(
        executable, args, stdin: stdin, extraDescriptors: extraDescriptors, env: env, cwd: cwd,
        ioDirectory: ioDirectory
    ).wait(timeout: timeout)
}

/// The environment of a test child: the runner's, minus anything that could point it at a
/// real vault, real XDG directories, a display or agent a prompt could reach, or a tmux
/// session; with the C locale, a plain PATH, and `overrides` (a nil value removes a variable).
public func childEnvironment(_ overrides: [String: String?] = [:]) -> [String: String] {
    let drop: Set<String> = [
        "KEYCHAINFS_VAULT", "DISPLAY", "WAYLAND_DISPLAY", "GPG_TTY", "PINENTRY_USER_DATA",
        "TMUX", "TMUX_PANE", "SSH_AUTH_SOCK",
        // A test run inside a systemd service must not make keychainfs ask systemd for a
        // passphrase (INVOCATION_ID) or tell the runner's unit READY=1 (NOTIFY_SOCKET).
        "INVOCATION_ID", "NOTIFY_SOCKET",
    ]
    var env = ProcessInfo.processInfo.environment.filter { k, _ in
        !drop.contains(k) && !k.hasPrefix("XDG_") && !k.hasPrefix("PYENV")
    }
    env["LC_ALL"] = "C"
    env["LANG"] = "C"
    env["TERM"] = "xterm"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    for (k, v) in overrides {
        if let v { env[k] = v } else { env.removeValue(forKey: k) }
    }
    return env
}
