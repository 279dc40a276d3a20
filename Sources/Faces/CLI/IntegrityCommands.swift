import ArgumentParser
import FoundationEssentials
import Glibc
import Keychain
import KeychainAPI
import KeychainCrypto

struct Backup: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write a consistent copy of the vault to a new file (0600), mounted or not, and check it.",
        discussion: """
            Copying the live vault file is not a backup: recent changes live in its -wal file. \
            This takes one consistent snapshot (SQLite's VACUUM INTO) that includes them, while a \
            mount or another command goes on writing. No passphrase is needed; 'keychainfs verify \
            DEST' checks the copy completely.
            """)
    @OptionGroup var vault: VaultOptions
    @Argument(help: ArgumentHelp("The backup file to create (never overwritten).", valueName: "dest"))
    var destination: String

    func run() throws {
        // A service holding the vault writes the copy itself, from its own connection: what it
        // has committed (in its write-ahead log) is in it, through whatever name this command
        // gives the vault (docs/service.md). Else the copy is made from the file here.
        let service: ServiceClient?
        do { service = try ServiceClient.connect(vault: vault.path) } catch let e as ServiceClient.Unusable {
            throw KeychainError(.io, "the keychain service of \(vault.path) cannot be used: \(e.description)")
        }
        let summary = try service?.backup(to: destination) ?? Keychain.backup(from: vault.path, to: destination)
        let commit = summary.counter.map { ", commit \($0)" } ?? ""
        Output.line("backed up \(summary.items) items (format \(summary.format)\(commit)) to \(destination)")
    }
}

struct Verify: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check a vault completely: manifest, every item's encryption, class keys, policy, device binding.",
        discussion: """
            Prints what it checked and exits 0, or names every failure (each damaged item by id and \
            class) and exits 1. Changes nothing: a format-1 vault is checked as such, not migrated.
            """)
    @OptionGroup var vault: VaultOptions
    @Argument(help: ArgumentHelp("The vault (else --vault or the default).", valueName: "vault"))
    var path: String?
    @Flag(
        name: .long,
        help:
            "Print one JSON object instead: vault, format, commit, deviceMark, items, classKeysOpened, damaged, failures, ok, olderCopy."
    )
    var json = false

    func validate() throws {
        if path != nil && vault.vault != nil {
            throw ValidationError("give the vault as an argument or with --vault, not both")
        }
    }

    func run() throws {
        let target = path ?? vault.path
        let keychain = try Keychain.open(at: target)
        let report = try keychain.verify(passphrase: vault.passphrase.read(prompt: "passphrase for \(target): "))
        let olderCopy = report.deviceMark.flatMap { mark in report.counter.map { mark > $0 } } ?? false
        if json {
            Output.line(Self.json(report, path: target, olderCopy: olderCopy))
        } else {
            for line in Self.describe(report, path: target) { Output.line(line) }
            for row in report.damaged { Output.line("damaged: \(row)") }
            for failure in report.failures { Output.line("failed: \(failure)") }
        }
        guard report.isClean else {
            let first = report.failures.first ?? "\(report.damaged[0])"
            let rows = report.damaged.isEmpty ? "" : " (\(report.damaged.count) damaged items)"
            throw CLIError.failure("\(target) does not verify: \(first)\(rows)")
        }
        if !json { Output.line("ok") }
        // Whole, but older than what this device has seen: a backup, or a rollback. A script
        // that gates on `verify` must not take it for the live vault.
        if olderCopy, let mark = report.deviceMark, let counter = report.counter {
            throw CLIError(
                message:
                    "\(target) verifies but is an older copy: its commit is \(counter), this device has seen \(mark) (a backup, or a rollback)",
                exitCode: Self.olderCopyExitCode)
        }
    }

    /// `verify --json`: one object; `commit` and `deviceMark` are null when the vault or the
    /// device has none; `ok` is whether it verifies (an older copy can be ok).
    static func json(_ report: VerificationReport, path: String, olderCopy: Bool) -> String {
        let object: JSONValue = [
            "vault": .string(path), "format": JSONValue(report.format),
            "commit": report.counter.map { JSONValue($0) } ?? nil,
            "deviceMark": report.deviceMark.map { JSONValue($0) } ?? nil,
            "items": .object(report.itemsByClass.mapValues { JSONValue($0) }),
            "classKeysOpened": JSONValue(report.classKeysOpened),
            "damaged": .array(
                report.damaged.map {
                    ["id": JSONValue($0.id), "class": .string($0.itemClass), "reason": .string($0.reason)]
                }),
            "failures": .array(report.failures.map { .string($0) }), "ok": .bool(report.isClean),
            "olderCopy": .bool(olderCopy),
        ]
        return JSONText.text(object)
    }

    /// `verify`'s exit status for a vault that is whole but older than this device has seen.
    static let olderCopyExitCode: Int32 = 3

    static func describe(_ report: VerificationReport, path: String) -> [String] {
        var lines = ["vault: \(path)"]
        var version = "format \(report.format)"
        if let counter = report.counter { version += ", commit \(counter)" }
        if let mark = report.deviceMark, let counter = report.counter, mark > counter {
            version += " (this device has seen commit \(mark): this is an older copy)"
        }
        lines.append(version)
        let total = report.itemsByClass.values.reduce(0, +)
        let byClass = report.itemsByClass.keys.sorted().map { "\($0) \(report.itemsByClass[$0]!)" }
        lines.append("items: \(total)" + (byClass.isEmpty ? "" : " (\(byClass.joined(separator: ", ")))"))
        var keys = "class keys: \(report.classKeysOpened) open"
        if report.deviceMismatch {
            keys += "; the ThisDeviceOnly ones belong to another device's key and were not checked"
        }
        lines.append(keys)
        if report.dataNotChecked > 0 {
            lines.append("items whose data was not checked (class key not held): \(report.dataNotChecked)")
        }
        lines.append(report.policyGroups.map { "access policy: \($0) groups" } ?? "access policy: none")
        return lines
    }
}

struct Salvage: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Copy every item that passes its own check into a new vault (when the vault no longer unlocks).",
        discussion: """
            The way out of a vault whose manifest no longer verifies. The new vault has the same passphrase \
            and KDF cost; items keep their attributes and data; damaged items and items whose data this \
            machine cannot open are listed and left behind. A whole older version of an item replayed into \
            the file passes its own check and is copied as it is: prefer a backup when there is one.
            """)
    @OptionGroup var vault: VaultOptions
    @Argument(help: ArgumentHelp("The new vault to create (never overwritten).", valueName: "dest"))
    var destination: String

    func run() throws {
        let passphrase = try vault.passphrase.read(prompt: "passphrase for \(vault.path): ")
        let report = try Keychain.salvage(from: vault.path, to: destination, passphrase: passphrase)
        let policy = report.policyCopied ? " and the access policy" : ""
        Output.line("salvaged \(report.salvaged) items\(policy) into \(destination)")
        for row in report.skipped { Output.line("left behind: \(row)") }
    }
}
