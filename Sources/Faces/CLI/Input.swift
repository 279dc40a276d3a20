import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import KeychainCrypto
import CPlatform
import SystemPackage

/// A CLI failure that is not a keychain status: bad usage (exit 2) or an environment
/// problem (exit 1). Messages never contain secrets.
struct CLIError: Error, CustomStringConvertible {
    let message: String
    /// What ArgumentParser prints when a `validate()` throws one.
    var description: String { message }
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

/// Where a passphrase comes from: `--passphrase-file`, `--passphrase-fd`,
/// `--passphrase-program`, else the file `$KEYCHAINFS_PASSPHRASE_FILE` names (as the credential
/// helpers read it), else the systemd credential `keychainfs.passphrase`, else a no-echo prompt on
/// the terminal (three tries, `unlocking`), else (under systemd) `systemd-ask-password`. Files,
/// descriptors, credentials and programs lose one trailing newline.
struct PassphraseSource {
    var file: String?
    var fd: Int32?
    /// A shell command whose standard output is the passphrase (gocryptfs's `-extpass`).
    var program: String? = nil

    /// Whether a source other than the terminal prompt was given.
    var isGiven: Bool { file != nil || fd != nil || program != nil }

    func read(prompt: String) throws -> SecureBytes { try readSourced(prompt: prompt).passphrase }

    /// The passphrase, and whether it was typed at the terminal prompt (which alone is asked again).
    func readSourced(prompt: String) throws -> (passphrase: SecureBytes, typed: Bool) {
        var bytes: [UInt8]
        var typedAtPrompt = false
        let environmentFile = ProcessInfo.processInfo.environment["KEYCHAINFS_PASSPHRASE_FILE"].flatMap {
            $0.isEmpty ? nil : $0
        }
        if let file = file ?? (isGiven ? nil : environmentFile) {
            let fd = open(file, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { throw CLIError.system("cannot open passphrase file \(file)", Errno(rawValue: errno)) }
            defer { close(fd) }
            bytes = try SecretInput.readAll(fd: fd, limit: 4096, what: "passphrase file \(file)")
            SecretInput.chomp(&bytes)
        } else if let fd {
            bytes = try SecretInput.readAll(fd: fd, limit: 4096, what: "passphrase descriptor \(fd)")
            SecretInput.chomp(&bytes)
        } else if let program {
            bytes = try PassphraseProgram.run(program)
            SecretInput.chomp(&bytes)
        } else if var credential = try SystemdCredential.passphrase() {
            SecretInput.chomp(&credential)
            bytes = credential
        } else if let typed = try SecretInput.prompt(prompt) {
            bytes = typed
            typedAtPrompt = true
        } else if var asked = try PassphraseProgram.askThroughSystemd(prompt: prompt, id: "keychainfs") {
            SecretInput.chomp(&asked)
            bytes = asked
        } else {
            throw CLIError.failure(
                "no passphrase: there is no terminal to prompt on; use --passphrase-file, --passphrase-fd or --passphrase-program"
            )
        }
        if bytes.isEmpty { throw CLIError.failure("the passphrase is empty") }
        return (try SecretInput.secure(&bytes), typedAtPrompt)
    }

    /// `body` with the passphrase. Typed at the terminal, a wrong one (errSecAuthFailed) is asked
    /// again, three tries in all, as sudo, gpg and pinentry give; from any other source the first
    /// answer is final (a script's file does not improve by being read again).
    func unlocking<R>(prompt: String, _ body: (SecureBytes) throws -> R) throws -> R {
        var attempt = 1
        while true {
            let (passphrase, typed) = try readSourced(prompt: prompt)
            do { return try body(passphrase) } catch let e as KeychainError
                where e.status == .authFailed && typed && attempt < 3
            {
                attempt += 1
                Output.errorLine("keychainfs: wrong passphrase; try again (\(attempt) of 3)")
            }
        }
    }

    /// A new passphrase: from a file or descriptor as given, or typed twice on the terminal.
    func readNew(what: String) throws -> SecureBytes {
        if isGiven { return try read(prompt: "") }
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

/// A systemd credential (systemd.exec(5) `LoadCredential=`, `LoadCredentialEncrypted=`): under
/// a unit that loads one named `keychainfs.passphrase`, systemd puts it, decrypted, in the file
/// `$CREDENTIALS_DIRECTORY/keychainfs.passphrase`, readable by the service only and gone when
/// it stops. Used when no passphrase option is given, before any prompt.
enum SystemdCredential {
    static let passphraseName = "keychainfs.passphrase"

    /// The credential's bytes; nil when `$CREDENTIALS_DIRECTORY` is unset or holds no such
    /// credential (the unit loads none: the next source is tried).
    static func passphrase() throws -> [UInt8]? {
        guard let directory = ProcessInfo.processInfo.environment["CREDENTIALS_DIRECTORY"], !directory.isEmpty
        else { return nil }
        let path = directory + "/" + passphraseName
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            let cause = Errno(rawValue: errno)
            if cause == .noSuchFileOrDirectory { return nil }
            throw CLIError.system("cannot open the systemd credential \(path)", cause)
        }
        defer { close(fd) }
        return try SecretInput.readAll(fd: fd, limit: 4096, what: "the systemd credential \(path)")
    }
}

/// `--passphrase-program CMD`: `/bin/sh -c CMD`, its standard output read as the passphrase
/// (through a pipe, never a file or argv). Its standard input is /dev/null, because the CLI's
/// may carry an item's secret; it asks, if it must, on the terminal or through an agent as
/// `systemd-ask-password`, `pass show` and pinentry do; its standard error is the user's.
enum PassphraseProgram {
    static func run(_ command: String) throws -> [UInt8] {
        try run(executable: "/bin/sh", arguments: ["-c", command])
    }

    /// Under systemd (a service's `$INVOCATION_ID`) with no terminal, `systemd-ask-password`
    /// asks through systemd's password agents, as systemd's own units do; nil when either is
    /// missing.
    static func askThroughSystemd(prompt: String, id: String) throws -> [UInt8]? {
        let environment = ProcessInfo.processInfo.environment
        guard environment["INVOCATION_ID"]?.isEmpty == false else { return nil }
        let directories = (environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":").map(String.init)
        guard let program = directories.map({ $0 + "/systemd-ask-password" }).first(where: { access($0, X_OK) == 0 })
        else { return nil }
        return try run(executable: program, arguments: ["--id=\(id)", prompt])
    }

    static func run(executable: String, arguments: [String]) throws -> [UInt8] {
        let pid: pid_t
        let output: (read: Int32, write: Int32)
        do {
            output = try ChildProcess.pipe()
            do {
                pid = try ChildProcess.spawn(
                    executable, arguments: [executable] + arguments,
                    descriptors: [(0, .null), (1, .duplicate(output.write))])
            } catch {
                close(output.read)
                close(output.write)
                throw error
            }
        } catch { throw CLIError.failure("cannot start the passphrase program: \(error)") }
        close(output.write)
        defer { close(output.read) }
        var bytes: [UInt8]
        do {
            bytes = try SecretInput.readAll(fd: output.read, limit: 4096, what: "the passphrase program's output")
        } catch {
            kill(pid, SIGTERM)
            _ = ChildProcess.wait(pid)
            throw error
        }
        // Never the output in a message: it is the passphrase, or part of it.
        switch ChildProcess.wait(pid) {
        case .exited(0): return bytes
        case .exited(let status):
            Sodium.wipe(&bytes)
            throw CLIError.failure("the passphrase program exited with status \(status)")
        case .signaled(let signal):
            Sodium.wipe(&bytes)
            throw CLIError.failure("the passphrase program was killed by signal \(signal)")
        }
    }
}
