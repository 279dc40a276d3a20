import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import KeychainAPI
import KeychainCrypto

/// Why a credential helper could not answer from the vault (no passphrase, wrong passphrase,
/// no vault, a timeout). The message is said on stderr before the helper answers "not found",
/// so a locked vault never looks like a missing credential. Never contains a secret.
public struct HelperFailure: Error, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// A usage error in a helper's arguments (exit 2).
public struct HelperUsageError: Error, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// The arguments every credential helper takes before its operation, the same names as the
/// CLI's: `[--vault VAULT] [--passphrase-file PATH] [--timeout SECONDS] OPERATION`.
/// (Git appends the operation to whatever `credential.helper` names; docker passes it alone.)
public struct HelperOptions: Sendable {
    public var vault: String = KeychainPaths.defaultVault()
    /// `--passphrase-file`, else `$KEYCHAINFS_PASSPHRASE_FILE` (a path, never the passphrase):
    /// docker runs its helper with no arguments but the operation.
    public var passphraseFile: String? = ProcessInfo.processInfo.environment["KEYCHAINFS_PASSPHRASE_FILE"].flatMap {
        $0.isEmpty ? nil : $0
    }
    /// Seconds after which the helper gives up (a passphrase file that is a FIFO nobody
    /// writes, a prompt nobody answers): it says so and answers "not found".
    public var timeout: Double = 60
    public var operation: String = ""

    public static let usage = "[--vault VAULT] [--passphrase-file PATH] [--timeout SECONDS] OPERATION"

    public init() {}

    /// `--help` or `-h` anywhere: the helper prints its usage and exits 0; `--version`: its
    /// name and keychainfs's version. Checked before anything else, as git and docker users
    /// try them first.
    public static func answerHelpOrVersion(_ arguments: [String], tool: String, operations: [String]) {
        if arguments.contains("--help") || arguments.contains("-h") {
            HelperIO.write(
                1,
                Array(
                    "usage: \(tool) \(usage)\noperations: \(operations.joined(separator: ", "))\nsee docs/credentials.md; the vault's keychain service answers when one runs (docs/service.md)\n"
                        .utf8))
            exit(0)
        }
        if arguments.contains("--version") {
            HelperIO.write(1, Array("\(tool) (keychainfs) \(keychainfsVersionNumber)\n".utf8))
            exit(0)
        }
    }

    public static func parse(_ arguments: [String], operations: [String]) throws(HelperUsageError) -> HelperOptions {
        var options = HelperOptions()
        var rest = arguments[...]
        func value(_ name: String) throws(HelperUsageError) -> String {
            guard let v = rest.popFirst(), !v.isEmpty else { throw HelperUsageError("\(name) needs a value") }
            return v
        }
        var operation: String?
        while let word = rest.popFirst() {
            switch word {
            case "--vault": options.vault = try value(word)
            case "--passphrase-file": options.passphraseFile = try value(word)
            case "--timeout":
                guard let t = Double(try value(word)), t > 0, t <= 3600 else {
                    throw HelperUsageError("--timeout takes a number of seconds from 0 to 3600")
                }
                options.timeout = t
            default:
                // An unknown word is never repeated back: it may be a secret typed in the wrong place.
                guard operations.contains(word), operation == nil else {
                    throw HelperUsageError(
                        word.hasPrefix("-")
                            ? "unknown option; usage: \(usage)"
                            : "expected one operation of \(operations.joined(separator: ", ")); usage: \(usage)")
                }
                operation = word
            }
        }
        guard let operation else {
            throw HelperUsageError("no operation: one of \(operations.joined(separator: ", ")); usage: \(usage)")
        }
        options.operation = operation
        return options
    }
}

/// Opening the vault the way the CLI does, from a process no one may be watching: the
/// passphrase from `--passphrase-file`, else a no-echo prompt on the controlling terminal, else
/// a `HelperFailure` saying there is none. Works whether or not the vault is mounted (the
/// daemon's lock on VAULT.lock does not stop other readers).
public enum HelperVault {
    /// The door this helper answers through (docs/service.md): the keychain service of the
    /// vault when one runs (no passphrase, no KDF), else the vault opened here (`open`), its
    /// decisions audited with `via=<face>` either way.
    public static func openDoor(_ options: HelperOptions, tool: String, face: String) throws -> any KeychainDoor {
        do {
            return try Doors.open(vault: options.vault) {
                let (keychain, caller) = try open(options, tool: tool)
                let state = KeychainPaths.stateDirectory()
                try? FileManager.default.createDirectory(
                    atPath: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
                return KeychainSession(
                    keychain: keychain, caller: caller, audit: try? AuditLog(path: state + "/audit.log"), via: face)
            }
        } catch let e as KeychainError {
            throw HelperFailure(e.message)
        }
    }

    /// The vault, unlocked, and the caller this helper acts as: under the vault's access
    /// policy, the groups its own executable is in (always `default` too).
    public static func open(_ options: HelperOptions, tool: String) throws -> (Keychain, Caller) {
        let keychain: Keychain
        do { keychain = try Keychain.open(at: options.vault) } catch let e as KeychainError {
            throw HelperFailure("cannot open the vault \(options.vault): \(e.message)")
        }
        let passphrase = try readPassphrase(options, vault: options.vault)
        // Only what the answer reads is checked, as the mount checks (docs/security.md, "Mounting").
        do {
            try keychain.withoutBackgroundIntegrityPass().unlock(passphrase: passphrase, incrementalCheck: true)
        } catch let e as KeychainError {
            throw HelperFailure("the vault \(options.vault) stays locked: \(e.message)")
        }
        do {
            return (keychain, try DirectCaller.ownExecutable(of: keychain, describedAs: "\(tool) (pid \(getpid()))"))
        } catch let e as KeychainError {
            // A policy that does not verify decides nothing: refuse rather than guess the groups.
            throw HelperFailure("the vault's access policy cannot be used: \(e.message)")
        }
    }

    static func readPassphrase(_ options: HelperOptions, vault: String) throws -> SecureBytes {
        var bytes: [UInt8]
        if let file = options.passphraseFile {
            let fd = Glibc.open(file, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                throw HelperFailure(
                    "the vault \(vault) is locked: cannot open passphrase file \(file): \(String(cString: strerror(errno)))"
                )
            }
            defer { close(fd) }
            bytes = try readAll(fd, limit: 4096, what: "passphrase file \(file)")
            if bytes.last == UInt8(ascii: "\n") { bytes.removeLast() }
        } else if let typed = promptOnTerminal("passphrase for \(vault): ") {
            bytes = typed
        } else {
            throw HelperFailure(
                "the vault \(vault) is locked: no passphrase (no terminal to prompt on; give --passphrase-file)")
        }
        defer { Sodium.wipe(&bytes) }
        guard !bytes.isEmpty else { throw HelperFailure("the vault \(vault) is locked: the passphrase is empty") }
        return try SecureBytes(copying: bytes)
    }

    /// Reads `fd` to EOF, refusing more than `limit` bytes.
    public static func readAll(_ fd: Int32, limit: Int, what: String) throws -> [UInt8] {
        var out = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 65536)
        defer { Sodium.wipe(&chunk) }
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw HelperFailure("cannot read \(what): \(String(cString: strerror(errno)))") }
            if n == 0 { return out }
            out.append(contentsOf: chunk[0..<n])
            if out.count > limit {
                Sodium.wipe(&out)
                throw HelperFailure("\(what) is over the limit of \(limit) bytes")
            }
        }
    }

    /// A no-echo line from /dev/tty; nil when there is no controlling terminal or the line is
    /// longer than a passphrase may be.
    static func promptOnTerminal(_ text: String) -> [UInt8]? {
        guard let typed = Terminal.promptWithoutEcho(text, limit: 4096), !typed.tooLong else { return nil }
        return typed.line
    }
}

/// Ends a helper that has waited too long, after saying why: a helper that hangs hangs git.
public enum Watchdog {
    public static func start(seconds: Double, tool: String, exitCode: Int32, answer: [UInt8] = []) {
        Threads.detach {
            Threads.sleep(seconds: seconds)
            HelperIO.errorLine("\(tool): gave up after \(Int(seconds)) s (no passphrase or vault answer); not found")
            HelperIO.write(1, answer)
            _exit(exitCode)
        }
    }
}

/// Unbuffered writes (a helper may `_exit` from the watchdog: nothing may sit in a buffer).
public enum HelperIO {
    public static func write(_ fd: Int32, _ bytes: [UInt8]) { Terminal.writeAll(fd, bytes) }

    public static func errorLine(_ s: String) {
        let oneLine = s.split(whereSeparator: \.isNewline).joined(separator: " ")
        write(2, Array((oneLine + "\n").utf8))
    }
}
