import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Everything one test needs, in a private temp directory whose name contains
/// "keychainfs-test": its own HOME / XDG_STATE_HOME / XDG_DATA_HOME (so the daemon log and the
/// audit log land inside it), a vault path and passphrase file, a mountpoint, a work directory
/// (`w`, where `sh` runs), and helpers to run the CLI, shell one-liners and python. `teardown`
/// ALWAYS lazy-unmounts and ends whatever this sandbox started. All I/O on a mount happens in
/// child processes with deadlines, so a wedged daemon can fail a test but never hang the runner.
open class TestSandbox: @unchecked Sendable {
    // @unchecked: the mutable state below is guarded by `lock`.
    public let root: String
    /// The basename of `root`: unique, so it can name sockets (tmux) too.
    public let name: String
    public let home: String
    public let stateHome: String
    public let dataHome: String
    public let vault: String
    public let passphrase: String
    public let passphraseFile: String
    public let mnt: String
    /// Where `sh` runs and tests make their files.
    public let w: String
    public let io: String

    private let lock = NSLock()
    private var foreground: Spawned?
    /// Every process started here, so that teardown can end any a failed test left running.
    private var spawned: [Spawned] = []
    private var earlyCleanups: [String: () -> Void] = [:]
    private var cleanups: [() -> Void] = []
    private var tornDown = false

    public init(_ label: String = "sandbox") throws {
        let safe = String(label.map { $0.isLetter || $0.isNumber ? $0 : "-" }.prefix(40))
        root = try makeTempDirectory("keychainfs-test-\(safe)")
        name = (root as NSString).lastPathComponent
        home = root + "/home"
        stateHome = root + "/state"
        dataHome = root + "/data"
        vault = root + "/test.vault"
        passphraseFile = root + "/passphrase"
        mnt = root + "/mnt"
        w = root + "/w"
        io = root + "/io"
        for dir in [home, stateHome, dataHome, mnt, w, io] {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        }
        passphrase = "pass-" + UUID().uuidString
        try Data((passphrase + "\n").utf8).write(to: URL(fileURLWithPath: passphraseFile))
    }

    deinit {
        if !lock.withLock({ tornDown }) && !MountInfo.isKeychainMount(mnt) {
            try? FileManager.default.removeItem(atPath: root)
        }
    }

    public var logPath: String { stateHome + "/keychainfs/daemon.log" }
    public var daemonLog: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }
    public var log: String { daemonLog }
    public var auditPath: String { stateHome + "/keychainfs/audit.log" }
    /// The audit log as the user reads it after `keychainfs status MNT` (the mount daemon
    /// buffers its lines for up to a second; `status` writes them out before it answers).
    public var audit: String {
        if MountInfo.isKeychainMount(mnt) { _ = try? cli(["status", mnt], timeout: 10) }
        return (try? String(contentsOfFile: auditPath, encoding: .utf8)) ?? ""
    }
    /// `--vault VAULT --passphrase-file FILE`
    public var unlockArgs: [String] { ["--vault", vault, "--passphrase-file", passphraseFile] }

    /// The environment every child gets: `childEnvironment` with this sandbox's HOME and XDG
    /// directories, plus `overrides` (a nil value removes a variable).
    public func environment(_ overrides: [String: String?] = [:]) -> [String: String] {
        let own: [String: String?] = ["HOME": home, "XDG_STATE_HOME": stateHome, "XDG_DATA_HOME": dataHome]
        return childEnvironment(own.merging(overrides) { _, new in new })
    }

    /// Registers something teardown must undo (users, /etc/fuse.conf, …), run last-in
    /// first-out after the unmount. With a `key`, once per key and before the unmount
    /// (servers whose clients hold files on the mount).
    public func onTeardown(beforeUnmount key: String? = nil, _ body: @escaping () -> Void) {
        lock.withLock {
            if let key { earlyCleanups[key] = earlyCleanups[key] ?? body } else { cleanups.append(body) }
        }
    }

    // MARK: Processes

    /// Starts `executable args` in this sandbox's environment, not waiting.
    public func spawn(
        _ executable: String, _ args: [String], stdin: [UInt8]? = nil,
        extraDescriptors: [Int32: [UInt8]] = [:], env overrides: [String: String?] = [:],
        cwd: String? = nil
    ) throws -> Spawned {
        let child = try spawnProcess(
            executable, args, stdin: stdin, extraDescriptors: extraDescriptors,
            env: environment(overrides), cwd: cwd, ioDirectory: io)
        lock.withLock { spawned.append(child) }
        return child
    }

    /// Runs a command to completion, or until `timeout` (then status 124, `timedOut`).
    public func run(
        _ executable: String, _ args: [String], stdin: [UInt8]? = nil,
        extraDescriptors: [Int32: [UInt8]] = [:], env overrides: [String: String?] = [:],
        cwd: String? = nil, timeout: Double = 30
    ) throws -> RunResult {
        try spawn(executable, args, stdin: stdin, extraDescriptors: extraDescriptors, env: overrides, cwd: cwd)
            .wait(timeout: timeout)
    }

    /// `keychainfs args`.
    @discardableResult
    public func cli(_ args: [String], stdin: [UInt8]? = nil, timeout: Double = 30) throws -> RunResult {
        guard let bin = keychainfsBinary else { throw HarnessError("keychainfs binary not found; set KEYCHAINFS_BIN") }
        return try run(bin, args, stdin: stdin, timeout: timeout)
    }

    /// `/bin/sh -c script` in `cwd` (default: the work directory `w`).
    @discardableResult
    public func sh(_ script: String, stdin: [UInt8]? = nil, timeout: Double = 30, cwd: String? = nil) throws
        -> RunResult
    {
        try run("/bin/sh", ["-c", script], stdin: stdin, cwd: cwd ?? w, timeout: timeout)
    }

    /// `python3 -c pythonPrelude+script args`.
    public func py(_ script: String, _ args: [String] = [], timeout: Double = 20) throws -> RunResult {
        try run("/usr/bin/python3", ["-c", pythonPrelude + script] + args, timeout: timeout)
    }

    /// Runs a python script whose lines are `label result` and returns them as a dictionary.
    public func pyResults(
        _ script: String, _ args: [String] = [], timeout: Double = 20,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> [String: String] {
        let r = try py(script, args, timeout: timeout)
        #expect(r.status == 0, "python failed: \(r.summary)", sourceLocation: sourceLocation)
        return labelled(r)
    }

    // MARK: Vault and items

    /// `init --kdf interactive` on the sandbox vault.
    open func initVault(sourceLocation: SourceLocation = #_sourceLocation) throws {
        let r = try cli(["init", "--kdf", "interactive"] + unlockArgs)
        try #require(r.status == 0, "init failed: \(r.summary)", sourceLocation: sourceLocation)
    }

    /// add-generic-password with the secret on stdin.
    public func addGeneric(
        _ service: String, _ account: String?, _ secret: [UInt8], extra: [String] = [],
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        var args = ["add-generic-password"] + unlockArgs + ["-s", service]
        if let account { args += ["-a", account] }
        let r = try cli(args + extra, stdin: secret)
        try #require(r.status == 0, "add-generic-password failed: \(r.summary)", sourceLocation: sourceLocation)
    }

    public func addGeneric(
        _ service: String, _ account: String?, _ secret: String, extra: [String] = [],
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        try addGeneric(service, account, Array(secret.utf8), extra: extra, sourceLocation: sourceLocation)
    }

    /// Many generic passwords at once, by one `import-csv generic` run (one KDF, one durable
    /// transaction): each row's service, account and secret. The values are written
    /// into the CSV as they are, so none may hold a comma, a quote or a line break.
    public func importGeneric(
        _ rows: [(service: String, account: String, secret: String)], sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        var csv = "title,account,password\n"
        for row in rows {
            for value in [row.service, row.account, row.secret] {
                try #require(
                    !value.contains(where: { ",\"\n\r".contains($0) }), "needs CSV quoting: \(value)",
                    sourceLocation: sourceLocation)
            }
            csv += "\(row.service),\(row.account),\(row.secret)\n"
        }
        let file = w + "/items.csv"
        try csv.write(toFile: file, atomically: true, encoding: .utf8)
        let r = try cli(
            ["import-csv", "generic", file, "--columns", "title=title,account=account,password=password"] + unlockArgs,
            timeout: 300)
        try #require(r.status == 0, "import-csv failed: \(r.summary)", sourceLocation: sourceLocation)
    }

    // MARK: Mounting

    /// The `-f` daemon of `mount(foreground: true)`, if it runs.
    public var foregroundDaemon: Spawned? { lock.withLock { foreground } }

    /// `keychainfs mount` (it returns once the mount is live, stdout clean) or a foreground
    /// `-f` child, with `-o option` each and `extra` arguments; then requires the mount in
    /// /proc/self/mountinfo.
    public func mount(
        _ options: [String] = [], foreground: Bool = false, extra: [String] = [],
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        guard let bin = keychainfsBinary else { throw HarnessError("keychainfs binary not found; set KEYCHAINFS_BIN") }
        let args = ["mount", vault, mnt, "--passphrase-file", passphraseFile] + options.flatMap { ["-o", $0] } + extra
        if foreground {
            let s = try spawn(bin, args + ["-f"])
            lock.withLock { self.foreground = s }
            let live = waitUntil(10) { self.isMounted || !s.isRunning }
            if !isMounted {
                let r = s.isRunning ? nil : s.wait(timeout: 1)
                Issue.record(
                    "foreground mount not live (waited \(live)): \(r?.summary ?? "still running")",
                    sourceLocation: sourceLocation)
            }
        } else {
            let r = try cli(args, timeout: 20)
            #expect(
                r.status == 0, "mount failed: \(r.summary)\nlog: \(daemonLog.suffix(1500))",
                sourceLocation: sourceLocation)
            #expect(r.stdout.isEmpty, "mount printed on stdout: \(r.stdout)", sourceLocation: sourceLocation)
        }
        try #require(
            isMounted, "no fuse.keychainfs mount on \(mnt) in /proc/self/mountinfo", sourceLocation: sourceLocation)
    }

    public var isMounted: Bool { MountInfo.isKeychainMount(mnt) }

    /// `keychainfs unmount`, then waits for the daemon to end (the next mount must not find
    /// the vault lock held).
    public func unmount(sourceLocation: SourceLocation = #_sourceLocation) throws {
        let r = try cli(["unmount", mnt], timeout: 15)
        #expect(r.status == 0, "unmount failed: \(r.summary)", sourceLocation: sourceLocation)
        if !waitUntil(5, { !isMounted }) { lazyUnmount() }
        _ = waitUntil(5) { self.daemons().isEmpty }
    }

    private func lazyUnmount() {
        _ = try? run("/usr/bin/fusermount3", ["-u", "-z", mnt], timeout: 10)
    }

    /// The pid of the daemon holding the vault file's flock (from /proc/locks).
    public var daemonPid: pid_t? {
        var st = stat()
        guard stat(vault, &st) == 0, let table = try? String(contentsOfFile: "/proc/locks", encoding: .utf8) else {
            return nil
        }
        for line in table.split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard fields.count >= 6, fields[1] == "FLOCK", let inode = fields[5].split(separator: ":").last,
                UInt64(inode) == UInt64(st.st_ino), let pid = pid_t(fields[4]), pid > 0
            else { continue }
            return pid
        }
        return nil
    }

    /// Sends `signal` to the daemon and, for SIGKILL, waits until it is gone.
    @discardableResult
    public func signalDaemon(_ signal: Int32, sourceLocation: SourceLocation = #_sourceLocation) throws -> pid_t {
        let pid = try #require(foregroundDaemon?.pid ?? daemonPid, "no daemon pid", sourceLocation: sourceLocation)
        #expect(kill(pid, signal) == 0, "kill \(pid): \(errnoText())", sourceLocation: sourceLocation)
        if signal == SIGKILL {
            let gone = waitUntil(5) { !Self.isAlive(pid) }
            #expect(gone, "daemon \(pid) survived SIGKILL", sourceLocation: sourceLocation)
            if let fg = foregroundDaemon, fg.pid == pid {
                _ = fg.wait(timeout: 2)
                lock.withLock { foreground = nil }
            }
        }
        return pid
    }

    // MARK: Processes of this sandbox

    static func cmdline(_ pid: pid_t) -> [String] {
        guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline"), !data.isEmpty else { return [] }
        return data.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
    }

    static func allPids() -> [pid_t] {
        ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap { pid_t($0) }.filter {
            $0 != getpid()
        }
    }

    public static func parent(of pid: pid_t) -> pid_t? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("PPid:") })
        else { return nil }
        return pid_t(line.dropFirst(5).trimmingCharacters(in: .whitespaces))
    }

    /// Alive and not a zombie.
    public static func isAlive(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return false }
        let state = stat[stat.index(close, offsetBy: 2)]
        return state != "Z" && state != "X"
    }

    public func isAlive(_ pid: pid_t) -> Bool { Self.isAlive(pid) }

    /// Our keychainfs daemons: the binary, with a command line naming this sandbox.
    public func daemons() -> [pid_t] {
        Self.allPids().filter { pid in
            let args = Self.cmdline(pid)
            return (args.first?.hasSuffix("keychainfs") ?? false) && args.contains { $0.contains(root) }
                && Self.isAlive(pid)
        }
    }

    /// Everything this sandbox started: command lines or executables naming it, and the
    /// children of its daemons (a pinentry the daemon spawned names no path of ours).
    public func ownProcesses() -> [pid_t] {
        let ds = Set(daemons())
        return Self.allPids().filter { pid in
            guard Self.isAlive(pid) else { return false }
            if ds.contains(pid) { return true }
            if let p = Self.parent(of: pid), ds.contains(p) { return true }
            if Self.cmdline(pid).contains(where: { $0.contains(root) || $0.contains(name) }) { return true }
            if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe"),
                exe.hasPrefix(root)
            {
                return true
            }
            return false
        }
    }

    /// Always safe, idempotent: lazy-unmounts, ends everything this sandbox started, undoes
    /// registered system changes, removes the directory (unless a mount still sits in it).
    public func teardown() {
        let (early, late) = lock.withLock { () -> ([() -> Void], [() -> Void]) in
            tornDown = true
            defer { earlyCleanups = [:]; cleanups = [] }
            return (Array(earlyCleanups.values), cleanups.reversed())
        }
        for body in early { body() }
        // Children of the daemons first (a pinentry), then the mount, then the rest.
        let ds = Set(daemons())
        for pid in Self.allPids() where Self.parent(of: pid).map({ ds.contains($0) }) ?? false { kill(pid, SIGKILL) }
        lazyUnmount()
        if let fg = foregroundDaemon {
            _ = fg.wait(timeout: 5)
            lock.withLock { foreground = nil }
        }
        // Children a failed test did not wait for (a writer, a hung command): end and reap them.
        for child in lock.withLock({ spawned }) where child.isRunning {
            child.kill(SIGKILL)
            _ = child.wait(timeout: 5)
        }
        var procs = ownProcesses()
        if !procs.isEmpty {
            for pid in procs { kill(pid, SIGTERM) }
            _ = waitUntil(3) { self.ownProcesses().isEmpty }
            procs = ownProcesses()
            for pid in procs { kill(pid, SIGKILL) }
            _ = waitUntil(3) { self.ownProcesses().isEmpty }
        }
        if isMounted { lazyUnmount() }
        for body in late { body() }
        if !isMounted { try? FileManager.default.removeItem(atPath: root) }
    }
}

/// A sandbox with an initialised vault, `setup` run before the mount (CLI item adds), the
/// vault mounted (`-o` each of `options`, or in the foreground) and the mount asserted live
/// before `body` runs; teardown (unmount, daemons ended) always runs.
public func withMount(
    _ label: String = #function, options: [String] = [], foreground: Bool = false,
    setup: (TestSandbox) throws -> Void = { _ in },
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: (TestSandbox) throws -> Void
) throws {
    try withSandbox(label, sourceLocation: sourceLocation) { box in
        try setup(box)
        try box.mount(options, foreground: foreground, sourceLocation: sourceLocation)
        try body(box)
    }
}

/// A sandbox with an initialised vault and no mount (for tests that drive mount themselves).
public func withSandbox(
    _ label: String = #function, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: (TestSandbox) throws -> Void
) throws {
    try requireBinary(sourceLocation: sourceLocation)
    let box = try TestSandbox(label)
    defer { box.teardown() }
    try box.initVault(sourceLocation: sourceLocation)
    try body(box)
}
