import ArgumentParser
import FoundationEssentials
import Glibc
import Keychain
import KeychainCredentials
import KeychainCrypto
import SystemPackage

struct KeychainfsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keychainfs",
        abstract: "An encrypted keychain with Apple's Keychain Services semantics, mountable as a directory.",
        discussion: """
            Exit codes, as macOS `security`: 0 ok; a keychain status exits with its OSStatus's low byte \
            (44 item not found, 45 duplicate item, 51 wrong passphrase, 36 interaction not allowed; \
            the full table is in docs/errors.md); 2 usage; 1 any other failure.
            """,
        version: "keychainfs \(keychainfsVersion)",
        subcommands: [
            Init.self, Passwd.self,
            AddGenericPassword.self, FindGenericPassword.self, DeleteGenericPassword.self,
            AddInternetPassword.self, FindInternetPassword.self, DeleteInternetPassword.self,
            DumpKeychain.self,
            AddCertificates.self, FindCertificate.self, FindIdentity.self, Import.self, Export.self,
            ImportPass.self, ImportCSV.self,
            FindKey.self, DeleteKey.self, DeleteCertificate.self, Generate.self,
            CreateKeypair.self, SSHAgentCommand.self,
            Mount.self, Unmount.self, Serve.self, Lock.self, Unlock.self, Status.self,
            AccessGroup.self, RememberedPresence.self, AuditLogCommand.self, Backup.self, Verify.self, Salvage.self,
            Run.self, Inject.self, SecretServiceCommand.self, Watch.self, SyncCommand.self,
        ])
}

// One binary, three programs: the installed credential helpers are hard links to keychainfs
// (their /proc/PID/exe keeps their own name, so access groups tell them apart, which a symlink
// would not), each run by the name it was started as.
switch CommandLine.arguments.first.map({ $0.split(separator: "/").last.map(String.init) ?? $0 }) {
case "git-credential-keychainfs": GitHelperMain.run(Array(CommandLine.arguments.dropFirst()))
case "docker-credential-keychainfs": DockerHelperMain.run(Array(CommandLine.arguments.dropFirst()))
default: break
}

// `keychainfs --version` answers before the argument parser builds its tree of 40 commands,
// which was half of the command's start-up (docs/benchmarks.md, "Start-up").
if Array(CommandLine.arguments.dropFirst()) == ["--version"] {
    Output.line("keychainfs \(keychainfsVersion)")
    exit(0)
}

// Before any key exists in memory: no core dumps, no same-user ptrace.
ProcessHardening.apply()

func fail(_ message: String, _ code: Int32) -> Never {
    // One line, always: flatten anything multi-line an underlying library produced.
    let oneLine = message.split(whereSeparator: \.isNewline).joined(separator: " ")
    Output.errorLine("keychainfs: error: \(oneLine)")
    exit(code)
}

/// Arguments reach Swift as strings, and bytes that are not UTF-8 would become U+FFFD without
/// a word: a name stored under a rewritten spelling. Refuse them instead, naming the argument
/// and the byte offset (never the bytes: the argument may be a secret).
func refuseInvalidUTF8Arguments() {
    for index in 1..<Int(CommandLine.argc) {
        guard let raw = CommandLine.unsafeArgv[index] else { continue }
        let bytes = Array(UnsafeBufferPointer(start: raw, count: strlen(raw))).map { UInt8(bitPattern: $0) }
        var parser = Unicode.UTF8.ForwardParser()
        var input = bytes.makeIterator()
        var offset = 0
        scalars: while true {
            switch parser.parseScalar(from: &input) {
            case .valid(let scalar): offset += scalar.count
            case .emptyInput: break scalars
            case .error:
                fail(
                    "argument \(index) is not valid UTF-8 (byte offset \(offset)): names and attributes are text; "
                        + "give binary secrets on standard input", 2)
            }
        }
    }
}
refuseInvalidUTF8Arguments()

/// macOS `security` (getopt) accepts `-wSECRET`; ArgumentParser would reject it and echo
/// the secret in its message. Split it into `-w SECRET` first (and `--generate=N` into its
/// words); after `--` (the command of `run`) the words are not ours.
let arguments: [String] = {
    let all = Array(CommandLine.arguments.dropFirst())
    let end = all.firstIndex(of: "--") ?? all.count
    return all[..<end].flatMap { arg -> [String] in
        arg.hasPrefix("-w") && arg.count > 2 && !arg.hasPrefix("--") ? ["-w", String(arg.dropFirst(2))] : [arg]
    }.flatMap(GenerationOptions.expand) + all[end...]
}()

/// Whether the leading words of `arguments` try to name a command that does not exist
/// (`keychainfs nosuchcommand`, `keychainfs access-group nosuch`). ArgumentParser would answer
/// such a line with the parent's help and exit 0 if it also holds `--help`.
func namesUnknownCommand(_ arguments: [String]) -> Bool {
    var command: any ParsableCommand.Type = KeychainfsCommand.self
    for word in arguments {
        // `keychainfs --help nosuch` and `keychainfs help access-group nosuch` too.
        if word == "--help" || word == "-h" || (command == KeychainfsCommand.self && word == "help") { continue }
        if word.hasPrefix("-") { return false }
        let subcommands = command.configuration.subcommands
        if subcommands.isEmpty { return false }
        guard
            let next = subcommands.first(where: { $0._commandName == word || $0.configuration.aliases.contains(word) })
        else {
            return true
        }
        command = next
    }
    return false
}

/// Usage messages quote offending arguments; an argument that is not an option may be a
/// secret typed in the wrong place, so it is never repeated back.
func redacted(_ message: String, _ arguments: [String]) -> String {
    var out = message
    for arg in arguments where !arg.hasPrefix("-") && !arg.isEmpty {
        out = out.replacing("'\(arg)'", with: "'…'")
    }
    return out
}

do {
    // An unknown command is a usage error even with --help or `help`: drop those and let the
    // parser report it (exit 2) as it does without them.
    var parsed = arguments
    if namesUnknownCommand(arguments) {
        parsed.removeAll { $0 == "--help" || $0 == "-h" }
        if parsed.first == "help" { parsed.removeFirst() }
    }
    var command = try KeychainfsCommand.parseAsRoot(parsed)
    try command.run()
} catch let error as KeychainError {
    fail(error.message, error.status.exitCode)
} catch let error as CLIError {
    fail(error.message, error.exitCode)
} catch let error as Errno {
    fail(error.description, 1)
} catch {
    let code = KeychainfsCommand.exitCode(for: error)
    if code == .success {
        // --help, --version
        Output.line(KeychainfsCommand.fullMessage(for: error))
        exit(0)
    }
    if code == .validationFailure || error is ValidationError {
        fail("\(redacted(KeychainfsCommand.message(for: error), arguments)) (see 'keychainfs help')", 2)
    }
    fail(redacted(KeychainfsCommand.message(for: error), arguments), code.rawValue == 0 ? 1 : code.rawValue)
}
