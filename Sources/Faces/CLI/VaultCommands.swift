import ArgumentParser
import FoundationEssentials
import Glibc
import Keychain
import KeychainAPI
import KeychainAccess
import KeychainCrypto

enum KDFProfile: String, ExpressibleByArgument, CaseIterable {
    case interactive, moderate, sensitive
    var parameters: PasswordHashParameters {
        switch self {
        case .interactive: .interactive
        case .moderate: .moderate
        case .sensitive: .sensitive
        }
    }
}

struct Init: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Create a new, empty vault.")
    @OptionGroup var vault: VaultOptions
    @Option(name: .long, help: ArgumentHelp("Argon2id cost.", valueName: "profile"))
    var kdf: KDFProfile = .moderate

    func run() throws {
        let passphrase = try vault.passphrase.readNew(what: "new passphrase for \(vault.path)")
        _ = try Keychain.create(at: vault.path, passphrase: passphrase, parameters: kdf.parameters)
        Output.errorLine("keychainfs: created vault \(vault.path)")
    }
}

struct Passwd: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Change the vault's passphrase (re-wraps the master key; --rotate replaces it).")
    @OptionGroup var vault: VaultOptions
    @Option(name: .long, help: ArgumentHelp("Read the new passphrase from this file.", valueName: "path"))
    var newPassphraseFile: String?
    @Option(name: .long, help: ArgumentHelp("Read the new passphrase from this descriptor.", valueName: "fd"))
    var newPassphraseFd: Int32?
    @Option(name: .long, help: ArgumentHelp("New Argon2id cost (default: keep the current one).", valueName: "profile"))
    var kdf: KDFProfile?
    @Flag(
        name: .long,
        help:
            "Also rotate the master key: new class keys, every item key and attribute re-encrypted, in one transaction."
    )
    var rotate = false

    func run() throws {
        // A service holding the vault changes it itself: its mount, agent and Secret Service go
        // on with the new keys (a change behind its back left them answering EIO).
        let service = try ServiceClient.connect(vault: vault.path)
        let keychain = service == nil ? try Keychain.open(at: vault.path) : nil
        let old = try vault.passphrase.read(prompt: "current passphrase for \(vault.path): ")
        let new = try PassphraseSource(file: newPassphraseFile, fd: newPassphraseFd).readNew(what: "new passphrase")
        if let service {
            try service.changePassphrase(
                PassphraseChange(
                    old: old.withUnsafeBytes { Array($0) }, new: new.withUnsafeBytes { Array($0) }, rotate: rotate,
                    opsLimit: kdf?.parameters.opsLimit, memLimit: kdf?.parameters.memLimit))
            Output.errorLine(
                "keychainfs: \(rotate ? "master key rotated and passphrase changed" : "passphrase changed") for \(vault.path) by its keychain service (pid \(service.servicePID))"
            )
            return
        }
        guard let keychain else { return }
        if rotate {
            try keychain.rotateMasterKey(old: old, new: new, parameters: kdf?.parameters)
            Output.errorLine("keychainfs: master key rotated and passphrase changed for \(vault.path)")
        } else {
            try keychain.changePassphrase(old: old, new: new, parameters: kdf?.parameters)
            Output.errorLine("keychainfs: passphrase changed for \(vault.path)")
        }
    }
}

struct DumpKeychain: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dump-keychain",
        abstract: "Print every item's attributes (secrets only with -d).",
        discussion:
            "With -d, an item whose data needs user presence is printed without its data and named on stderr, never prompted for (Apple's kSecUseAuthenticationUISkip); the other items print in full and the exit status is 0."
    )
    @OptionGroup var vault: VaultOptions
    @Flag(name: .customShort("d"), help: "Also print the secret data.")
    var data = false
    @Flag(name: .long, help: "Print JSON.")
    var json = false

    func run() throws {
        let door = try vault.openDoor()
        var items: [KeychainItem] = []
        var skipped: Set<Int64> = []
        for itemClass in ItemClass.allCases where itemClass != .identity {
            do {
                items += try door.copyMatching(Query(itemClass, matchLimit: .all, synchronizableAny: true))
            } catch KeychainStatus.itemNotFound {}
        }
        // The data item by item: one that cannot be read here (user presence, which a dump never
        // asks for, as Apple's kSecUseAuthenticationUISkip; a locked class; another device's
        // ThisDeviceOnly item; damage) is named on stderr and dumped without it, never failing
        // the others.
        if data { items = items.map { withData($0, door, skipped: &skipped) } }
        if json {
            Output.write(Array(ItemPrinter.json(items, includeData: data, skipped: skipped).utf8))
            return
        }
        for item in items {
            Output.write(Array(ItemPrinter.text(item, vault: door.vaultPath).utf8))
            if data, let d = item.data { Output.line("data:\n\(ItemPrinter.quoted(d))") }
        }
    }

    func withData(_ item: KeychainItem, _ door: any KeychainDoor, skipped: inout Set<Int64>) -> KeychainItem {
        skipped.insert(item.id)
        if item.accessControl?.requiresPresence == true {
            Output.errorLine(
                "keychainfs: skipped the data of \(item.summary): it needs user presence, which dump-keychain does not ask for (errSecInteractionNotAllowed)"
            )
            return item
        }
        do {
            let full = try door.find(
                Query(
                    item.itemClass, returnData: true, synchronizableAny: true, persistentReference: item.id,
                    authenticationUI: .skip))
            skipped.remove(item.id)
            return full
        } catch let error as KeychainError {
            Output.errorLine("keychainfs: warning: \(item.summary): data not dumped: \(error.message)")
        } catch {
            Output.errorLine("keychainfs: warning: \(item.summary): data not dumped")
        }
        return item
    }
}
