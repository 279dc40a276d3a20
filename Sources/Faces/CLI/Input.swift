import Foundation
import Keychain
import KeychainAccess
import KeychainCrypto
import CPlatform
import SystemPackage

/// A CLI failure that is not a keychain status: bad usage (exit 2) or an environment
/// problem (exit 1). Messages never contain secrets.
struct CLIError: Error {
    let message: String
    let exitCode: Int32
    /// The POSIX failure behind it, if a system call failed.
    var cause: Errno? = nil
    static func usage(_ m: String) -> CLIError { CLIError(message: m, exitCode: 2) }
    static func failure(_ m: String) -> CLIError { CLIError(message: m, exitCode: 1) }
    /// A failed system call: "WHAT: <the errno's description>", exit 1.
    static func system(_ what: String, _ cause: Errno) -> CLIError {
        CLIError(message: "\(what): \(cause)", exitCode: 1, cause: cause)
    }
}

/// Reading passphrases and secrets without ever putting them on argv or in the environment.
enum SecretInput {
    /// Reads all of `fd` up to `limit` bytes; more than that is an error rather than a silent cut.
    static func readAll(fd: Int32, limit: Int, what: String) throws -> [UInt8] {
        var out = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 65536)
        defer { Sodium.wipe(&chunk) }
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                let cause = Errno(rawValue: errno)
                if cause == .interrupted { continue }
                Sodium.wipe(&out)
                throw CLIError.system("cannot read \(what)", cause)
            }
            if n == 0 { return out }
            out.append(contentsOf: chunk[0..<n])
            if out.count > limit {
                Sodium.wipe(&out)
                throw KeychainError(.dataTooLarge, "\(what) is over the limit of \(limit) bytes")
            }
        }
    }

    /// Prompts on the controlling terminal with echo off. Nil when there is no terminal.
    static func prompt(_ text: String) throws -> [UInt8]? {
        guard let typed = Terminal.promptWithoutEcho(text, limit: Keychain.maxDataSize) else { return nil }
        if typed.tooLong { throw KeychainError(.dataTooLarge, "input is too long") }
        return typed.line
    }

    /// Strips one trailing newline (files and pipes usually end with one).
    static func chomp(_ bytes: inout [UInt8]) {
        if bytes.last == UInt8(ascii: "\n") { bytes.removeLast() }
        if bytes.last == UInt8(ascii: "\r") { bytes.removeLast() }
    }

    static func secure(_ bytes: inout [UInt8]) throws -> SecureBytes {
        defer { Sodium.wipe(&bytes) }
        return try SecureBytes(copying: bytes)
    }
}

/// Where a passphrase comes from: `--passphrase-file`, `--passphrase-fd`, or a no-echo
/// prompt on the terminal. Files and descriptors lose one trailing newline.
struct PassphraseSource {
    var file: String?
    var fd: Int32?

    func read(prompt: String) throws -> SecureBytes {
        var bytes: [UInt8]
        if let file {
            let fd = open(file, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { throw CLIError.system("cannot open passphrase file \(file)", Errno(rawValue: errno)) }
            defer { close(fd) }
            bytes = try SecretInput.readAll(fd: fd, limit: 4096, what: "passphrase file \(file)")
            SecretInput.chomp(&bytes)
        } else if let fd {
            bytes = try SecretInput.readAll(fd: fd, limit: 4096, what: "passphrase descriptor \(fd)")
            SecretInput.chomp(&bytes)
        } else if let typed = try SecretInput.prompt(prompt) {
            bytes = typed
        } else {
            throw CLIError.failure(
                "no passphrase: there is no terminal to prompt on; use --passphrase-file or --passphrase-fd")
        }
        if bytes.isEmpty { throw CLIError.failure("the passphrase is empty") }
        return try SecretInput.secure(&bytes)
    }

    /// A new passphrase: from a file or descriptor as given, or typed twice on the terminal.
    func readNew(what: String) throws -> SecureBytes {
        if file != nil || fd != nil { return try read(prompt: "") }
        guard var first = try SecretInput.prompt("\(what): ") else {
            throw CLIError.failure(
                "no passphrase: there is no terminal to prompt on; use --passphrase-file or --passphrase-fd")
        }
        defer { Sodium.wipe(&first) }
        guard var second = try SecretInput.prompt("retype \(what): ") else { throw CLIError.failure("no terminal") }
        defer { Sodium.wipe(&second) }
        guard first == second else { throw CLIError.failure("the passphrases do not match") }
        guard !first.isEmpty else { throw CLIError.failure("the passphrase is empty") }
        return try SecureBytes(copying: first)
    }
}
