import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

// The harness of the access-control and certificate integration tests (issues 4 and 5).
//
// Every test gets a private sandbox: a temp dir whose path contains "keychainfs-test", its own
// HOME / XDG_STATE_HOME / XDG_DATA_HOME (so the audit log and daemon log land inside it), a
// vault mounted by the built `keychainfs` binary, and a teardown that ALWAYS runs
// `fusermount3 -u -z`, kills whatever this sandbox started (daemons, pinentry peers, servers,
// tmux servers, copied binaries), deletes test users and restores /etc/fuse.conf.
// All I/O on the mount happens in child processes with timeouts, so a wedged daemon can fail a
// test but never hang the runner.

// MARK: - Locating the binary

/// `$KEYCHAINFS_BIN`, else the file `keychainfs` next to the running test bundle.
let keychainfsBinary: String? = {
    let fm = FileManager.default
    func isBinary(_ path: String) -> Bool {
        var isDir: ObjCBool = false
        return fm.fileExists(atPath: path, isDirectory: &isDir) && !isDir.boolValue && fm.isExecutableFile(atPath: path)
    }
    if let override = ProcessInfo.processInfo.environment["KEYCHAINFS_BIN"], !override.isEmpty {
        return isBinary(override) ? override : nil
    }
    var starts: [URL] = []
    if let arg0 = CommandLine.arguments.first, !arg0.isEmpty {
        starts.append(URL(fileURLWithPath: arg0).resolvingSymlinksInPath())
    }
    if let me = try? fm.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
        starts.append(URL(fileURLWithPath: me))
    }
    if let exe = Bundle.main.executableURL { starts.append(exe.resolvingSymlinksInPath()) }
    for start in starts {
        var dir = start.deletingLastPathComponent()
        for _ in 0..<6 {
            let candidate = dir.appendingPathComponent("keychainfs").path
            if isBinary(candidate) { return candidate }
            dir = dir.deletingLastPathComponent()
        }
    }
    return nil
}()

struct HarnessError: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

// MARK: - Processes

struct RunResult: Sendable {
    var status: Int32          // exit status; 128+signal when killed; 124 when timed out
    var timedOut: Bool
    var stdoutBytes: [UInt8]
    var stderrBytes: [UInt8]
    var stdout: String { String(decoding: stdoutBytes, as: UTF8.self) }
    var stderr: String { String(decoding: stderrBytes, as: UTF8.self) }
    var lines: [String] { stdout.split(separator: "\n").map { String($0).trimmingCharacters(in: CharacterSet(charactersIn: "\r")) } }
    var summary: String { "exit \(status)\(timedOut ? " (timed out)" : ""); stdout: \(stdout.prefix(800)); stderr: \(stderr.prefix(800))" }
}

/// Single-quotes a string for /bin/sh.
func q(_ s: String) -> String { "'" + s.replacingOccurrences(of: "'", with: "'\\''") + "'" }

/// A child started with posix_spawn: stdout/stderr go to files (never pipes, so a grandchild
/// holding a descriptor can never make us wait), status collected with waitpid on this pid.
final class Spawned: @unchecked Sendable {
    let pid: pid_t
    let outPath: String
    let errPath: String
    let started = Date()
    private let lock = NSLock()
    private var status: Int32?

    init(pid: pid_t, outPath: String, errPath: String) {
        self.pid = pid; self.outPath = outPath; self.errPath = errPath
    }

    var stdoutSoFar: String { (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? "" }

    var isRunning: Bool {
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

    /// Waits up to `timeout` seconds, SIGKILLs on expiry. Never blocks longer.
    func wait(timeout: Double) -> RunResult {
        let deadline = Date().addingTimeInterval(timeout)
        var timedOut = false
        while isRunning {
            if Date() >= deadline {
                timedOut = true
                kill(pid, SIGKILL)
                let hard = Date().addingTimeInterval(5)
                while isRunning && Date() < hard { usleep(10_000) }
                break
            }
            usleep(5_000)
        }
        let code = timedOut ? 124 : (lock.withLock { status } ?? -1)
        let out = (try? Data(contentsOf: URL(fileURLWithPath: outPath))).map { [UInt8]($0) } ?? []
        let err = (try? Data(contentsOf: URL(fileURLWithPath: errPath))).map { [UInt8]($0) } ?? []
        return RunResult(status: code, timedOut: timedOut, stdoutBytes: out, stderrBytes: err)
    }
}

/// Polls `condition` every 20 ms for up to `seconds`; true if it became true.
@discardableResult
func waitUntil(_ seconds: Double, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while true {
        if condition() { return true }
        if Date() >= deadline { return false }
        usleep(20_000)
    }
}

// MARK: - Mount table

enum MountInfo {
    struct Entry { let mountpoint: String; let fstype: String }

    static func entries() -> [Entry] {
        guard let text = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let f = line.split(separator: " ").map(String.init)
            guard let dash = f.firstIndex(of: "-"), f.count > dash + 1, f.count > 4 else { return nil }
            return Entry(mountpoint: unescape(f[4]), fstype: f[dash + 1])
        }
    }

    static func unescape(_ s: String) -> String {
        var out = [UInt8]()
        let b = Array(s.utf8)
        var i = 0
        while i < b.count {
            if b[i] == UInt8(ascii: "\\"), i + 3 < b.count,
               let v = UInt8(String(decoding: b[(i + 1)...(i + 3)], as: UTF8.self), radix: 8) {
                out.append(v); i += 4
            } else { out.append(b[i]); i += 1 }
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func isKeychainMount(_ path: String) -> Bool {
        entries().contains { $0.mountpoint == path && $0.fstype == "fuse.keychainfs" }
    }
}

// MARK: - The sandbox

final class Sandbox: @unchecked Sendable {
    let root: String
    let name: String          // basename of root: unique, names our tmux sockets too
    let home: String
    let stateHome: String
    let dataHome: String
    let vault: String
    let passphraseFile: String
    let passphrase: String
    let mnt: String
    let tmuxSocket: String
    private let lock = NSLock()
    private var counter = 0
    private var cleanups: [() -> Void] = []
    private var tmuxStarted = false

    init(_ label: String) throws {
        let safe = String(label.map { $0.isLetter || $0.isNumber ? $0 : "-" }.prefix(32))
        var template = Array("/tmp/keychainfs-test-ac-\(safe)-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw HarnessError("mkdtemp failed: \(String(cString: strerror(errno)))") }
        root = String(cString: made)
        name = (root as NSString).lastPathComponent
        home = root + "/home"
        stateHome = root + "/state"
        dataHome = root + "/data"
        vault = root + "/test.vault"
        passphraseFile = root + "/passphrase"
        mnt = root + "/mnt"
        tmuxSocket = "kcfs-" + String(name.suffix(6)) + "-" + name
        for dir in [home, stateHome, dataHome, mnt, root + "/io", root + "/w"] {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        }
        passphrase = "pass-" + UUID().uuidString
        try Data((passphrase + "\n").utf8).write(to: URL(fileURLWithPath: passphraseFile))
        try Data(Self.ptyRunner.utf8).write(to: URL(fileURLWithPath: ptyRunnerPath))
        try Data(Self.readerScript.utf8).write(to: URL(fileURLWithPath: readerPath))
    }

    var auditPath: String { stateHome + "/keychainfs/audit.log" }
    var audit: String { (try? String(contentsOfFile: auditPath, encoding: .utf8)) ?? "" }
    var logPath: String { stateHome + "/keychainfs/daemon.log" }
    var daemonLog: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }
    var unlockArgs: [String] { ["--vault", vault, "--passphrase-file", passphraseFile] }
    var ptyRunnerPath: String { root + "/ptyrun.py" }
    var readerPath: String { root + "/reader.py" }

    /// Registers something teardown must undo (users, /etc/fuse.conf, …); run last-in first-out.
    func onTeardown(_ body: @escaping () -> Void) { lock.withLock { cleanups.append(body) } }

    var environment: [String: String] {
        var env = ProcessInfo.processInfo.environment.filter { k, _ in
            k != "KEYCHAINFS_VAULT" && !k.hasPrefix("XDG_") && k != "DISPLAY" && k != "WAYLAND_DISPLAY" && k != "TMUX"
                && k != "TMUX_PANE" && !k.hasPrefix("PYENV") && k != "SSH_AUTH_SOCK"
        }
        env["HOME"] = home
        env["XDG_STATE_HOME"] = stateHome
        env["XDG_DATA_HOME"] = dataHome
        env["LC_ALL"] = "C"
        env["LANG"] = "C"
        env["TERM"] = "xterm"
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        return env
    }

    private func nextTag() -> Int { lock.withLock { counter += 1; return counter } }

    /// Starts `executable args` with stdin from bytes or /dev/null, not waiting.
    func spawn(_ executable: String, _ args: [String], stdin: [UInt8]? = nil) throws -> Spawned {
        let tag = nextTag()
        let outPath = root + "/io/out-\(tag)", errPath = root + "/io/err-\(tag)"
        var inPath = "/dev/null"
        if let stdin {
            inPath = root + "/io/in-\(tag)"
            try Data(stdin).write(to: URL(fileURLWithPath: inPath))
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, inPath, O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, errPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        for fd in Int32(3)..<1024 { posix_spawn_file_actions_addclose(&actions, fd) }
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
        // A new session (POSIX_SPAWN_SETSID, 0x80 in glibc): no controlling terminal is
        // inherited from the test runner.
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK) | 0x80)
        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + args).map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for p in argv + envp { free(p) } }
        var pid = pid_t()
        let rc = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard rc == 0 else { throw HarnessError("posix_spawn \(executable): \(String(cString: strerror(rc)))") }
        return Spawned(pid: pid, outPath: outPath, errPath: errPath)
    }

    /// Runs to completion under `timeout(1)` and a harness deadline as a second net.
    func run(_ executable: String, _ args: [String], stdin: [UInt8]? = nil, timeout: Double = 20) throws -> RunResult {
        let t = String(format: "%.1f", timeout)
        let s = try spawn("/usr/bin/timeout", ["-k", "2", t, executable] + args, stdin: stdin)
        var r = s.wait(timeout: timeout + 6)
        if r.status == 124 { r.timedOut = true }
        return r
    }

    @discardableResult
    func cli(_ args: [String], stdin: [UInt8]? = nil, timeout: Double = 30) throws -> RunResult {
        guard let bin = keychainfsBinary else { throw HarnessError("keychainfs binary not found; set KEYCHAINFS_BIN") }
        return try run(bin, args, stdin: stdin, timeout: timeout)
    }

    @discardableResult
    func sh(_ script: String, stdin: [UInt8]? = nil, timeout: Double = 30, cwd: String? = nil) throws -> RunResult {
        try run("/bin/sh", ["-c", "cd \(q(cwd ?? root + "/w")) || exit 99\n" + script], stdin: stdin, timeout: timeout)
    }

    func py(_ script: String, _ args: [String] = [], timeout: Double = 20) throws -> RunResult {
        try run("/usr/bin/python3", ["-c", pythonPrelude + script] + args, timeout: timeout)
    }

    // MARK: Reading the mount from a child process

    /// The reader's steps: `read:PATH`, `nb:PATH` (O_NONBLOCK), `sleep:SECONDS`. It prints
    /// `PID n`, `TTY t|-`, then one `RESULT OK <secret> <elapsed>` or `RESULT ERRNAME <elapsed>` per read.
    func reader(_ steps: [String], timeout: Double = 30) throws -> ReaderResult {
        ReaderResult(try run("/usr/bin/python3", [readerPath] + steps, timeout: timeout))
    }

    /// The same reader on a pseudo-terminal of its own (so the caller has a tty on fds 0-2).
    func readerOnPty(_ steps: [String], timeout: Double = 30) throws -> ReaderResult {
        ReaderResult(try run("/usr/bin/python3", [ptyRunnerPath, String(timeout), "/usr/bin/python3", readerPath] + steps,
                             timeout: timeout + 5))
    }

    func spawnReaderOnPty(_ steps: [String], timeout: Double = 30) throws -> Spawned {
        try spawn("/usr/bin/timeout", ["-k", "2", String(timeout + 3), "/usr/bin/python3", ptyRunnerPath, String(timeout),
                                       "/usr/bin/python3", readerPath] + steps)
    }

    // MARK: Vault and items

    func initVault(sourceLocation: SourceLocation = #_sourceLocation) throws {
        let r = try cli(["init", "--kdf", "interactive"] + unlockArgs)
        try #require(r.status == 0, "init failed: \(r.summary)", sourceLocation: sourceLocation)
    }

    func addGeneric(_ service: String, _ account: String, _ secret: String, extra: [String] = [],
                    sourceLocation: SourceLocation = #_sourceLocation) throws {
        let r = try cli(["add-generic-password"] + unlockArgs + ["-s", service, "-a", account] + extra, stdin: Array(secret.utf8))
        try #require(r.status == 0, "add-generic-password failed: \(r.summary)", sourceLocation: sourceLocation)
    }

    // MARK: Mounting

    /// `keychainfs mount` (it backgrounds once live), then requires the mount in mountinfo.
    func mount(_ options: [String] = [], sourceLocation: SourceLocation = #_sourceLocation) throws {
        var args = ["mount", vault, mnt, "--passphrase-file", passphraseFile]
        for o in options { args += ["-o", o] }
        let r = try cli(args, timeout: 20)
        try #require(r.status == 0, "mount failed: \(r.summary)\nlog: \(daemonLog.suffix(1500))", sourceLocation: sourceLocation)
        try #require(isMounted, "no fuse.keychainfs mount on \(mnt) in /proc/self/mountinfo", sourceLocation: sourceLocation)
    }

    var isMounted: Bool { MountInfo.isKeychainMount(mnt) }

    func unmount(sourceLocation: SourceLocation = #_sourceLocation) throws {
        let r = try cli(["unmount", mnt], timeout: 15)
        #expect(r.status == 0, "unmount failed: \(r.summary)", sourceLocation: sourceLocation)
        if !waitUntil(5, { !isMounted }) { _ = try? run("/usr/bin/fusermount3", ["-u", "-z", mnt], timeout: 10) }
        // The daemon exits after the unmount; the next mount must not find the vault lock held.
        _ = waitUntil(5) { self.daemons().isEmpty }
    }

    // MARK: tmux

    @discardableResult
    func tmux(_ args: [String], timeout: Double = 10) throws -> RunResult {
        lock.withLock { tmuxStarted = true }
        return try run("/usr/bin/tmux", ["-L", tmuxSocket, "-f", "/dev/null"] + args, timeout: timeout)
    }

    // MARK: Processes of this sandbox

    private static func cmdline(_ pid: pid_t) -> [String] {
        guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline"), !data.isEmpty else { return [] }
        return data.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
    }

    private static func allPids() -> [pid_t] {
        ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap { pid_t($0) }.filter { $0 != getpid() }
    }

    static func parent(of pid: pid_t) -> pid_t? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("PPid:") }) else { return nil }
        return pid_t(line.dropFirst(5).trimmingCharacters(in: .whitespaces))
    }

    static func isAlive(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return false }
        let state = stat[stat.index(close, offsetBy: 2)]
        return state != "Z" && state != "X"
    }

    /// Our keychainfs daemons: the binary, with a command line naming this sandbox.
    func daemons() -> [pid_t] {
        Self.allPids().filter { pid in
            let args = Self.cmdline(pid)
            return (args.first?.hasSuffix("keychainfs") ?? false) && args.contains { $0.contains(root) } && Self.isAlive(pid)
        }
    }

    /// Everything this sandbox started: command lines or executables naming it, and the
    /// children of its daemons (a pinentry the daemon spawned names no path of ours).
    func ownProcesses() -> [pid_t] {
        let ds = Set(daemons())
        return Self.allPids().filter { pid in
            guard Self.isAlive(pid) else { return false }
            if ds.contains(pid) { return true }
            if let p = Self.parent(of: pid), ds.contains(p) { return true }
            if Self.cmdline(pid).contains(where: { $0.contains(root) || $0.contains(name) }) { return true }
            if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe"), exe.hasPrefix(root) { return true }
            return false
        }
    }

    /// Always safe: lazy-unmounts, ends everything this sandbox started, undoes system changes.
    func teardown() {
        if lock.withLock({ tmuxStarted }) {
            _ = try? run("/usr/bin/tmux", ["-L", tmuxSocket, "kill-server"], timeout: 5)
        }
        // Children of the daemons first (a pinentry), then the mount, then the rest.
        let ds = Set(daemons())
        for pid in Self.allPids() where Self.parent(of: pid).map({ ds.contains($0) }) ?? false { kill(pid, SIGKILL) }
        _ = try? run("/usr/bin/fusermount3", ["-u", "-z", mnt], timeout: 10)
        var procs = ownProcesses()
        if !procs.isEmpty {
            for pid in procs { kill(pid, SIGTERM) }
            _ = waitUntil(3) { self.ownProcesses().isEmpty }
            procs = ownProcesses()
            for pid in procs { kill(pid, SIGKILL) }
            _ = waitUntil(3) { self.ownProcesses().isEmpty }
        }
        if isMounted { _ = try? run("/usr/bin/fusermount3", ["-u", "-z", mnt], timeout: 10) }
        for body in lock.withLock({ cleanups.reversed() }) { body() }
        if !isMounted { try? FileManager.default.removeItem(atPath: root) }
    }

    // MARK: Helper scripts

    /// Runs a command on a new pseudo-terminal (pty.fork: new session, the pty as controlling
    /// terminal and fds 0-2), copies its output to stdout, kills it after TIMEOUT seconds, and
    /// exits with its status.
    static let ptyRunner = """
    import os, sys, pty, select, time, signal
    timeout = float(sys.argv[1]); cmd = sys.argv[2:]
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.execv(cmd[0], cmd)
        finally:
            os._exit(127)
    out = b''
    deadline = time.time() + timeout
    status = None
    while True:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                data = os.read(fd, 65536)
            except OSError:
                data = b''
            if not data:
                break
            out += data
        if time.time() > deadline:
            os.kill(pid, signal.SIGKILL)
            out += b'\\nPTYRUN TIMEOUT\\n'
            break
    _, st = os.waitpid(pid, 0)
    sys.stdout.buffer.write(out.replace(b'\\r\\n', b'\\n'))
    sys.stdout.flush()
    sys.exit(os.waitstatus_to_exitcode(st) & 0xff)
    """

    static let readerScript = """
    import os, sys, errno, time
    print('PID', os.getpid(), flush=True)
    try:
        print('TTY', os.ttyname(0), flush=True)
    except OSError:
        print('TTY -', flush=True)
    for step in sys.argv[1:]:
        kind, _, arg = step.partition(':')
        if kind == 'sleep':
            time.sleep(float(arg)); continue
        flags = os.O_RDONLY | (os.O_NONBLOCK if kind == 'nb' else 0)
        t = time.time()
        try:
            fd = os.open(arg, flags)
            try:
                data = b''
                while True:
                    b = os.read(fd, 65536)
                    if not b: break
                    data += b
            finally:
                os.close(fd)
            print('RESULT OK %s %.2f' % (data.decode('utf-8', 'replace'), time.time() - t), flush=True)
        except OSError as e:
            print('RESULT %s %.2f' % (errno.errorcode.get(e.errno, str(e.errno)), time.time() - t), flush=True)
    """
}

/// What the reader printed.
struct ReaderResult {
    let run: RunResult
    init(_ r: RunResult) { run = r }
    var pid: pid_t? { run.lines.first { $0.hasPrefix("PID ") }.flatMap { pid_t($0.dropFirst(4)) } }
    var tty: String? { run.lines.first { $0.hasPrefix("TTY ") }.map { String($0.dropFirst(4)) }.flatMap { $0 == "-" ? nil : $0 } }
    /// One entry per read: ("OK", secret, seconds) or ("EACCES", nil, seconds).
    var results: [(outcome: String, secret: String?, seconds: Double)] {
        run.lines.filter { $0.hasPrefix("RESULT ") }.map { line in
            let parts = line.split(separator: " ").map(String.init)
            let seconds = Double(parts.last ?? "") ?? -1
            if parts.count >= 4 && parts[1] == "OK" { return ("OK", parts[2..<(parts.count - 1)].joined(separator: " "), seconds) }
            return (parts.count > 1 ? parts[1] : "?", nil, seconds)
        }
    }
    var summary: String { run.summary }
}

/// A sandbox with an initialised vault, `setup` before the mount, the mount asserted live;
/// `body` runs; teardown always runs.
func withMount(_ label: String = #function, options: [String] = [],
               setup: (Sandbox) throws -> Void = { _ in },
               sourceLocation: SourceLocation = #_sourceLocation,
               _ body: (Sandbox) throws -> Void) throws {
    _ = try #require(keychainfsBinary, "keychainfs binary not found next to the test bundle; set KEYCHAINFS_BIN",
                     sourceLocation: sourceLocation)
    let box = try Sandbox(label)
    defer { box.teardown() }
    try box.initVault(sourceLocation: sourceLocation)
    try setup(box)
    try box.mount(options, sourceLocation: sourceLocation)
    try body(box)
}

/// A sandbox with an initialised vault and no mount.
func withSandbox(_ label: String = #function, sourceLocation: SourceLocation = #_sourceLocation,
                 _ body: (Sandbox) throws -> Void) throws {
    _ = try #require(keychainfsBinary, "keychainfs binary not found next to the test bundle; set KEYCHAINFS_BIN",
                     sourceLocation: sourceLocation)
    let box = try Sandbox(label)
    defer { box.teardown() }
    try box.initVault(sourceLocation: sourceLocation)
    try body(box)
}

/// Functions every `py` script gets: t(label, fn, *args) prints "label OK[ value]" or "label ERRNAME".
let pythonPrelude = """
import os, sys, errno, time
def en(e):
    return errno.errorcode.get(e, str(e))
def t(label, fn, *a):
    try:
        v = fn(*a)
        print(label, ('OK ' + ('' if v is None else str(v))).rstrip(), flush=True)
    except OSError as e:
        print(label, en(e.errno), flush=True)
def read(p):
    with open(p, 'rb') as f: return f.read()

"""

/// Lines `label result` of a `py` run as a dictionary.
func labelled(_ r: RunResult) -> [String: String] {
    var out: [String: String] = [:]
    for line in r.lines {
        let parts = line.split(separator: " ", maxSplits: 1).map(String.init)
        guard let first = parts.first else { continue }
        out[first] = parts.count > 1 ? parts[1] : ""
    }
    return out
}

/// The one suite: serialized, because its tests measure time (idle lock, prompt timeouts,
/// reuse windows), change /etc/fuse.conf and add users, on a small shared machine.
@Suite("access control and certificates (issues 4, 5)", .serialized)
enum AccessSuite {}
