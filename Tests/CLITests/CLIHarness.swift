import Foundation
import Testing
@_exported import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

// What the CLI tests add to TestSupport: results with stdout as bytes, and a sandbox that
// checks every command's output for leaked secrets.

// MARK: - Running it

struct CLIResult: Sendable {
    var status: Int32
    var stdout: [UInt8]
    var stderrBytes: [UInt8]
    var stderr: String { String(decoding: stderrBytes, as: UTF8.self) }
    var stdoutString: String { String(decoding: stdout, as: UTF8.self) }
    var stderrLines: [Substring] {
        stderr.split(separator: "\n", omittingEmptySubsequences: false).dropLast(stderr.hasSuffix("\n") ? 1 : 0).map {
            $0
        }
    }
}

extension CLIResult {
    init(_ r: RunResult) { self.init(status: r.status, stdout: r.stdoutBytes, stderrBytes: r.stderrBytes) }
}

/// Runs `keychainfs args` with `stdin` (nil: /dev/null) and `env` as its whole environment, in
/// a new session (no terminal to prompt on); exit status (128+signal if killed, 124 after two
/// minutes), stdout bytes and stderr.
func runCLI(_ args: [String], stdin: [UInt8]? = nil, env: [String: String]) throws -> CLIResult {
    guard let binary = keychainfsBinary else { throw HarnessError("keychainfs binary not found") }
    return CLIResult(try runProcess(binary, args, stdin: stdin, env: env, timeout: 120))
}

// MARK: - Output checks

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

/// A TestSandbox whose every command is checked for leaks: no registered secret may appear
/// on stdout or stderr, except an item secret on the stream where the command is meant to
/// print it (`find-… -w` stdout, `find-… -g` stderr, `dump-keychain -d` stdout). Passphrases
/// may appear nowhere.
final class Sandbox: TestSandbox, @unchecked Sendable {
    // @unchecked: the needles are guarded by `needleLock`.
    private let needleLock = NSLock()
    private var itemNeedles: [[UInt8]] = []
    private var passphraseNeedles: [[UInt8]] = []

    init() throws {
        try super.init("cli")
        registerPassphrase(passphrase)
    }

    /// `--vault <vault> --passphrase-file <file>`
    var unlock: [String] { unlockArgs }

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
        needleLock.withLock { itemNeedles += Self.needles(for: secret) }
    }

    func registerPassphrase(_ value: String) {
        needleLock.withLock { passphraseNeedles += Self.needles(for: Array(value.utf8)) }
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
    func run(
        _ args: [String], stdin: [UInt8]? = nil, env overrides: [String: String?] = [:],
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> CLIResult {
        let result = try runCLI(args, stdin: stdin, env: environment(overrides))
        checkLeaks(args, result, sourceLocation: sourceLocation)
        return result
    }

    /// Runs with `contents` readable on descriptor `fd` if given, checking for leaks.
    @discardableResult
    func runSpawned(
        _ args: [String], stdin: [UInt8] = [], extraFD contents: [UInt8]? = nil, as fd: Int32 = 3,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> CLIResult {
        let bin = try requireBinary(sourceLocation: sourceLocation)
        let result = CLIResult(
            try run(
                bin, args, stdin: stdin, extraDescriptors: contents.map { [fd: $0] } ?? [:],
                timeout: 120))
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
        let stdoutMayShowSecret =
            (command.hasPrefix("find-") && args.contains("-w"))
            || (command == "dump-keychain" && args.contains("-d"))
        let stderrMayShowSecret = command.hasPrefix("find-") && args.contains("-g")
        let (items, passphrases) = needleLock.withLock { (itemNeedles, passphraseNeedles) }
        var found: [String] = []
        for (stream, bytes, allowed) in [
            ("stdout", result.stdout, stdoutMayShowSecret),
            ("stderr", result.stderrBytes, stderrMayShowSecret),
        ] {
            if passphrases.contains(where: { contains(bytes, $0) }) {
                found.append("a passphrase appeared on \(stream) of `keychainfs \(command)`")
            }
            if !allowed && items.contains(where: { contains(bytes, $0) }) {
                found.append("an item secret appeared on \(stream) of `keychainfs \(command)`")
            }
        }
        return found
    }

    /// `init --kdf interactive` on the sandbox vault, leak-checked; expects success.
    override func initVault(sourceLocation: SourceLocation = #_sourceLocation) throws {
        let r = try run(["init", "--kdf", "interactive"] + unlock, sourceLocation: sourceLocation)
        #expect(r.status == 0, "init failed: \(r.stderr)", sourceLocation: sourceLocation)
    }

    /// Adds a generic password with the secret on stdin, registering the secret.
    @discardableResult
    func addGeneric(
        service: String, account: String? = nil, secret: [UInt8], extra: [String] = [],
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> CLIResult {
        registerSecret(secret)
        var args = ["add-generic-password"] + unlock + ["-s", service]
        if let account { args += ["-a", account] }
        return try run(args + extra, stdin: secret, sourceLocation: sourceLocation)
    }

    /// `find-generic-password -w`: the stored secret (without find's trailing newline).
    func findGenericSecret(
        service: String, account: String? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> (CLIResult, [UInt8]?) {
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
func expectError(
    _ r: CLIResult, _ code: Int32, mentions: [String] = [],
    sourceLocation: SourceLocation = #_sourceLocation
) {
    #expect(
        r.status == code, "exit status \(r.status), expected \(code); stderr: \(r.stderr)",
        sourceLocation: sourceLocation)
    #expect(r.stdout.isEmpty, "stdout should be empty on error, got \(r.stdoutString)", sourceLocation: sourceLocation)
    let lines = r.stderrLines
    #expect(
        lines.count == 1, "expected one stderr line, got \(lines.count): \(r.stderr)", sourceLocation: sourceLocation)
    #expect(r.stderr.hasPrefix("keychainfs: error: "), "stderr: \(r.stderr)", sourceLocation: sourceLocation)
    #expect(r.stderr.hasSuffix("\n"), "error line should end with a newline", sourceLocation: sourceLocation)
    for m in mentions {
        #expect(
            r.stderr.lowercased().contains(m.lowercased()), "stderr should mention '\(m)': \(r.stderr)",
            sourceLocation: sourceLocation)
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
    return try #require(
        object as? [[String: Any]], "dump --json is not an array of objects", sourceLocation: sourceLocation)
}
