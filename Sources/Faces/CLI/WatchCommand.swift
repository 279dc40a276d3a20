import ArgumentParser
import FoundationEssentials
import Glibc
import Keychain
import KeychainAPI
import KeychainAccess
import KeychainFS

/// `keychainfs watch` (issue 30, docs/cli.md): the vault's changes as they commit, from its
/// change log (vault format 7), through the keychain service when one holds the vault (a
/// streaming request on its API socket), else from the vault file itself (the passphrase
/// unlocks it; new commits are waited for with inotify on the vault and its WAL). Filtered by the
/// caller's access groups; never a secret.
struct Watch: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the keychain's item changes as they commit (SEQ OP CLASS PATH, or JSON lines).",
        discussion: """
            Without --since, from now on; with --since SEQ, every change the vault's change log \
            retains after SEQ first (a SEQ older than the log retains exits 28, \
            errSecDataNotAvailable, never skipping). PATH is the item's path in a mount.
            """)

    @OptionGroup var vault: VaultOptions
    @Flag(name: .long, help: "One JSON object per line: seq, op, class, id, path (and oldPath for a rename).")
    var json = false
    @Option(name: .long, help: ArgumentHelp("Print the changes after this sequence number first.", valueName: "seq"))
    var since: Int64?
    @Option(
        name: .customLong("class"), help: ArgumentHelp("Only this class: genp, inet, cert or keys.", valueName: "class")
    )
    var itemClass: String?
    @Flag(name: .long, help: "Print what the log retains (after --since, else all of it) and exit.")
    var once = false
    @Argument(help: ArgumentHelp("Only paths under this prefix (genp/github.com, …).", valueName: "prefix"))
    var prefix: String?

    func validate() throws {
        try vault.validate()
        if let itemClass, !["genp", "inet", "cert", "keys"].contains(itemClass) {
            throw ValidationError("--class is genp, inet, cert or keys")
        }
        if let since, since < 0 { throw ValidationError("--since is a sequence number, 0 or more") }
    }

    func run() throws {
        let from = since ?? (once ? -1 : nil)
        if let client = try ServiceClient.connect(vault: vault.path),
            !(try client.status().state.hasPrefix("locked") && vault.passphrase.isGiven)
        {
            if vault.passphrase.isGiven {
                try client.prove(passphrase: try vault.passphrase.read(prompt: "passphrase for \(vault.path): "))
            }
            var first = true
            try client.watch(since: from, follow: !once) { last, changes in
                for change in changes { show(change) }
                if first {
                    started(last)
                    first = false
                }
                return true
            }
            return
        }
        try direct(from: from)
    }

    /// No service (or a locked one and the passphrase given): the vault read here.
    private func direct(from: Int64?) throws {
        let keychain = try vault.openUnlocked(incremental: true)
        let caller = try vault.holderCaller(keychain)
        let follow = once ? nil : try VaultWatch(vault: vault.path)
        var after = try from ?? keychain.lastLoggedChange()
        func printNew() throws {
            var page: ChangeLogPage
            repeat {
                page = try keychain.changeLog(after: after, limit: 500)
                for change in page.changes {
                    if let seen = change.visible(to: caller.canSee(accessGroup:)) { show(Self.wire(seen)) }
                }
                after = page.changes.last?.seq ?? max(after, 0)
            } while page.changes.count == 500
        }
        try printNew()
        started(after)
        guard let follow else { return }
        var stamp: [Int64]?
        while follow.wait() {
            var failure: (any Error)?
            keychain.afterVaultWrite(&stamp) {
                guard failure == nil else { return }
                do { try printNew() } catch { failure = error }
            }
            if let failure { throw failure }
        }
    }

    private func started(_ last: Int64) {
        if !once { Output.errorLine("keychainfs: watching \(vault.path) after \(last)") }
    }

    static func wire(_ change: LoggedChange) -> WireChange {
        let (path, oldPath) = ChangePaths.paths(of: change)
        return WireChange(
            seq: change.seq, kind: change.kind, itemClass: change.itemClass, id: change.id, path: path, oldPath: oldPath
        )
    }

    private func wanted(_ change: WireChange) -> Bool {
        if let itemClass, change.itemClass.rawValue != itemClass { return false }
        guard var prefix else { return true }
        while prefix.hasPrefix("/") { prefix.removeFirst() }
        return change.path.hasPrefix(prefix) || (change.oldPath?.hasPrefix(prefix) ?? false)
    }

    private func show(_ change: WireChange) {
        guard wanted(change) else { return }
        if json {
            var object: [String: JSONValue] = [
                "seq": JSONValue(change.seq), "op": .string(change.operation),
                "class": .string(change.itemClass.rawValue),
                "id": JSONValue(change.id), "path": .string(change.path),
            ]
            if let old = change.oldPath { object["oldPath"] = .string(old) }
            Output.line(JSONText.text(.object(object), escapingSlashes: false))
        } else {
            Output.line(
                ChangePaths.line(
                    seq: change.seq, kind: change.kind, itemClass: change.itemClass, path: change.path,
                    oldPath: change.oldPath))
        }
    }
}
