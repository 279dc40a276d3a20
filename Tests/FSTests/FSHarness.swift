import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

// The harness of the FUSE integration tests: a private sandbox per test (temp dir whose path
// contains "keychainfs-test", its own HOME / XDG_STATE_HOME / XDG_DATA_HOME), a real vault
// mounted by the built `keychainfs` binary, and a teardown that always runs
// `fusermount3 -u -z` and ends the sandbox's own daemons, even when the test fails.
// Every spawned process has a timeout; all I/O on the mount happens in child processes, so
// a wedged daemon can fail a test but never hang the test runner.

// MARK: - Locating the binary

/// `$KEYCHAINFS_BIN`, else the file `keychainfs` next to the running test bundle.
let fsBinary: String? = {
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
    if let exe = Bundle.main.executableURL { starts.append(exe.resolvingSymlinksInPath()) }
    starts.append(Bundle.main.bundleURL.resolvingSymlinksInPath())
    if let me = try? fm.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
        starts.append(URL(fileURLWithPath: me))
    }
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

struct FSHarnessError: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

// MARK: - Running processes

struct RunResult: Sendable {
    var status: Int32          // exit status; 128+signal when killed; 124 when timed out
    var timedOut: Bool
    var stdoutBytes: [UInt8]
    var stderrBytes: [UInt8]
    var stdout: String { String(decoding: stdoutBytes, as: UTF8.self) }
    var stderr: String { String(decoding: stderrBytes, as: UTF8.self) }
    var lines: [String] { stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init).filter { !$0.isEmpty } }
    var summary: String { "exit \(status)\(timedOut ? " (timed out)" : ""); stdout: \(stdout.prefix(600)); stderr: \(stderr.prefix(600))" }
}

/// Single-quotes a string for /bin/sh.
func q(_ s: String) -> String { "'" + s.replacingOccurrences(of: "'", with: "'\\''") + "'" }

/// A process started through the harness with posix_spawn: stdout/stderr go to files
/// (never pipes, so a grandchild that keeps a descriptor can never make us wait for EOF),
/// nothing else of the test process leaks in, signals start at their defaults, and the
/// status is collected with waitpid on this pid only (Foundation.Process misses the exit
/// of a child whose own child lives on, as `keychainfs mount`'s daemon does).
final class Spawned: @unchecked Sendable {
    let pid: pid_t
    let outPath: String
    let errPath: String
    private let lock = NSLock()
    private var status: Int32?

    init(pid: pid_t, outPath: String, errPath: String) {
        self.pid = pid; self.outPath = outPath; self.errPath = errPath
    }

    var stdoutSoFar: String { (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? "" }

    /// Reaps the child if it has exited; true while it runs.
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

    /// Waits up to `timeout` seconds; kills (SIGKILL) on expiry. Never blocks longer.
    func wait(timeout: Double) -> RunResult {
        let deadline = Date().addingTimeInterval(timeout)
        var timedOut = false
        while isRunning {
            if Date() >= deadline {
                timedOut = true
                kill(-pid, SIGKILL)   // its process group (it leads its own session)
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
        try? FileManager.default.removeItem(atPath: outPath)
        try? FileManager.default.removeItem(atPath: errPath)
        return RunResult(status: code, timedOut: timedOut, stdoutBytes: out, stderrBytes: err)
    }
}

// MARK: - Mount table

enum MountInfo {
    struct Entry { let mountpoint: String; let fstype: String; let source: String }

    static func entries() -> [Entry] {
        guard let text = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let f = line.split(separator: " ").map(String.init)
            guard let dash = f.firstIndex(of: "-"), f.count > dash + 2, f.count > 4 else { return nil }
            return Entry(mountpoint: unescape(f[4]), fstype: f[dash + 1], source: unescape(f[dash + 2]))
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

    static func keychainMounts(at path: String) -> [Entry] {
        entries().filter { $0.mountpoint == path && $0.fstype == "fuse.keychainfs" }
    }
}

// MARK: - The sandbox

/// Everything a test needs: its directories, vault, passphrase, environment, and helpers to
/// run the CLI, shell one-liners and python on the mount.
final class FSSandbox: @unchecked Sendable {
    let root: String
    let home: String
    let stateHome: String
    let dataHome: String
    let vault: String
    let passphraseFile: String
    let mnt: String
    private(set) var foregroundDaemon: Spawned?
    private let counterLock = NSLock()
    private var counter = 0
    /// Every process started here, so that teardown can end any a failed test left running.
    private var spawned: [Spawned] = []

    init(_ label: String) throws {
        let safe = String(label.map { $0.isLetter || $0.isNumber ? $0 : "-" }.prefix(40))
        var template = Array("/tmp/keychainfs-test-\(safe)-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw FSHarnessError("mkdtemp failed: \(String(cString: strerror(errno)))") }
        root = String(cString: made)
        home = root + "/home"
        stateHome = root + "/state"
        dataHome = root + "/data"
        vault = root + "/test.vault"
        passphraseFile = root + "/passphrase"
        mnt = root + "/mnt"
        for dir in [home, stateHome, dataHome, mnt, root + "/io"] {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        }
        let pass = "pass-" + UUID().uuidString
        try Data((pass + "\n").utf8).write(to: URL(fileURLWithPath: passphraseFile))
    }

    var logPath: String { stateHome + "/keychainfs/daemon.log" }
    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }
    var unlockArgs: [String] { ["--vault", vault, "--passphrase-file", passphraseFile] }

    var environment: [String: String] {
        // Nothing that could point a child at a real vault, real XDG directories, or a display
        // a pinentry prompt could open on.
        let drop: Set<String> = ["KEYCHAINFS_VAULT", "DISPLAY", "WAYLAND_DISPLAY", "GPG_TTY", "PINENTRY_USER_DATA"]
        var env = ProcessInfo.processInfo.environment.filter { k, _ in !drop.contains(k) && !k.hasPrefix("XDG_") }
        env["HOME"] = home
        env["XDG_STATE_HOME"] = stateHome
        env["XDG_DATA_HOME"] = dataHome
        env["LC_ALL"] = "C"
        env["LANG"] = "C"
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        if env["PATH"] == nil { env["PATH"] = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin" }
        return env
    }

    private func nextTag() -> Int { counterLock.withLock { counter += 1; return counter } }

    /// Starts `executable args` (stdin from a file or /dev/null), not waiting.
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
        // Nothing of the test process leaks in (closing a descriptor that is not open is
        // ignored by glibc's posix_spawn).
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
        // 0x80 is POSIX_SPAWN_SETSID (glibc ≥ 2.26): a new session without a controlling
        // terminal, so nothing spawned here can prompt on the developer's terminal.
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | 0x80))

        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + args).map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for p in argv + envp { free(p) } }
        var pid = pid_t()
        let rc = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard rc == 0 else { throw FSHarnessError("posix_spawn \(executable): \(String(cString: strerror(rc)))") }
        let child = Spawned(pid: pid, outPath: outPath, errPath: errPath)
        counterLock.withLock { spawned.append(child) }
        return child
    }

    /// Runs a command to completion under `timeout(1)` (its whole process group is killed
    /// when the time is up) and a harness deadline as a second net.
    func run(_ executable: String, _ args: [String], stdin: [UInt8]? = nil, timeout: Double = 20) throws -> RunResult {
        let t = String(format: "%.1f", timeout)
        let s = try spawn("/usr/bin/timeout", ["-k", "2", t, executable] + args, stdin: stdin)
        var r = s.wait(timeout: timeout + 6)
        if r.status == 124 { r.timedOut = true }
        return r
    }

    /// `keychainfs args`.
    @discardableResult
    func cli(_ args: [String], stdin: [UInt8]? = nil, timeout: Double = 20) throws -> RunResult {
        guard let bin = fsBinary else { throw FSHarnessError("keychainfs binary not found; set KEYCHAINFS_BIN") }
        return try run(bin, args, stdin: stdin, timeout: timeout)
    }

    /// `/bin/sh -c script`.
    @discardableResult
    func sh(_ script: String, stdin: [UInt8]? = nil, timeout: Double = 20) throws -> RunResult {
        try run("/bin/sh", ["-c", script], stdin: stdin, timeout: timeout)
    }

    /// `python3 -c prelude+script args`.
    func py(_ script: String, _ args: [String] = [], timeout: Double = 20) throws -> RunResult {
        try run("/usr/bin/python3", ["-c", pythonPrelude + script] + args, timeout: timeout)
    }

    /// Runs a python script whose lines are `label result` and returns them as a dictionary.
    func pyResults(_ script: String, _ args: [String] = [], timeout: Double = 20,
                   sourceLocation: SourceLocation = #_sourceLocation) throws -> [String: String] {
        let r = try py(script, args, timeout: timeout)
        #expect(r.status == 0, "python failed: \(r.summary)", sourceLocation: sourceLocation)
        var out: [String: String] = [:]
        for line in r.lines {
            let parts = line.split(separator: " ", maxSplits: 1).map(String.init)
            out[parts[0]] = parts.count > 1 ? parts[1] : ""
        }
        return out
    }

    // MARK: Vault and items

    func initVault(sourceLocation: SourceLocation = #_sourceLocation) throws {
        let r = try cli(["init", "--kdf", "interactive"] + unlockArgs)
        try #require(r.status == 0, "init failed: \(r.summary)", sourceLocation: sourceLocation)
    }

    /// add-generic-password with the secret on stdin.
    func addGeneric(_ service: String, _ account: String?, _ secret: [UInt8], extra: [String] = [],
                    sourceLocation: SourceLocation = #_sourceLocation) throws {
        var args = ["add-generic-password"] + unlockArgs + ["-s", service]
        if let account { args += ["-a", account] }
        let r = try cli(args + extra, stdin: secret)
        #expect(r.status == 0, "add-generic-password failed: \(r.summary)", sourceLocation: sourceLocation)
    }

    func addGeneric(_ service: String, _ account: String?, _ secret: String, extra: [String] = [],
                    sourceLocation: SourceLocation = #_sourceLocation) throws {
        try addGeneric(service, account, Array(secret.utf8), extra: extra, sourceLocation: sourceLocation)
    }

    func addInternet(_ args: [String], _ secret: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let r = try cli(["add-internet-password"] + unlockArgs + args, stdin: Array(secret.utf8))
        #expect(r.status == 0, "add-internet-password failed: \(r.summary)", sourceLocation: sourceLocation)
    }

    /// `dump-keychain --json`: every item as (class, id, attributes).
    func dump(sourceLocation: SourceLocation = #_sourceLocation) throws -> [DumpedItem] {
        let r = try cli(["dump-keychain", "--json"] + unlockArgs)
        try #require(r.status == 0, "dump-keychain failed: \(r.summary)", sourceLocation: sourceLocation)
        let object = try JSONSerialization.jsonObject(with: Data(r.stdoutBytes))
        let array = try #require(object as? [[String: Any]], "dump --json is not an array", sourceLocation: sourceLocation)
        return array.map { d in
            let attrs = (d["attributes"] as? [String: Any]) ?? [:]
            var strings: [String: String] = [:]
            for (k, v) in attrs { strings[k] = "\(v)" }
            return DumpedItem(itemClass: d["class"] as? String ?? "?", id: (d["id"] as? NSNumber)?.int64Value ?? -1, attributes: strings)
        }
    }

    /// `find-generic-password -w`: the secret (without the newline find adds), nil if not found.
    func findGeneric(_ service: String, _ account: String) throws -> [UInt8]? {
        let r = try cli(["find-generic-password"] + unlockArgs + ["-s", service, "-a", account, "-w"])
        guard r.status == 0, r.stdoutBytes.last == 10 else { return nil }
        return Array(r.stdoutBytes.dropLast())
    }

    /// The secret in a short printable form for assertions: the text itself up to 200 bytes,
    /// else "<N bytes>"; "<not found>" when there is no such item.
    func secretSummary(_ service: String, _ account: String) throws -> String {
        guard let bytes = try findGeneric(service, account) else { return "<not found>" }
        return bytes.count <= 200 ? String(decoding: bytes, as: UTF8.self) : "<\(bytes.count) bytes>"
    }

    // MARK: Mounting

    /// Mounts in the background (the CLI's default) or as a foreground `-f` child, then
    /// requires the mount to be live in /proc/self/mountinfo before returning.
    func mount(foreground: Bool = false, extra: [String] = [], sourceLocation: SourceLocation = #_sourceLocation) throws {
        guard let bin = fsBinary else { throw FSHarnessError("keychainfs binary not found; set KEYCHAINFS_BIN") }
        if foreground {
            let s = try spawn(bin, ["mount", vault, mnt, "--passphrase-file", passphraseFile, "-f"] + extra)
            foregroundDaemon = s
            let live = waitUntil(10) { self.isMounted || !s.isRunning }
            if !isMounted {
                let r = s.isRunning ? nil : s.wait(timeout: 1)
                Issue.record("foreground mount not live (waited \(live)): \(r?.summary ?? "still running")", sourceLocation: sourceLocation)
            }
        } else {
            let r = try cli(["mount", vault, mnt, "--passphrase-file", passphraseFile] + extra, timeout: 15)
            #expect(r.status == 0, "mount failed: \(r.summary)", sourceLocation: sourceLocation)
            // The CLI returns once the mount is live; stdout stays clean.
            #expect(r.stdout.isEmpty, "mount printed on stdout: \(r.stdout)", sourceLocation: sourceLocation)
        }
        try #require(isMounted, "no fuse.keychainfs mount on \(mnt) in /proc/self/mountinfo", sourceLocation: sourceLocation)
    }

    var isMounted: Bool { !MountInfo.keychainMounts(at: mnt).isEmpty }

    /// The pid the daemon wrote into `<vault>.lock`.
    var daemonPid: pid_t? {
        guard let text = try? String(contentsOfFile: vault + ".lock", encoding: .utf8),
              let pid = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)), pid > 0 else { return nil }
        return pid
    }

    /// Processes of the keychainfs binary whose command line names this sandbox: only ours.
    func ownDaemons() -> [pid_t] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [] }
        var out: [pid_t] = []
        for name in names {
            guard let pid = pid_t(name), pid != getpid(),
                  let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline"), !data.isEmpty else { continue }
            let args = data.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
            guard let first = args.first, first.hasSuffix("keychainfs") else { continue }
            if args.contains(where: { $0.contains(root) }) && isAlive(pid) { out.append(pid) }
        }
        return out
    }

    /// Alive and not a zombie.
    func isAlive(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return false }
        let state = stat[stat.index(close, offsetBy: 2)]
        return state != "Z" && state != "X"
    }

    /// Sends `signal` to the daemon and, for SIGKILL, waits until it is gone.
    @discardableResult
    func signalDaemon(_ signal: Int32, sourceLocation: SourceLocation = #_sourceLocation) throws -> pid_t {
        let pid = try #require(foregroundDaemon?.pid ?? daemonPid, "no daemon pid", sourceLocation: sourceLocation)
        #expect(kill(pid, signal) == 0, "kill \(pid): \(String(cString: strerror(errno)))", sourceLocation: sourceLocation)
        if signal == SIGKILL {
            let gone = waitUntil(5) { !self.isAlive(pid) }
            #expect(gone, "daemon \(pid) survived SIGKILL", sourceLocation: sourceLocation)
            if let fg = foregroundDaemon, fg.pid == pid { _ = fg.wait(timeout: 2); foregroundDaemon = nil }
        }
        return pid
    }

    /// Always safe: lazy-unmounts, ends this sandbox's daemons, removes the directory.
    func teardown() {
        _ = try? run("/usr/bin/fusermount3", ["-u", "-z", mnt], timeout: 10)
        if let fg = foregroundDaemon {
            _ = fg.wait(timeout: 5)
            foregroundDaemon = nil
        }
        // Children a failed test did not wait for (a writer, a hung command): end and reap them.
        for child in counterLock.withLock({ spawned }) where child.isRunning {
            kill(-child.pid, SIGKILL)
            kill(child.pid, SIGKILL)
            _ = child.wait(timeout: 5)
        }
        var daemons = ownDaemons()
        if !daemons.isEmpty {
            for pid in daemons { kill(pid, SIGTERM) }
            _ = waitUntil(3) { self.ownDaemons().isEmpty }
            daemons = ownDaemons()
            for pid in daemons { kill(pid, SIGKILL) }
            _ = waitUntil(3) { self.ownDaemons().isEmpty }
        }
        if !isMounted {
            try? FileManager.default.removeItem(atPath: root)
        }
    }
}

struct DumpedItem {
    let itemClass: String
    let id: Int64
    let attributes: [String: String]
    subscript(_ name: String) -> String? { attributes[name] }
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

/// A sandbox with an initialised vault, `setup` run before the mount (CLI item adds), the
/// vault mounted and the mount asserted live; `body` runs; teardown always runs.
func withMount(_ label: String = #function, foreground: Bool = false,
               setup: (FSSandbox) throws -> Void = { _ in },
               sourceLocation: SourceLocation = #_sourceLocation,
               _ body: (FSSandbox) throws -> Void) throws {
    _ = try #require(fsBinary, "keychainfs binary not found next to the test bundle; set KEYCHAINFS_BIN",
                     sourceLocation: sourceLocation)
    let box = try FSSandbox(label)
    defer { box.teardown() }
    try box.initVault(sourceLocation: sourceLocation)
    try setup(box)
    try box.mount(foreground: foreground, sourceLocation: sourceLocation)
    try body(box)
}

/// A sandbox with an initialised vault and no mount (for tests that drive mount themselves).
func withSandbox(_ label: String = #function, sourceLocation: SourceLocation = #_sourceLocation,
                 _ body: (FSSandbox) throws -> Void) throws {
    _ = try #require(fsBinary, "keychainfs binary not found next to the test bundle; set KEYCHAINFS_BIN",
                     sourceLocation: sourceLocation)
    let box = try FSSandbox(label)
    defer { box.teardown() }
    try box.initVault(sourceLocation: sourceLocation)
    try body(box)
}

// MARK: - Python helpers

/// Functions every python script gets:
///   t(label, fn, *args): runs fn; prints "label OK[ value]" or "label ERRNAME".
///   getx_probe(path, name, size) / listx_probe(path, size): raw getxattr/listxattr via ctypes.
///   renameat2(old, new, flags)
let pythonPrelude = """
import os, sys, errno, ctypes, json, signal, time
libc = ctypes.CDLL(None, use_errno=True)
def en(e):
    n = errno.errorcode.get(e, str(e))
    return 'EOPNOTSUPP' if n == 'ENOTSUP' else n
def show(v):
    if v is None: return ''
    if isinstance(v, bytes): return v.hex() if len(v) <= 512 else 'bytes[%d]' % len(v)
    if isinstance(v, (list, tuple)): return ','.join(sorted(str(x) for x in v))
    return str(v)
def t(label, fn, *a):
    try:
        v = fn(*a)
        print(label, ('OK ' + show(v)).rstrip(), flush=True)
    except OSError as e:
        print(label, en(e.errno), flush=True)
def cerr(r):
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r
def getx_probe(path, name, size):
    buf = ctypes.create_string_buffer(size) if size else None
    return cerr(libc.getxattr(os.fsencode(path), name.encode(), buf, ctypes.c_size_t(size)))
def listx_probe(path, size):
    buf = ctypes.create_string_buffer(size) if size else None
    return cerr(libc.listxattr(os.fsencode(path), buf, ctypes.c_size_t(size)))
def renameat2(old, new, flags):
    return cerr(libc.renameat2(-100, os.fsencode(old), -100, os.fsencode(new), ctypes.c_uint(flags)))
def read(p):
    with open(p, 'rb') as f: return f.read()
def write(p, data, mode='wb'):
    with open(p, mode) as f: f.write(data)
def wfd(p, flags, data, off=None):
    fd = os.open(p, flags, 0o600)
    try:
        if off is None: os.write(fd, data)
        else: os.pwrite(fd, data, off)
    finally:
        os.close(fd)

"""

extension Array where Element == UInt8 {
    var hex: String { map { String(format: "%02x", $0) }.joined() }
}

extension String {
    var hexUTF8: String { Array(utf8).hex }
}
