import ArgumentParser
import Foundation
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
            "Update an item that already exists (same primary key) instead of skipping it, as add-generic-password -U does."
    )
    var updateIfPresent = false
    @Flag(
        name: .long,
        help:
            "Import the entries that can be read when others cannot (import-pass: entries gpg cannot decrypt are listed and skipped)."
    )
    var continueOnError = false
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
        try importing.store(&records, from: file == "-" ? "standard input" : file, vault: vault)
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

    /// Stores `records` through the core (`addBatch` for new items in batches, one `add` or, with
    /// -U, `addOrUpdate` each otherwise), so every keychain rule applies. Each record is first made
    /// into an item: one that cannot be stops the import before the vault is opened. An item the
    /// core refuses (a duplicate, a value too large) is reported and the others are still stored. Prints one line per item on stdout (`added …`, `updated …`, or in a
    /// dry run `would add …`), skips and failures on stderr, and a summary line; exits 0 when
    /// every item is stored, with the first failure's status (its low byte) when any failed,
    /// else 45 (errSecDuplicateItem) when any was skipped as a duplicate.
    func store(_ records: inout [ImportRecord], from source: String, vault: VaultOptions) throws {
        var planned: [(record: Int, item: ImportItem)] = []
        var skipped = 0
        try convertingErrors {
            for (index, record) in records.enumerated() {
                if let reason = record.skipReason {
                    Output.errorLine("keychainfs: skipped \(record.origin): \(reason)")
                    skipped += 1
                    continue
                }
                do { planned.append((index, try record.item())) } catch let error as ImportError {
                    throw ImportError("\(source): \(error.message)", exitCode: error.exitCode)
                }
            }
        }
        for record in records where record.skipReason == nil {
            for what in record.dropped {
                Output.errorLine("keychainfs: warning: \(record.origin): \(what) is not imported")
            }
        }
        let keychain = try vault.openUnlocked()
        var added = 0
        var updated = 0
        var duplicates = 0
        var failed: [KeychainError] = []
        var seen: Set<String> = []
        func storeOne(_ index: Int, _ item: ImportItem) {
            let name = "\(item.description) (\(item.origin))"
            if dryRun {
                // Already in the vault, or earlier in this same source.
                let exists =
                    !seen.insert(item.description).inserted
                    || ((try? keychain.copyMatching(item.primaryKeyQuery))?.isEmpty == false)
                if !exists {
                    Output.line("would add \(name)")
                    added += 1
                } else if updateIfPresent {
                    Output.line("would update \(name)")
                    updated += 1
                } else {
                    Output.errorLine("keychainfs: would skip \(name): it already exists (-U updates it)")
                    duplicates += 1
                }
                return
            }
            do {
                if updateIfPresent {
                    let result = try keychain.addOrUpdate(
                        item.itemClass, item.attributes, data: records[index].password)
                    Output.line("\(result.added ? "added" : "updated") \(name)")
                    if result.added { added += 1 } else { updated += 1 }
                } else {
                    try keychain.add(item.itemClass, item.attributes, data: records[index].password)
                    Output.line("added \(name)")
                    added += 1
                }
            } catch KeychainStatus.duplicateItem {
                Output.errorLine("keychainfs: skipped \(name): it already exists (-U updates it)")
                duplicates += 1
            } catch let error as KeychainError {
                Output.errorLine("keychainfs: failed \(name): \(error.message)")
                failed.append(error)
            } catch {
                failed.append(KeychainError(.io, "\(error)"))
            }
            records[index].wipe()
        }
        // New items go in batches of `batchSize`, one durable transaction each (the core's
        // addBatch: all of a batch or none); a batch the core refuses (a duplicate, a value too
        // large) is stored again item by item, so each refusal is reported and the rest stored.
        // 10,000 rows took 120 s one transaction each.
        let batchSize = 512
        var next = 0
        while next < planned.count {
            let chunk = planned[next..<min(next + batchSize, planned.count)]
            next += chunk.count
            if !dryRun && !updateIfPresent && chunk.count > 1 {
                let batch = chunk.map {
                    NewItem($0.item.itemClass, $0.item.attributes, data: records[$0.record].password)
                }
                if (try? keychain.addBatch(batch)) != nil {
                    for (index, item) in chunk {
                        Output.line("added \(item.description) (\(item.origin))")
                        records[index].wipe()
                    }
                    added += chunk.count
                    continue
                }
            }
            for (index, item) in chunk { storeOne(index, item) }
        }
        if dryRun {
            Output.line(
                "dry run, nothing stored: \(added) to add, \(updated) to update, \(skipped + duplicates) to skip, \(failed.count) failing"
            )
        } else {
            Output.line(
                "imported from \(source): \(added) added, \(updated) updated, \(skipped + duplicates) skipped, \(failed.count) failed"
            )
        }
        if let first = failed.first {
            throw CLIError(
                message: "\(failed.count) of \(planned.count) items were not imported; the first: \(first.message)",
                exitCode: first.status.exitCode)
        }
        if duplicates > 0 {
            throw CLIError(
                message:
                    "\(duplicates) item\(duplicates == 1 ? "" : "s") already exist\(duplicates == 1 ? "s" : "") and "
                    + "\(dryRun ? "would be" : "were") left as \(duplicates == 1 ? "it is" : "they are") (-U updates them)",
                exitCode: KeychainStatus.duplicateItem.exitCode)
        }
    }
}
