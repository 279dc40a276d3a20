import ArgumentParser
import FoundationEssentials
import Glibc
import Keychain
import KeychainCrypto
import KeychainService
import KeychainSync

/// `keychainfs sync …` (docs/sync.md): a vault's synchronizable items kept equal on the user's
/// devices through a PostgreSQL server that sees ciphertext only.
struct SyncCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync",
        abstract: "Sync synchronizable items between devices through PostgreSQL (docs/sync.md).",
        subcommands: [
            Setup.self, Pair.self, Join.self, RecoveryCodeCommand.self, Rotate.self, SyncStatus.self, Now.self,
            Conflicts.self,
            Restore.self,
            Leave.self,
        ])

    /// A connection string as the user gave it, refused when it holds a password: it is kept
    /// in the vault in clear and would be on the command line. libpq reads the password from
    /// `~/.pgpass` (`PGPASSFILE`) or the service file.
    static func checkServer(_ server: String) throws {
        var uriPassword = false
        if let scheme = server.firstRange(of: "://"), let at = server[scheme.upperBound...].firstIndex(of: "@") {
            uriPassword = server[scheme.upperBound..<at].contains(":")
        }
        if server.lowercased().contains("password=") || uriPassword {
            throw KeychainError(
                .param,
                "the server's connection string holds a password: put it in ~/.pgpass (or PGPASSFILE) instead, where libpq reads it, and leave it out of the command line and the vault"
            )
        }
    }

    struct Setup: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Start a sync group on a PostgreSQL server with this vault (needs the passphrase).",
            discussion:
                "Creates the server's schema when absent, a group with a new random root key, and uploads every synchronizable item. Then run `keychainfs sync recovery-code` and keep what it prints like a passphrase."
        )
        @OptionGroup var vault: VaultOptions
        @Argument(
            help: ArgumentHelp("A libpq connection string or URI, without a password.", valueName: "postgres-uri"))
        var server: String

        func run() throws {
            try SyncCommand.checkServer(server)
            let passphrase = try vault.passphrase.read(prompt: "passphrase for \(vault.path): ")
            let keychain = try vault.openUnlocked(passphrase, incremental: true)
            let (group, report) = try SyncGroupSetup.start(keychain: keychain, server: server, passphrase: passphrase)
            Output.line("sync group \(group.hex) started; \(report.uploaded) synchronizable items uploaded")
            Output.line("keep a recovery code: keychainfs sync recovery-code")
        }
    }

    struct Rotate: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Give the group a new key, so a removed device reads nothing new (needs the passphrase).",
            discussion:
                "Uploads what this device has not, then starts a new group with a new key on the same server, uploads every synchronizable item sealed under it and deletes the old group from the server. Then join every other device again: `keychainfs sync pair` here, `keychainfs sync leave` and `keychainfs sync join URI CODE` there."
        )
        @OptionGroup var vault: VaultOptions

        func run() throws {
            let passphrase = try vault.passphrase.read(prompt: "passphrase for \(vault.path): ")
            let keychain = try vault.openUnlocked(passphrase, incremental: true)
            let (group, report) = try SyncGroupSetup.rotate(keychain: keychain, passphrase: passphrase)
            Output.line(
                "new sync group \(group.hex): \(report.uploaded) items sealed under its new key; the old group is deleted"
            )
            Output.line(
                "join your other devices again: keychainfs sync pair (here), then sync leave and sync join there")
        }
    }

    struct Join: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Join this vault to a sync group (needs the passphrase).",
            discussion:
                "With the code `keychainfs sync pair` shows on a device of the group: this device shows six digits, which the user types there. Or with --recovery-code-file: the group's recovery code. Then every record of the group is pulled and this vault's synchronizable items are uploaded."
        )
        @OptionGroup var vault: VaultOptions
        @Argument(
            help: ArgumentHelp("A libpq connection string or URI, without a password.", valueName: "postgres-uri"))
        var server: String
        @Argument(help: ArgumentHelp("The code `keychainfs sync pair` shows.", valueName: "code")) var code: String?
        @Option(help: ArgumentHelp("A file holding the group's recovery code.", valueName: "file"))
        var recoveryCodeFile: String?

        func validate() throws {
            if (code == nil) == (recoveryCodeFile == nil) {
                throw ValidationError("give the code `keychainfs sync pair` shows, or --recovery-code-file")
            }
        }

        func run() throws {
            try SyncCommand.checkServer(server)
            let passphrase = try vault.passphrase.read(prompt: "passphrase for \(vault.path): ")
            let keychain = try vault.openUnlocked(passphrase, incremental: true)
            if try keychain.syncConfiguration() != nil {
                throw KeychainError(
                    .duplicateItem, "this vault is already in a sync group: `keychainfs sync leave` first")
            }
            let connection = try SyncServer(conninfo: server)
            try connection.checkSchema()
            let group: SyncGroupID, root: SecureBytes
            if let code {
                guard let pairing = PairingCode(text: code) else {
                    throw KeychainError(
                        .param, "that is not a pairing code (26 letters and digits, as `sync pair` shows)")
                }
                (group, root) = try PairingExchange.receive(code: pairing, server: connection) { sas in
                    Output.line("type these digits on the other device: \(sas)")
                }
            } else {
                guard let file = recoveryCodeFile, let text = FileManager.default.contents(atPath: file) else {
                    throw KeychainError(.io, "cannot read the recovery code file \(recoveryCodeFile ?? "")")
                }
                (group, root) = try RecoveryCode.parse(String(decoding: text, as: UTF8.self))
            }
            guard try connection.groupExists(group.bytes) else {
                throw KeychainError(.itemNotFound, "the server has no sync group \(group.hex) this role may see")
            }
            try keychain.joinSyncGroup(group: group, root: root, server: server, passphrase: passphrase)
            let onTerminal = isatty(STDERR_FILENO) == 1
            let report = try SyncCommand.auditedRound(keychain, vault) {
                try SyncRound(keychain: keychain, server: connection) { pulled in
                    if onTerminal { Output.writeError(Array("\rpulled \(pulled) records".utf8)) }
                }.run()
            }
            if onTerminal { Output.writeError([10]) }
            Output.line(
                "joined sync group \(group.hex): \(report.applied) records applied, \(report.uploaded) uploaded")
        }
    }

    struct Pair: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Show a one-time code that joins another device to this vault's sync group (needs the passphrase).",
            discussion:
                "Run `keychainfs sync join <postgres-uri> <code>` on the new device within 10 minutes; then type the six digits it shows here. The group's key is sent, sealed, only when they match."
        )
        @OptionGroup var vault: VaultOptions

        func run() throws {
            let passphrase = try vault.passphrase.read(prompt: "passphrase for \(vault.path): ")
            let keychain = try vault.openUnlocked(passphrase, incremental: true)
            guard let config = try keychain.syncConfiguration() else {
                throw KeychainError(.itemNotFound, "this vault is in no sync group: `keychainfs sync setup` first")
            }
            let (group, root) = try keychain.syncGroupKey(passphrase: passphrase)
            let connection = try SyncServer(conninfo: config.server)
            let code = try PairingCode.random()
            Output.line("pairing code: \(code.text)")
            Output.line("on the new device: keychainfs sync join \(config.server) \(code.text)")
            try PairingExchange.offer(code: code, group: group, root: root, server: connection) { sas in
                Output.writeError(Array("type the six digits the new device shows: ".utf8))
                guard let typed = readLine(strippingNewline: true) else { return false }
                return typed.filter { !$0.isWhitespace } == sas
            }
            Output.line("the new device has the group's key")
        }
    }

    struct RecoveryCodeCommand: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "recovery-code",
            abstract: "Print the group's recovery code (it IS the group's key: store it like a passphrase).")
        @OptionGroup var vault: VaultOptions

        func run() throws {
            let passphrase = try vault.passphrase.read(prompt: "passphrase for \(vault.path): ")
            let keychain = try vault.openUnlocked(passphrase, incremental: true)
            Output.line(try keychain.syncRecoveryCode(passphrase: passphrase))
        }
    }

    struct Now: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Pull and upload now, in this process (the keychain service does it by itself).")
        @OptionGroup var vault: VaultOptions

        func run() throws {
            let keychain = try vault.openUnlocked(nil, incremental: true)
            guard let config = try keychain.syncConfiguration() else {
                throw KeychainError(.itemNotFound, "this vault is in no sync group")
            }
            let report = try SyncCommand.auditedRound(keychain, vault) {
                try SyncRound(keychain: keychain, server: try SyncServer(conninfo: config.server)).run()
            }
            Output.line("pulled \(report.applied) records, uploaded \(report.uploaded)")
            for reason in report.refused { Output.errorLine("keychainfs: refused: \(reason)") }
        }
    }

    struct Leave: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Leave the sync group: this vault keeps its items and stops syncing (needs the passphrase).")
        @OptionGroup var vault: VaultOptions

        func run() throws {
            let passphrase = try vault.passphrase.read(prompt: "passphrase for \(vault.path): ")
            let keychain = try vault.openUnlocked(passphrase, incremental: true)
            guard try keychain.syncConfiguration() != nil else {
                throw KeychainError(.itemNotFound, "this vault is in no sync group")
            }
            try keychain.leaveSyncGroup(passphrase: passphrase)
            Output.line("left the sync group; the items stay in this vault")
        }
    }
}
