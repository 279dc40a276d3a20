import ArgumentParser
import Foundation
import Keychain
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
        abstract: "Change the vault's passphrase (re-wraps the master key only).")
    @OptionGroup var vault: VaultOptions
    @Option(name: .long, help: ArgumentHelp("Read the new passphrase from this file.", valueName: "path"))
    var newPassphraseFile: String?
    @Option(name: .long, help: ArgumentHelp("Read the new passphrase from this descriptor.", valueName: "fd"))
    var newPassphraseFd: Int32?
    @Option(name: .long, help: ArgumentHelp("New Argon2id cost (default: keep the current one).", valueName: "profile"))
    var kdf: KDFProfile?

    func run() throws {
        let keychain = try Keychain.open(at: vault.path)
        let old = try vault.passphrase.read(prompt: "current passphrase for \(vault.path): ")
        let new = try PassphraseSource(file: newPassphraseFile, fd: newPassphraseFd).readNew(what: "new passphrase")
        try keychain.changePassphrase(old: old, new: new, parameters: kdf?.parameters)
        Output.errorLine("keychainfs: passphrase changed for \(vault.path)")
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
        let keychain = try vault.openUnlocked()
        var items: [KeychainItem] = []
        var skipped: Set<Int64> = []
        for itemClass in ItemClass.allCases where itemClass != .identity {
            let listed = try everything(keychain, itemClass, withData: false)
            guard data else {
                items += listed
                continue
            }
            // The data of every item that can be read without asking; the rest are left out by
            // the core, as Apple's kSecUseAuthenticationUISkip does, and named here.
            let readable = Dictionary(
                try everything(keychain, itemClass, withData: true).map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a }
            )
            for item in listed {
                if let full = readable[item.id] {
                    items.append(full)
                } else if item.accessControl?.requiresPresence == true {
                    skipped.insert(item.id)
                    items.append(item)
                    Output.errorLine(
                        "keychainfs: skipped the data of \(item.summary): it needs user presence, which dump-keychain does not ask for (errSecInteractionNotAllowed)"
                    )
                }
                // Otherwise it was deleted between the two queries: not there any more.
            }
        }
        if json {
            Output.write(Array(ItemPrinter.json(items, includeData: data, skipped: skipped).utf8))
            return
        }
        for item in items {
            Output.write(Array(ItemPrinter.text(item, vault: keychain.path).utf8))
            if data, let d = item.data { Output.line("data:\n\(ItemPrinter.quoted(d))") }
        }
    }

    /// Every item of a class, synchronizable or not; data items that need presence skipped.
    private func everything(_ keychain: Keychain, _ itemClass: ItemClass, withData: Bool) throws -> [KeychainItem] {
        do {
            return try keychain.copyMatching(
                Query(
                    itemClass, matchLimit: .all, returnData: withData ? true : nil, synchronizableAny: true,
                    authenticationUI: withData ? .skip : nil))
        } catch KeychainStatus.itemNotFound {
            return []
        }
    }
}
