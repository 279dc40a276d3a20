import ArgumentParser
import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import KeychainCrypto

/// The two password classes share their commands; this says how they differ.
protocol PasswordClass {
    static var itemClass: ItemClass { get }
    static var noun: String { get }
}

struct GenericPasswordOptions: ParsableArguments {
    @Option(name: .customShort("s"), help: ArgumentHelp("Service name.", valueName: "service"))
    var service: String?
    @OptionGroup var common: CommonItemOptions
    @Option(name: .customShort("G"), help: ArgumentHelp("Generic attribute value (raw bytes).", valueName: "generic"))
    var generic: String?

    func attributes() throws -> Attributes {
        var out = try common.attributes(.genericPassword)
        try set(&out, .genericPassword, "service", service)
        try set(&out, .genericPassword, "generic", generic)
        return out
    }
}

struct InternetPasswordOptions: ParsableArguments {
    @Option(name: .customShort("s"), help: ArgumentHelp("Server name.", valueName: "server"))
    var server: String?
    @OptionGroup var common: CommonItemOptions
    @Option(
        name: .customShort("r"),
        help: ArgumentHelp("Protocol: a name (https) or a four-character code (htps).", valueName: "protocol"))
    var `protocol`: String?
    @Option(name: .customShort("P"), help: ArgumentHelp("Port number.", valueName: "port"))
    var port: String?
    @Option(name: .customShort("p"), help: ArgumentHelp("Path string.", valueName: "path"))
    var path: String?
    @Option(name: .customShort("d"), help: ArgumentHelp("Security domain string.", valueName: "domain"))
    var securityDomain: String?
    @Option(
        name: .customShort("t"),
        help: ArgumentHelp("Authentication type (four-character code, e.g. dflt, form).", valueName: "authType"))
    var authenticationType: String?

    func attributes() throws -> Attributes {
        var out = try common.attributes(.internetPassword)
        try set(&out, .internetPassword, "server", server)
        try set(&out, .internetPassword, "protocol", `protocol`)
        try set(&out, .internetPassword, "port", port)
        try set(&out, .internetPassword, "path", path)
        try set(&out, .internetPassword, "securityDomain", securityDomain)
        try set(&out, .internetPassword, "authenticationType", authenticationType)
        return out
    }
}

/// SecItemAdd, or with -U SecItemUpdate of the one item with the same primary key.
/// Options are checked before the vault is opened (usage errors cost no key derivation).
func addPassword(_ vault: VaultOptions, _ itemClass: ItemClass, attributes given: Attributes, add: AddOptions) throws {
    var attributes = given
    try add.apply(to: &attributes, itemClass)
    if add.readsStandardInput && vault.passphraseFd == 0 {
        throw CLIError.usage(
            "standard input carries the passphrase (--passphrase-fd 0), so it cannot carry the secret too: give the secret on another descriptor's stdin or with -w"
        )
    }
    let door = try vault.openDoor()
    var secret = try add.secret()
    defer { Sodium.wipe(&secret) }
    if add.updateIfPresent {
        // -U: the core updates the one item whose whole primary key equals the new item's.
        try door.addOrUpdate(itemClass, attributes, data: secret)
    } else {
        try door.add(itemClass, attributes, data: secret)
    }
    // Only once it is stored, and only when asked: a generated secret nobody saw is the default.
    if add.generation.print {
        Output.write(secret)
        Output.write([UInt8(ascii: "\n")])
    }
}

struct AddGenericPassword: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add-generic-password",
        abstract: "Add a generic password item (the secret from stdin, -w or --generate).",
        usage: "keychainfs add-generic-password -s service [-a account] [-w password] [options...]")
    @OptionGroup var vault: VaultOptions
    @OptionGroup var item: GenericPasswordOptions
    @OptionGroup var add: AddOptions

    func run() throws {
        // An item with an empty service is reachable only as `/genp/%/…`: almost always a
        // forgotten option, so it is a usage error rather than a silent empty item.
        guard item.service != nil else { throw CLIError.usage("-s service is required") }
        try addPassword(vault, .genericPassword, attributes: item.attributes(), add: add)
    }
}

struct AddInternetPassword: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add-internet-password",
        abstract: "Add an internet password item (the secret from stdin, -w or --generate).",
        usage: "keychainfs add-internet-password -s server [-a account] [-w password] [options...]")
    @OptionGroup var vault: VaultOptions
    @OptionGroup var item: InternetPasswordOptions
    @OptionGroup var add: AddOptions

    func run() throws {
        guard item.server != nil else { throw CLIError.usage("-s server is required") }
        try addPassword(vault, .internetPassword, attributes: item.attributes(), add: add)
    }
}

struct FindOptions: ParsableArguments {
    @Flag(name: .customShort("w"), help: "Print only the secret (followed by a newline).")
    var passwordOnly = false
    @Flag(name: .customShort("g"), help: "Also print the secret, on stderr, after the attributes.")
    var showPassword = false
    @Flag(
        name: .long,
        help: "Print the item as JSON (dump-keychain --json's form, an array of one); its secret only with -w or -g.")
    var json = false
    @Option(
        name: .long,
        help: ArgumentHelp(
            "Which items match by their synchronizable attribute: any (a synced item is found as a local one), yes, no.",
            valueName: "any|yes|no"))
    var synchronizable: SyncMatch = .any
}

/// `--synchronizable any|yes|no` of the find and delete commands: Apple's query matches only
/// items that do not sync unless it says `kSecAttrSynchronizableAny`; a person at a terminal
/// looks for an item by its name, wherever it came from, so the CLI asks for any by default.
enum SyncMatch: String, ExpressibleByArgument, Sendable {
    case any, yes, no

    func query(_ itemClass: ItemClass, _ attributes: Attributes, returnData: Bool? = nil) -> Query {
        var attributes = attributes
        switch self {
        case .any: return Query(itemClass, attributes, returnData: returnData, synchronizableAny: true)
        case .yes: attributes[Schema.synchronizable] = .bool(true)
        case .no: attributes[Schema.synchronizable] = .bool(false)
        }
        return Query(itemClass, attributes, returnData: returnData)
    }
}

func findPassword(_ door: any KeychainDoor, _ itemClass: ItemClass, attributes: Attributes, find: FindOptions) throws {
    let wantData = find.passwordOnly || find.showPassword
    let item = try door.find(find.synchronizable.query(itemClass, attributes, returnData: wantData))
    if find.json {
        Output.write(Array(ItemPrinter.json([item], includeData: wantData).utf8))
        return
    }
    if find.passwordOnly {
        Output.write(item.data ?? [])
        Output.write(Array("\n".utf8))
        return
    }
    Output.write(Array(ItemPrinter.text(item, vault: door.vaultPath).utf8))
    if find.showPassword, let data = item.data {
        Output.writeError(Array("password: ".utf8) + Array(ItemPrinter.quoted(data).utf8) + [10])
    }
}

struct FindGenericPassword: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "find-generic-password",
        abstract: "Find a generic password item and print its attributes (or, with -w, only its secret).",
        usage: "keychainfs find-generic-password [-a account] [-s service] [options...] [-g | -w]")
    @OptionGroup var vault: VaultOptions
    @OptionGroup var item: GenericPasswordOptions
    @OptionGroup var find: FindOptions

    func run() throws {
        let attributes = try item.attributes()
        try findPassword(vault.openDoor(), .genericPassword, attributes: attributes, find: find)
    }
}

struct FindInternetPassword: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "find-internet-password",
        abstract: "Find an internet password item and print its attributes (or, with -w, only its secret).",
        usage: "keychainfs find-internet-password [-a account] [-s server] [options...] [-g | -w]")
    @OptionGroup var vault: VaultOptions
    @OptionGroup var item: InternetPasswordOptions
    @OptionGroup var find: FindOptions

    func run() throws {
        let attributes = try item.attributes()
        try findPassword(vault.openDoor(), .internetPassword, attributes: attributes, find: find)
    }
}

func deletePassword(
    _ door: any KeychainDoor, _ itemClass: ItemClass, attributes: Attributes, synchronizable: SyncMatch = .any
) throws {
    // Like macOS `security`, delete the one item the options name (the first match), and
    // print what was deleted.
    let item = try door.find(synchronizable.query(itemClass, attributes))
    try door.delete(Query(itemClass, synchronizableAny: true, persistentReference: item.id))
    Output.write(Array(ItemPrinter.text(item, vault: door.vaultPath).utf8))
    Output.write(Array("password has been deleted.\n".utf8))
}

struct DeleteGenericPassword: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete-generic-password",
        abstract: "Delete a generic password item.",
        usage: "keychainfs delete-generic-password [-a account] [-s service] [options...]")
    @OptionGroup var vault: VaultOptions
    @OptionGroup var item: GenericPasswordOptions
    @Option(
        name: .long,
        help: ArgumentHelp("Which items match by their synchronizable attribute, as find's.", valueName: "any|yes|no"))
    var synchronizable: SyncMatch = .any

    func run() throws {
        let attributes = try item.attributes()
        try deletePassword(vault.openDoor(), .genericPassword, attributes: attributes, synchronizable: synchronizable)
    }
}

struct DeleteInternetPassword: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete-internet-password",
        abstract: "Delete an internet password item.",
        usage: "keychainfs delete-internet-password [-a account] [-s server] [options...]")
    @OptionGroup var vault: VaultOptions
    @OptionGroup var item: InternetPasswordOptions
    @Option(
        name: .long,
        help: ArgumentHelp("Which items match by their synchronizable attribute, as find's.", valueName: "any|yes|no"))
    var synchronizable: SyncMatch = .any

    func run() throws {
        let attributes = try item.attributes()
        try deletePassword(vault.openDoor(), .internetPassword, attributes: attributes, synchronizable: synchronizable)
    }
}
