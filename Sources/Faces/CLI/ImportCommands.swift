import ArgumentParser
import FoundationEssentials
import Glibc
import Keychain
import KeychainCrypto
import KeychainImport
import SystemPackage

/// What every importer takes besides its source.
struct ImportRunOptions: ParsableArguments {
    @Flag(
        name: [.customShort("n"), .long],
        help: "Print what would be added, updated or skipped, and store nothing (secrets are never printed).")
    var dryRun = false
    @Flag(
        name: .customShort("U"),
        help:
            "Update an item that already exists (same primary key) instead of refusing it (or skipping it, with --continue-on-error), as add-generic-password -U does."
    )
    var updateIfPresent = false
    @Flag(
        name: .long,
        help:
            "Store item by item: an item refused (or, import-pass, an entry gpg cannot decrypt) is reported and the others are stored."
    )
    var continueOnError = false
    @Flag(
        name: [.customShort("v"), .long],
        help: "Print a line per item on stdout (added …, updated …; in a dry run would add …).")
    var verbose = false
    @Flag(
        name: .long,
        help:
            "Print one JSON object on stdout instead of the summary: source, added, updated, skipped, failed, refused."
    )
    var json = false
}

struct ImportPass: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import-pass",
        abstract: "Import a pass store: each entry decrypted with gpg, its first line the password.",
        usage: "keychainfs import-pass [--store DIR] [FOLDER] [-n] [-U] [options...]")
    @OptionGroup var vault: VaultOptions
    @Option(
        name: .long,
        help: ArgumentHelp(
            "The password store (default: $PASSWORD_STORE_DIR, else ~/.password-store).", valueName: "dir"))
    var store: String?
    @Argument(help: ArgumentHelp("Import only this folder (or entry) of the store.", valueName: "folder"))
    var folder: String?
    @OptionGroup var importing: ImportRunOptions

    func run() throws {
        let store = self.store ?? PassStore.defaultDirectory()
        // As pass passes $PASSWORD_STORE_GPG_OPTS to gpg.
        let gpgOptions = (ProcessInfo.processInfo.environment["PASSWORD_STORE_GPG_OPTS"] ?? "")
            .split(whereSeparator: \.isWhitespace).map(String.init)
        var records: [ImportRecord] = []
        defer { for i in records.indices { records[i].wipe() } }
        try importing.reportingFailures(source: "pass store \(store)") {
            try importing.convertingErrors {
                // Every entry is decrypted before the vault is opened. Entries gpg cannot decrypt are
                // all named at the end; then nothing is stored, unless --continue-on-error.
                var undecryptable: [(entry: String, why: String)] = []
                let entries = try PassStore.entries(in: store, under: folder)
                for entry in entries {
                    do { records.append(try PassStore.read(entry: entry, in: store, gpgOptions: gpgOptions)) } catch let
                        error as ImportError
                    {
                        undecryptable.append((entry, error.message))
                    } catch {
                        undecryptable.append((entry, "\(error)"))
                    }
                }
                guard !undecryptable.isEmpty else { return }
                for (entry, why) in undecryptable { Output.errorLine("keychainfs: not imported: \(entry): \(why)") }
                if !importing.continueOnError {
                    throw ImportError(
                        "\(undecryptable.count) of \(entries.count) entries could not be read (listed above); nothing imported (--continue-on-error imports the others)",
                        exitCode: 1)
                }
            }
            try importing.store(&records, from: "pass store \(store)", vault: vault)
        }
    }
}

struct ImportCSV: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import-csv",
        abstract: "Import a KeePassXC, Bitwarden or 1Password CSV export, or any CSV with --columns.",
        usage:
            "keychainfs import-csv (keepassxc | bitwarden | 1password | generic --columns MAP) FILE [-n] [-U] [options...]"
    )
    @OptionGroup var vault: VaultOptions
    @Argument(
        help: ArgumentHelp("keepassxc, bitwarden, 1password or generic.", valueName: "format"),
        completion: .list(CSVFormat.names))
    var format: String
    @Argument(
        help: ArgumentHelp("The CSV file ('-' for standard input).", valueName: "file"),
        completion: .file(extensions: ["csv"]))
    var file: String
    @Option(
        name: .long,
        help: ArgumentHelp(
            "For generic: FIELD=COLUMN,… with fields title (or service), account, password, url, notes; password and title or url required.",
            valueName: "map"))
    var columns: String?
    @OptionGroup var importing: ImportRunOptions

    func validate() throws {
        guard CSVFormat.names.contains(format.lowercased()) else {
            throw ValidationError(
                "unknown format '\(format)'; expected one of \(CSVFormat.names.joined(separator: ", "))")
        }
        if format.lowercased() == "generic" && columns == nil {
            throw ValidationError("generic needs --columns FIELD=COLUMN,… (at least password and title or url)")
        }
        if format.lowercased() != "generic" && columns != nil {
            throw ValidationError("--columns is for the generic format only")
        }
        if file == "-" && vault.passphraseFd == 0 {
            throw ValidationError(
                "standard input carries the passphrase (--passphrase-fd 0), so it cannot carry the CSV file too")
        }
    }

    func run() throws {
        var records: [ImportRecord] = []
        defer { for i in records.indices { records[i].wipe() } }
        let source = file == "-" ? "standard input" : file
        try importing.reportingFailures(source: source) {
            try importing.convertingErrors {
                let csvFormat: CSVFormat
                switch format.lowercased() {
                case "keepassxc": csvFormat = .keepassxc
                case "bitwarden": csvFormat = .bitwarden
                case "1password": csvFormat = .onePassword
                default: csvFormat = .generic(try ColumnMapping(parsing: columns ?? ""))
                }
                var bytes = try readFile()
                defer { Sodium.wipe(&bytes) }
                do { records = try csvFormat.records(bytes) } catch let error as ImportError {
                    throw ImportError(
                        "\(file == "-" ? "standard input" : file): \(error.message)", exitCode: error.exitCode)
                }
            }
            try importing.store(&records, from: source, vault: vault)
        }
    }

    /// The whole file (an export is read in full and checked before anything is stored).
    func readFile() throws -> [UInt8] {
        if file == "-" {
            return try SecretInput.readAll(fd: 0, limit: 256 << 20, what: "the CSV file on standard input")
        }
        let fd = open(file, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw CLIError.system("cannot open \(file)", Errno(rawValue: errno)) }
        defer { close(fd) }
        return try SecretInput.readAll(fd: fd, limit: 256 << 20, what: file)
    }
}

extension ImportRunOptions {
    /// Runs `body`, turning an `ImportError` into the CLI's error (exit 2 for a source that does
    /// not parse, 1 for one that cannot be read).
    func convertingErrors(_ body: () throws -> Void) throws {
        do { try body() } catch let error as ImportError {
            throw CLIError(message: error.message, exitCode: error.exitCode)
        }
    }

    /// Runs a whole import. With --json, a failure before the summary (a source that cannot be
    /// read or parsed, entries gpg cannot decrypt, a vault that cannot be opened) is one JSON
    /// object on stdout too, `{"source", "error", "exitCode", "added": 0, …}`, so a script that
    /// reads stdout always gets one object; the message still goes to stderr, and the exit
    /// status is the same.
    func reportingFailures(source: String, _ body: () throws -> Void) throws {
        do { try body() } catch {
            guard json, !ImportTally.summaryPrinted else { throw error }
            let (message, exitCode): (String, Int32) =
                switch error {
                case let e as CLIError: (e.message, e.exitCode)
                case let e as KeychainError: (e.message, e.status.exitCode)
                case let e as ImportError: (e.message, e.exitCode)
                default: ("\(error)", 1)
                }
            let object: JSONValue = [
                "source": .string(source), "dryRun": .bool(dryRun), "added": 0, "updated": 0, "skipped": 0, "failed": 0,
                "refused": [], "error": .string(message), "exitCode": JSONValue(exitCode),
            ]
            Output.line(JSONText.text(object))
            throw error
        }
    }
}
