import ArgumentParser
import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import KeychainAPI
import KeychainCredentials
import KeychainCrypto
import SystemPackage

/// `keychainfs run -- CMD…`: CMD runs with every environment variable whose value is a `kc://`
/// reference (ours, or from `--env-file`) replaced by the item's secret. The secrets exist
/// only in the child's environment (never on argv, never in ours), and any of them that the
/// child prints on stdout or stderr is masked, unless `--no-masking`.
struct Run: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a command with kc:// references in its environment replaced by the items' secrets.",
        usage: "keychainfs run [--env-file FILE] [--no-masking] -- COMMAND [ARGUMENT…]",
        discussion:
            "References: kc://genp/<service>[/<account>], kc://inet/<server>[/<account>][?protocol=…&port=…&path=…]. The command's exit status is run's; 127 when the command is not found."
    )
    @OptionGroup var vault: VaultOptions
    @Option(
        name: .long,
        help: ArgumentHelp("Also set the variables of this file (NAME=VALUE lines; # comments).", valueName: "file"))
    var envFile: [String] = []
    @Flag(name: .long, help: "Let the secrets through the command's output unmasked.")
    var noMasking = false
    @Argument(parsing: .postTerminator, help: ArgumentHelp("The command and its arguments.", valueName: "command"))
    var command: [String] = []

    func validate() throws {
        if command.isEmpty { throw ValidationError("no command: keychainfs run [options] -- COMMAND [ARGUMENT…]") }
    }

    func run() throws {
        var environment = ProcessInfo.processInfo.environment
        for file in envFile {
            for (name, value) in try EnvFile.read(file) { environment[name] = value }
        }
        let references = try environment.filter { $0.value.hasPrefix(ItemReference.scheme) }.mapValues {
            try ItemReference($0)
        }
        var secrets: [[UInt8]] = []
        if !references.isEmpty {
            let door = try vault.openDoor()
            for (name, reference) in references.sorted(by: { $0.key < $1.key }) {
                let secret = try reference.resolve(in: door)
                guard !secret.contains(0), let text = String(validating: secret, as: UTF8.self) else {
                    throw CLIError.failure("\(reference) (for \(name)): the secret is not text an environment can hold")
                }
                environment[name] = text
                secrets.append(secret)
            }
        }
        // The vault is not needed while the child runs: a mount or `serve` may start meanwhile.
        Doors.closeDirect()
        let path = try Executable.find(command[0], path: environment["PATH"])
        let status = try ChildRunner.run(
            path, arguments: command, environment: environment.map { "\($0.key)=\($0.value)" },
            masking: noMasking ? nil : SecretMasker(secrets: secrets))
        for i in secrets.indices { Sodium.wipe(&secrets[i]) }
        // The command's status is ours (ArgumentParser's ExitCode would print on a success).
        Glibc.exit(status)
    }
}

/// `keychainfs inject`: a template's `{{ kc://… }}` references replaced by the items'
/// secrets, written to a new file of mode 0600 (or stdout). Every reference is resolved before
/// a byte is written; an existing file is replaced only with `--force`.
struct Inject: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Fill a template's {{ kc://… }} references with the items' secrets.",
        usage: "keychainfs inject [-i TEMPLATE] [-o OUTFILE] [--force]")
    @OptionGroup var vault: VaultOptions
    @Option(name: .shortAndLong, help: ArgumentHelp("The template (default: stdin).", valueName: "template"))
    var inFile: String?
    @Option(
        name: .shortAndLong, help: ArgumentHelp("The file to write, mode 0600 (default: stdout).", valueName: "file"))
    var outFile: String?
    @Flag(name: .long, help: "Replace the output file if it exists.")
    var force = false

    func run() throws {
        if inFile == nil && vault.passphraseFd == 0 {
            throw CLIError.usage("standard input carries the passphrase (--passphrase-fd 0); give the template with -i")
        }
        if let outFile, !force, FileManager.default.fileExists(atPath: outFile) {
            throw CLIError.failure("\(outFile) exists; use --force to replace it")
        }
        var template: [UInt8]
        if let inFile {
            guard let data = FileManager.default.contents(atPath: inFile) else {
                throw CLIError.system("cannot read template \(inFile)", Errno(rawValue: errno == 0 ? ENOENT : errno))
            }
            template = Array(data)
        } else {
            template = try SecretInput.readAll(fd: 0, limit: 16 << 20, what: "the template on standard input")
        }
        let pieces = try Template.parse(template)
        var output: [UInt8] = []
        defer { Sodium.wipe(&output) }
        if pieces.contains(where: { if case .reference = $0 { true } else { false } }) {
            let door = try vault.openDoor()
            for piece in pieces {
                switch piece {
                case .text(let bytes): output += bytes
                case .reference(let reference): output += try reference.resolve(in: door)
                }
            }
        } else {
            output = template
        }
        guard let outFile else { return Output.write(output) }
        try PrivateFile.write(output, to: outFile, replacing: force)
    }
}

/// `{{ kc://… }}` in a template (spaces inside the braces optional); other `{{ … }}` are
/// left as they are (the file may be another tool's template too).
enum Template {
    enum Piece {
        case text([UInt8])
        case reference(ItemReference)
    }

    static func parse(_ bytes: [UInt8]) throws -> [Piece] {
        var pieces: [Piece] = []
        var text: [UInt8] = []
        var i = 0
        let open = Array("{{".utf8), close = Array("}}".utf8)
        while i < bytes.count {
            if bytes[i...].starts(with: open), let end = firstIndex(of: close, in: bytes, from: i + 2) {
                let inner = String(decoding: bytes[(i + 2)..<end], as: UTF8.self).trimmingWhitespace()
                if inner.hasPrefix(ItemReference.scheme) {
                    pieces.append(.text(text))
                    text = []
                    pieces.append(.reference(try ItemReference(inner)))
                    i = end + close.count
                    continue
                }
            }
            text.append(bytes[i])
            i += 1
        }
        pieces.append(.text(text))
        return pieces
    }

    static func firstIndex(of needle: [UInt8], in bytes: [UInt8], from start: Int) -> Int? {
        var i = start
        while i + needle.count <= bytes.count {
            if bytes[i] == UInt8(ascii: "\n") { return nil }  // a reference is on one line
            if bytes[i...].starts(with: needle) { return i }
            i += 1
        }
        return nil
    }
}

/// NAME=VALUE lines; blank lines and `#` comments skipped; one pair of surrounding quotes removed.
enum EnvFile {
    static func read(_ path: String) throws -> [(String, String)] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw CLIError.system("cannot read env file \(path)", Errno(rawValue: errno == 0 ? ENOENT : errno))
        }
        var out: [(String, String)] = []
        for (n, raw) in String(decoding: data, as: UTF8.self).split(separator: "\n").enumerated() {
            let line = raw.trimmingWhitespace()
            if line.isEmpty || line.hasPrefix("#") { continue }
            let body = line.hasPrefix("export ") ? String(line.dropFirst(7)) : line
            guard let eq = body.firstIndex(of: "="), !body[..<eq].isEmpty,
                body[..<eq].allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" })
            else { throw CLIError.failure("\(path):\(n + 1): expected NAME=VALUE") }
            var value = String(body[body.index(after: eq)...])
            if value.count >= 2, let q = value.first, q == "\"" || q == "'", value.last == q {
                value = String(value.dropFirst().dropLast())
            }
            out.append((String(body[..<eq]), value))
        }
        return out
    }
}
