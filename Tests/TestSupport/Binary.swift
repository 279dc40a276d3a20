import Foundation
import Testing

// The shared plumbing of every test target (issue 8, item 7): the binary under test, one
// posix_spawn runner, the mount table, a sandbox per test with `withMount`, the python prelude.

/// The `keychainfs` executable under test: `$KEYCHAINFS_BIN`, else the file `keychainfs` next
/// to the running test bundle (SwiftPM puts both in the same products directory) or a few
/// directories above it.
public let keychainfsBinary: String? = {
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
        for _ in 0..<6 {
            let candidate = dir.appendingPathComponent("keychainfs").path
            if isBinary(candidate) { return candidate }
            dir = dir.deletingLastPathComponent()
        }
    }
    return nil
}()

/// The directory holding `keychainfs` and the credential helpers (built beside it).
public let productsDirectory: String? = keychainfsBinary.map { ($0 as NSString).deletingLastPathComponent }

/// A helper executable built beside `keychainfs` (`git-credential-keychainfs`, …).
@discardableResult
public func helperBinary(_ name: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> String {
    let dir = try #require(
        productsDirectory, "keychainfs binary not found; set KEYCHAINFS_BIN", sourceLocation: sourceLocation)
    let path = dir + "/" + name
    try #require(
        FileManager.default.isExecutableFile(atPath: path), "\(path) is not built", sourceLocation: sourceLocation)
    return path
}

/// The binary, or a failed requirement that says how to point the tests at it.
@discardableResult
public func requireBinary(sourceLocation: SourceLocation = #_sourceLocation) throws -> String {
    try #require(
        keychainfsBinary, "keychainfs binary not found next to the test bundle; set KEYCHAINFS_BIN",
        sourceLocation: sourceLocation)
}

/// A failure of the harness itself (not of the code under test).
public struct HarnessError: Error, CustomStringConvertible {
    public let description: String
    public init(_ d: String) { description = d }
}

/// The text of the current `errno`.
func errnoText(_ code: Int32 = errno) -> String { String(cString: strerror(code)) }

/// A new private directory `/tmp/<prefix>-XXXXXX` (mode 0700).
public func makeTempDirectory(_ prefix: String) throws -> String {
    var template = Array("/tmp/\(prefix)-XXXXXX".utf8CString)
    guard let made = mkdtemp(&template) else { throw HarnessError("mkdtemp: \(errnoText())") }
    return String(cString: made)
}

/// A private temp directory for `body`, removed afterwards whatever happens.
public func withTempDirectory<R>(_ prefix: String = "keychainfs-test", _ body: (String) throws -> R) throws -> R {
    let dir = try makeTempDirectory(prefix)
    defer { try? FileManager.default.removeItem(atPath: dir) }
    return try body(dir)
}

/// Polls `condition` every 20 ms for up to `seconds`; true if it became true.
@discardableResult
public func waitUntil(_ seconds: Double, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while true {
        if condition() { return true }
        if Date() >= deadline { return false }
        usleep(20_000)
    }
}

/// Single-quotes a string for /bin/sh.
public func q(_ s: String) -> String { "'" + s.replacingOccurrences(of: "'", with: "'\\''") + "'" }
