import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

// MARK: - Locating the binary

/// The `keychainfs` executable under test: `$KEYCHAINFS_BIN`, else the file `keychainfs`
/// next to the running test bundle (SwiftPM puts both in the same products directory).
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
    if let exe = Bundle.main.executableURL { starts.append(exe.resolvingSymlinksInPath()) }
    starts.append(Bundle.main.bundleURL.resolvingSymlinksInPath())
    if let me = try? fm.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
        starts.append(URL(fileURLWithPath: me))
    }
    for start in starts {
        // Walk up from the test binary / bundle to the build products directory.
        var dir = start.deletingLastPathComponent()
        for _ in 0..<5 {
            let candidate = dir.appendingPathComponent("keychainfs").path
            if isBinary(candidate) { return candidate }
            dir = dir.deletingLastPathComponent()
        }
    }
    return nil
}()

func requireBinary(sourceLocation: SourceLocation = #_sourceLocation) throws -> String {
    try #require(keychainfsBinary, "keychainfs binary not found next to the test bundle; set KEYCHAINFS_BIN",
                 sourceLocation: sourceLocation)
}

// MARK: - Running it

struct CLIResult: Sendable {
    var status: Int32
    var stdout: [UInt8]
    var stderrBytes: [UInt8]
    var stderr: String { String(decoding: stderrBytes, as: UTF8.self) }
    var stdoutString: String { String(decoding: stdout, as: UTF8.self) }
    var stderrLines: [Substring] { stderr.split(separator: "\n", omittingEmptySubsequences: false).dropLast(stderr.hasSuffix("\n") ? 1 : 0).map { $0 } }
}

struct HarnessError: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

/// Serialises descriptor creation and spawning within this test process, so that no child
/// inherits another test's pipe (an inherited stdin write end would keep a sibling waiting
/// for EOF forever). Every descriptor we make is close-on-exec as well.
let spawnLock = NSLock()

/// A writer to a pipe whose reader has exited must get EPIPE, not kill the test runner.
let ignoreSIGPIPE: Void = { _ = signal(SIGPIPE, SIG_IGN) }()

private func cloexecPipe() throws -> (read: Int32, write: Int32) {
    var fds: [Int32] = [-1, -1]
    guard pipe(&fds) == 0 else { throw HarnessError("pipe: \(String(cString: strerror(errno)))") }
    _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
    _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
    return (fds[0], fds[1])
}

/// The environment for a child: the parent's, minus anything that could point it at a real
/// vault or real XDG directories, plus `overrides` (a nil value removes the variable).
func childEnvironment(_ overrides: [String: String?]) -> [String: String] {
    var env = ProcessInfo.processInfo.environment.filter { key, _ in
        key != "KEYCHAINFS_VAULT" && !key.hasPrefix("XDG_")
    }
    for (k, v) in overrides {
        if let v { env[k] = v } else { env.removeValue(forKey: k) }
    }
    return env
}

/// Runs `keychainfs args` with `stdin` on a pipe (nil: /dev/null) and `env` as its whole
/// environment; returns exit status (128+signal if killed), stdout bytes and stderr.
func runCLI(_ args: [String], stdin: [UInt8]? = nil, env: [String: String]) throws -> CLIResult {
    _ = ignoreSIGPIPE
    guard let binary = keychainfsBinary else { throw HarnessError("keychainfs binary not found") }

    let process = Process()
    process.executableURL = URL(fileURLWithPath: binary)
    process.arguments = args
    process.environment = env
    let exited = DispatchSemaphore(value: 0)
    process.terminationHandler = { _ in exited.signal() }

    var inWrite: Int32 = -1
    let outRead: Int32, errRead: Int32
    do {
        spawnLock.lock()
        defer { spawnLock.unlock() }
        let outPipe = try cloexecPipe()
        let errPipe = try cloexecPipe()
        var childEnds = [outPipe.write, errPipe.write]
        if let _ = stdin {
            let inPipe = try cloexecPipe()
            inWrite = inPipe.write
            childEnds.append(inPipe.read)
            process.standardInput = FileHandle(fileDescriptor: inPipe.read, closeOnDealloc: false)
        } else {
            process.standardInput = FileHandle.nullDevice
        }
        process.standardOutput = FileHandle(fileDescriptor: outPipe.write, closeOnDealloc: false)
        process.standardError = FileHandle(fileDescriptor: errPipe.write, closeOnDealloc: false)
        outRead = outPipe.read
        errRead = errPipe.read
        do {
            try process.run()
        } catch {
            for fd in childEnds + [outRead, errRead, inWrite] where fd >= 0 { close(fd) }
            throw error
        }
        for fd in childEnds { close(fd) }
    }

    // Pump stdin, stdout and stderr together so that neither side can fill a pipe and stall.
    var out = [UInt8](), err = [UInt8]()
    let input = stdin ?? []
    var offset = 0
    if inWrite >= 0 {
        if input.isEmpty { close(inWrite); inWrite = -1 }
        else { _ = fcntl(inWrite, F_SETFL, fcntl(inWrite, F_GETFL) | O_NONBLOCK) }
    }
    var outOpen = true, errOpen = true
    var buffer = [UInt8](repeating: 0, count: 65536)
    while outOpen || errOpen || inWrite >= 0 {
        var fds: [pollfd] = []
        if inWrite >= 0 { fds.append(pollfd(fd: inWrite, events: Int16(POLLOUT), revents: 0)) }
        if outOpen { fds.append(pollfd(fd: outRead, events: Int16(POLLIN), revents: 0)) }
        if errOpen { fds.append(pollfd(fd: errRead, events: Int16(POLLIN), revents: 0)) }
        let n = poll(&fds, nfds_t(fds.count), -1)
        if n < 0 {
            if errno == EINTR { continue }
            throw HarnessError("poll: \(String(cString: strerror(errno)))")
        }
        for p in fds where p.revents != 0 {
            if p.fd == inWrite {
                let w = input.withUnsafeBytes { write(inWrite, $0.baseAddress! + offset, min($0.count - offset, 65536)) }
                if w > 0 {
                    offset += w
                    if offset == input.count { close(inWrite); inWrite = -1 }
                } else if w < 0 && (errno == EAGAIN || errno == EINTR) {
                    continue
                } else {
                    // EPIPE: the child exited or closed stdin without reading it all.
                    close(inWrite); inWrite = -1
                }
            } else {
                let r = buffer.withUnsafeMutableBytes { read(p.fd, $0.baseAddress, $0.count) }
                if r > 0 {
                    if p.fd == outRead { out.append(contentsOf: buffer[0..<r]) } else { err.append(contentsOf: buffer[0..<r]) }
                } else if r < 0 && (errno == EAGAIN || errno == EINTR) {
                    continue
                } else {
                    close(p.fd)
                    if p.fd == outRead { outOpen = false } else { errOpen = false }
                }
            }
        }
    }
    exited.wait()
    let status = process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
    return CLIResult(status: status, stdout: out, stderrBytes: err)
}

/// Runs `keychainfs args` via posix_spawn in a new session (so without a controlling
/// terminal: it can never prompt), with `stdin` from a file and, if given, `extraFD`
/// contents readable on descriptor `targetFD` (e.g. 3, for `--passphrase-fd 3`).
/// Foundation.Process closes every descriptor above 2 in the child and cannot setsid,
/// so this needs posix_spawn file actions and flags.
func runCLISpawned(_ args: [String], stdin: [UInt8], extraFD contents: [UInt8]?, as targetFD: Int32 = 3,
                   env: [String: String], scratchDir: String) throws -> CLIResult {
    guard let binary = keychainfsBinary else { throw HarnessError("keychainfs binary not found") }
    let tag = UUID().uuidString
    func makeFile(_ name: String, _ bytes: [UInt8]?) throws -> Int32 {
        let path = scratchDir + "/\(name)-\(tag)"
        let fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw HarnessError("open \(path): \(String(cString: strerror(errno)))") }
        unlink(path)
        if let bytes, !bytes.isEmpty {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard n == bytes.count else { close(fd); throw HarnessError("short write to \(path)") }
        }
        _ = lseek(fd, 0, SEEK_SET)
        // Keep the source descriptors away from 0...targetFD so dup2 always really dups
        // (dup2(fd, fd) would leave close-on-exec set).
        let high = fcntl(fd, F_DUPFD_CLOEXEC, 20)
        close(fd)
        guard high >= 0 else { throw HarnessError("F_DUPFD_CLOEXEC failed") }
        return high
    }

    spawnLock.lock()
    let inFD: Int32, outFD: Int32, errFD: Int32, extra: Int32
    var pid = pid_t()
    do {
        defer { spawnLock.unlock() }
        inFD = try makeFile("stdin", stdin)
        outFD = try makeFile("stdout", nil)
        errFD = try makeFile("stderr", nil)
        extra = contents == nil ? -1 : try makeFile("fd\(targetFD)", contents)

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, inFD, 0)
        posix_spawn_file_actions_adddup2(&actions, outFD, 1)
        posix_spawn_file_actions_adddup2(&actions, errFD, 2)
        if extra >= 0 { posix_spawn_file_actions_adddup2(&actions, extra, targetFD) }
        // Nothing else of the test process leaks in (glibc ignores closing a descriptor
        // that is not open).
        for fd in Int32(3)..<256 where !(extra >= 0 && fd == targetFD) {
            posix_spawn_file_actions_addclose(&actions, fd)
        }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGPIPE)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        // POSIX_SPAWN_SETSID (0x80, glibc ≥ 2.26): a new session has no controlling terminal.
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF) | 0x80)

        let argv: [UnsafeMutablePointer<CChar>?] = ([binary] + args).map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for p in argv + envp { free(p) } }
        let rc = posix_spawn(&pid, binary, &actions, &attributes, argv, envp)
        if rc != 0 {
            for fd in [inFD, outFD, errFD, extra] where fd >= 0 { close(fd) }
            throw HarnessError("posix_spawn: \(String(cString: strerror(rc)))")
        }
    }
    var raw: Int32 = 0
    while waitpid(pid, &raw, 0) < 0 {
        guard errno == EINTR else { throw HarnessError("waitpid: \(String(cString: strerror(errno)))") }
    }
    func readBack(_ fd: Int32) -> [UInt8] {
        _ = lseek(fd, 0, SEEK_SET)
        var all = [UInt8](), chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            all.append(contentsOf: chunk[0..<n])
        }
        close(fd)
        return all
    }
    close(inFD)
    if extra >= 0 { close(extra) }
    let out = readBack(outFD), err = readBack(errFD)
    let signalled = (raw & 0x7f) != 0
    let status = signalled ? 128 + (raw & 0x7f) : (raw >> 8) & 0xff
    return CLIResult(status: status, stdout: out, stderrBytes: err)
}

// MARK: - A sandbox per test

/// Byte-sequence search (memchr + memcmp): binary-safe and fast enough for megabyte outputs.
func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
    guard !needle.isEmpty, haystack.count >= needle.count else { return false }
    return haystack.withUnsafeBytes { h in
        needle.withUnsafeBytes { n in
            let base = h.baseAddress!
            let first = Int32(needle[0])
            var i = 0
            let lastStart = h.count - n.count
            while i <= lastStart {
                guard let hit = memchr(base + i, first, lastStart - i + 1) else { return false }
                let at = base.distance(to: UnsafeRawPointer(hit))
                if memcmp(base + at, n.baseAddress!, n.count) == 0 { return true }
                i = at + 1
            }
            return false
        }
    }
}

func randomToken(_ prefix: String) -> String {
    let chars = Array("abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789")
    return prefix + String((0..<20).map { _ in chars.randomElement()! })
}

/// A private HOME / XDG_DATA_HOME / XDG_STATE_HOME, a vault path and a passphrase for one
/// test. Every command run through it is checked for secret leaks: no registered secret
/// may appear on stdout or stderr, except an item secret on the stream where the command
/// is meant to print it (`find-… -w` stdout, `find-… -g` stderr, `dump-keychain -d` stdout).
/// Passphrases may appear nowhere.
final class Sandbox: @unchecked Sendable {
    let root: String
    let home: String
    let dataHome: String
    let stateHome: String
    let vault: String
    let passphrase: String
    let passphraseFile: String

    private let lock = NSLock()
    private var itemNeedles: [[UInt8]] = []
    private var passphraseNeedles: [[UInt8]] = []
    private(set) var commandsRun = 0

    init() throws {
        var template = Array((NSTemporaryDirectory() + "/keychainfs-cli-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw HarnessError("mkdtemp failed") }
        root = String(cString: made)
        home = root + "/home"
        dataHome = root + "/data"
        stateHome = root + "/state"
        for dir in [home, dataHome, stateHome] {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        }
        vault = root + "/test.vault"
        passphrase = randomToken("pass-")
        passphraseFile = root + "/passphrase"
        try writeFile(passphraseFile, Array((passphrase + "\n").utf8))
        registerPassphrase(passphrase)
    }

    deinit { try? FileManager.default.removeItem(atPath: root) }

    /// The environment every command gets (plus per-call overrides).
    var baseOverrides: [String: String?] {
        ["HOME": home, "XDG_DATA_HOME": dataHome, "XDG_STATE_HOME": stateHome]
    }

    func environment(_ overrides: [String: String?] = [:]) -> [String: String] {
        childEnvironment(baseOverrides.merging(overrides) { _, new in new })
    }

    /// `--vault <vault> --passphrase-file <file>`
    var unlock: [String] { ["--vault", vault, "--passphrase-file", passphraseFile] }

    func writeFile(_ path: String, _ bytes: [UInt8]) throws {
        try Data(bytes).write(to: URL(fileURLWithPath: path))
    }

    /// Writes a passphrase file (with a trailing newline, as editors do) and registers it.
    func passphraseFile(named name: String, _ value: String) throws -> String {
        let path = root + "/" + name
        try writeFile(path, Array((value + "\n").utf8))
        registerPassphrase(value)
        return path
    }

    func registerSecret(_ secret: [UInt8]) {
        lock.withLock { itemNeedles += Self.needles(for: secret) }
    }

    func registerPassphrase(_ value: String) {
        lock.withLock { passphraseNeedles += Self.needles(for: Array(value.utf8)) }
    }

    /// What a leak of `secret` could look like: the bytes themselves, their base64 (the
    /// JSON dump's form for binary data), and any long stretch between NULs or newlines
    /// (a partial or escaped print).
    static func needles(for secret: [UInt8]) -> [[UInt8]] {
        var out: [[UInt8]] = [secret]
        if String(validating: secret, as: UTF8.self) == nil {
            out.append(Array(Data(secret).base64EncodedString().utf8))
        }
        let pieces = secret.split(whereSeparator: { $0 == 0 || $0 == 10 || $0 == 13 }).filter { $0.count >= 8 }
        if pieces.count > 1 || pieces.first.map({ $0.count != secret.count }) == true {
            out += pieces.prefix(16).map { Array($0) }
        }
        return out.filter { $0.count >= 8 }
    }

    /// Runs a command in this sandbox and checks it for leaks.
    @discardableResult
    func run(_ args: [String], stdin: [UInt8]? = nil, env overrides: [String: String?] = [:],
             sourceLocation: SourceLocation = #_sourceLocation) throws -> CLIResult {
        let result = try runCLI(args, stdin: stdin, env: environment(overrides))
        checkLeaks(args, result, sourceLocation: sourceLocation)
        return result
    }

    /// Runs via posix_spawn in a new session (no controlling terminal), with `contents` on
    /// descriptor `fd` if given, checking for leaks.
    @discardableResult
    func runSpawned(_ args: [String], stdin: [UInt8] = [], extraFD contents: [UInt8]? = nil, as fd: Int32 = 3,
                    sourceLocation: SourceLocation = #_sourceLocation) throws -> CLIResult {
        let result = try runCLISpawned(args, stdin: stdin, extraFD: contents, as: fd, env: environment(), scratchDir: root)
        checkLeaks(args, result, sourceLocation: sourceLocation)
        return result
    }

    func checkLeaks(_ args: [String], _ result: CLIResult, sourceLocation: SourceLocation) {
        for leak in leaks(args, result) {
            Issue.record(Comment(rawValue: leak), sourceLocation: sourceLocation)
        }
    }

    /// Descriptions of every registered secret found where `args` must not print it.
    func leaks(_ args: [String], _ result: CLIResult) -> [String] {
        let command = args.first ?? ""
        let stdoutMayShowSecret = (command.hasPrefix("find-") && args.contains("-w"))
            || (command == "dump-keychain" && args.contains("-d"))
        let stderrMayShowSecret = command.hasPrefix("find-") && args.contains("-g")
        let (items, passphrases) = lock.withLock { () -> ([[UInt8]], [[UInt8]]) in
            commandsRun += 1
            return (itemNeedles, passphraseNeedles)
        }
        var found: [String] = []
        for (stream, bytes, allowed) in [("stdout", result.stdout, stdoutMayShowSecret),
                                         ("stderr", result.stderrBytes, stderrMayShowSecret)] {
            if passphrases.contains(where: { contains(bytes, $0) }) {
                found.append("a passphrase appeared on \(stream) of `keychainfs \(command)`")
            }
            if !allowed && items.contains(where: { contains(bytes, $0) }) {
                found.append("an item secret appeared on \(stream) of `keychainfs \(command)`")
            }
        }
        return found
    }

    /// `init --kdf interactive` on the sandbox vault; expects success.
    func initVault(sourceLocation: SourceLocation = #_sourceLocation) throws {
        let r = try run(["init", "--kdf", "interactive"] + unlock, sourceLocation: sourceLocation)
        #expect(r.status == 0, "init failed: \(r.stderr)", sourceLocation: sourceLocation)
    }

    /// Adds a generic password with the secret on stdin, registering the secret.
    @discardableResult
    func addGeneric(service: String, account: String? = nil, secret: [UInt8], extra: [String] = [],
                    sourceLocation: SourceLocation = #_sourceLocation) throws -> CLIResult {
        registerSecret(secret)
        var args = ["add-generic-password"] + unlock + ["-s", service]
        if let account { args += ["-a", account] }
        return try run(args + extra, stdin: secret, sourceLocation: sourceLocation)
    }

    /// `find-generic-password -w`: the stored secret (without find's trailing newline).
    func findGenericSecret(service: String, account: String? = nil,
                           sourceLocation: SourceLocation = #_sourceLocation) throws -> (CLIResult, [UInt8]?) {
        var args = ["find-generic-password"] + unlock + ["-s", service, "-w"]
        if let account { args += ["-a", account] }
        let r = try run(args, sourceLocation: sourceLocation)
        guard r.status == 0, r.stdout.last == 10 else { return (r, nil) }
        return (r, Array(r.stdout.dropLast()))
    }
}

// MARK: - Assertions

/// Exit status `code`, nothing on stdout, and exactly one stderr line starting
/// `keychainfs: error: ` (and containing each of `mentions`, case-insensitively).
func expectError(_ r: CLIResult, _ code: Int32, mentions: [String] = [],
                 sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(r.status == code, "exit status \(r.status), expected \(code); stderr: \(r.stderr)", sourceLocation: sourceLocation)
    #expect(r.stdout.isEmpty, "stdout should be empty on error, got \(r.stdoutString)", sourceLocation: sourceLocation)
    let lines = r.stderrLines
    #expect(lines.count == 1, "expected one stderr line, got \(lines.count): \(r.stderr)", sourceLocation: sourceLocation)
    #expect(r.stderr.hasPrefix("keychainfs: error: "), "stderr: \(r.stderr)", sourceLocation: sourceLocation)
    #expect(r.stderr.hasSuffix("\n"), "error line should end with a newline", sourceLocation: sourceLocation)
    for m in mentions {
        #expect(r.stderr.lowercased().contains(m.lowercased()), "stderr should mention '\(m)': \(r.stderr)", sourceLocation: sourceLocation)
    }
}

func expectSuccess(_ r: CLIResult, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(r.status == 0, "exit status \(r.status); stderr: \(r.stderr)", sourceLocation: sourceLocation)
    #expect(!r.stderr.contains("keychainfs: error:"), "stderr: \(r.stderr)", sourceLocation: sourceLocation)
}

func fileBytes(_ path: String) -> [UInt8]? {
    FileManager.default.contents(atPath: path).map { Array($0) }
}

func fileMode(_ path: String) -> UInt32? {
    var st = stat()
    guard stat(path, &st) == 0 else { return nil }
    return UInt32(st.st_mode) & 0o7777
}

/// Parses `dump-keychain --json` output.
func parseDump(_ r: CLIResult, sourceLocation: SourceLocation = #_sourceLocation) throws -> [[String: Any]] {
    let object = try JSONSerialization.jsonObject(with: Data(r.stdout))
    return try #require(object as? [[String: Any]], "dump --json is not an array of objects", sourceLocation: sourceLocation)
}
