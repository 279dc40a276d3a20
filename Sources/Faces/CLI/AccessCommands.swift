import ArgumentParser
import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess

struct AccessGroup: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "access-group",
        abstract: "Map access groups to executables (the vault's access policy; changes need the passphrase).",
        discussion:
            "With no policy every process of the user is in the group 'default'. A process whose executable is listed is in those groups (the first gets its new items) and in 'default'; items of a group are invisible to processes outside it.",
        subcommands: [Add.self, Remove.self, List.self])

    struct Add: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Put executables in an access group.")
        @OptionGroup var vault: VaultOptions
        @Argument(help: ArgumentHelp("The group.", valueName: "group")) var group: String
        @Argument(help: ArgumentHelp("Executables (resolved to absolute paths).", valueName: "executable"))
        var executables: [String]

        func validate() throws {
            if executables.isEmpty { throw ValidationError("name at least one executable") }
            if group.isEmpty || group.contains(";") {
                throw ValidationError("a group name must be non-empty and have no ';'")
            }
        }

        func run() throws {
            let resolved = try executables.map(resolveExecutable)
            let passphrase = try vault.passphrase.read(prompt: "passphrase for \(vault.path): ")
            let door = try vault.openDoor(holding: passphrase)
            var policy = try door.accessPolicy()
            for exe in resolved { policy.add(group: group, executable: exe) }
            try door.setAccessPolicy(policy, passphrase: passphrase)
            for exe in resolved { Output.line("\(group): \(exe)") }
        }
    }

    struct Remove: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Take executables (or, with none named, the whole group) out of the policy.")
        @OptionGroup var vault: VaultOptions
        @Argument(help: ArgumentHelp("The group.", valueName: "group")) var group: String
        @Argument(help: ArgumentHelp("Executables; none: the whole group.", valueName: "executable")) var executables:
            [String] = []

        func run() throws {
            let passphrase = try vault.passphrase.read(prompt: "passphrase for \(vault.path): ")
            let door = try vault.openDoor(holding: passphrase)
            var policy = try door.accessPolicy()
            var changed = false
            if executables.isEmpty {
                changed = policy.remove(group: group, executable: nil)
            } else {
                for exe in executables {
                    changed = policy.remove(group: group, executable: (try? resolveExecutable(exe)) ?? exe) || changed
                }
            }
            guard changed else { throw KeychainError(.itemNotFound, "access group '\(group)' has no such entry") }
            try door.setAccessPolicy(policy, passphrase: passphrase)
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the access policy.")
        @OptionGroup var vault: VaultOptions

        func run() throws {
            let policy = try vault.openDoor().accessPolicy()
            if policy.isEmpty { Output.line("(no policy: every process is in group '\(Caller.defaultAccessGroup)')") }
            for (group, exes) in policy.groups { for exe in exes { Output.line("\(group): \(exe)") } }
        }
    }
}

/// `keychainfs presence list|forget`: the "Always allow" answers of presence prompts, which the
/// signed policy remembers per executable and item (docs/secret-service.md).
struct RememberedPresence: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "presence",
        abstract:
            "List or forget remembered presence decisions (\"Always allow\" answers; forgetting needs the passphrase).",
        discussion:
            "A Secret Service presence prompt's \"Always allow\" lets one executable use one userPresence item without asking again, through every face that identifies the process. The decision is kept in the vault's signed access policy.",
        subcommands: [List.self, Forget.self])

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the remembered decisions: executable, item id and the item's summary.")
        @OptionGroup var vault: VaultOptions

        func run() throws {
            let door = try vault.openDoor()
            let remembered = try door.accessPolicy().rememberedPresence
            if remembered.isEmpty { Output.line("(no remembered presence decisions)") }
            for (exe, ids) in remembered.sorted(by: { $0.key < $1.key }) {
                for id in ids.sorted() {
                    let summary = (try? RememberedPresence.summary(door, id)) ?? "(item \(id) no longer exists)"
                    Output.line("\(exe): \(id) \(summary)")
                }
            }
        }
    }

    struct Forget: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Forget remembered decisions: of an executable, for an item (--item), or all (--all).")
        @OptionGroup var vault: VaultOptions
        @Argument(help: ArgumentHelp("The executable (resolved to an absolute path).", valueName: "executable"))
        var executable: String?
        @Option(name: .long, help: ArgumentHelp("Only the decisions for this item id.", valueName: "id"))
        var item: Int64?
        @Flag(name: .long, help: "Forget every remembered decision.") var all = false

        func validate() throws {
            if all && (executable != nil || item != nil) {
                throw ValidationError("--all forgets everything: give no executable or --item with it")
            }
            if !all && executable == nil && item == nil {
                throw ValidationError("name an executable, an --item, or --all")
            }
        }

        func run() throws {
            let passphrase = try vault.passphrase.read(prompt: "passphrase for \(vault.path): ")
            let door = try vault.openDoor(holding: passphrase)
            var policy = try door.accessPolicy()
            let exe = try executable.map { (try? resolveExecutable($0)) ?? $0 }
            guard policy.forget(executable: exe, itemID: item) else {
                throw KeychainError(.itemNotFound, "no remembered presence decision matches")
            }
            try door.setAccessPolicy(policy, passphrase: passphrase)
        }
    }

    /// "genp service/account" for an item id, whatever its class.
    static func summary(_ door: any KeychainDoor, _ id: Int64) throws -> String {
        for itemClass in ItemClass.allCases where itemClass != .identity {
            if let item = try? door.item(id: id, itemClass: itemClass, withData: false) {
                return item.summary
            }
        }
        throw KeychainError(.itemNotFound, "no item \(id)")
    }
}

/// An executable named on the command line, as the kernel will report it in /proc/PID/exe.
func resolveExecutable(_ path: String) throws -> String {
    var candidate = path
    if !path.contains("/") {
        let dirs = (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":")
        let candidates: [String] = dirs.map { String($0) + "/" + path }
        guard let found = candidates.first(where: { Glibc.access($0, X_OK) == 0 }) else {
            throw CLIError.usage("executable '\(path)' not found on PATH")
        }
        candidate = found
    }
    guard let real = realpath(candidate, nil) else { throw CLIError.usage("executable '\(path)' does not exist") }
    defer { free(real) }
    return String(cString: real)
}
