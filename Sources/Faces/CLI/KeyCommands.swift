import ArgumentParser
import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess

// find-key, delete-key and delete-certificate: the key and certificate verbs of macOS
// `security` that keychainfs lacked. Deleting names exactly one item: a selector that matches
// several deletes nothing and says how to tell them apart.

/// kSecAttrKeyClass as `security find-key -t` names it.
enum KeyClassName: String, ExpressibleByArgument, CaseIterable {
    case `public`, `private`, symmetric
    var value: Int64 {
        switch self {
        case .public: 0
        case .private: 1
        case .symmetric: 2
        }
    }
}

/// What selects keys: the options `security find-key` has that keychainfs keys carry.
struct KeySelection: ParsableArguments {
    @Option(name: .customShort("l"), help: ArgumentHelp("Match the label exactly.", valueName: "label"))
    var label: String?
    @Option(
        name: .customShort("a"),
        help: ArgumentHelp(
            "Match the application label: hex, the SHA-1 of the public key (as find-identity prints it).",
            valueName: "hash"))
    var applicationLabel: String?
    @Option(name: .customShort("t"), help: ArgumentHelp("Key class: public, private or symmetric.", valueName: "type"))
    var type: KeyClassName?
    @Option(
        name: .customShort("c"), help: ArgumentHelp("Match the creator (a four-character code).", valueName: "creator"))
    var creator: String?

    var isEmpty: Bool { label == nil && applicationLabel == nil && type == nil && creator == nil }

    /// The query attributes; a bad value is a usage error, found before the vault is opened.
    func attributes() throws -> Attributes {
        var out = Attributes()
        try set(&out, .key, "label", label)
        try set(&out, .key, "creator", creator, option: "-c")
        if let applicationLabel {
            guard let bytes = parseHash(applicationLabel) else {
                throw CLIError.usage("-a: expected the application label in hexadecimal")
            }
            out[Schema.named("applicationLabel")] = .data(bytes)
        }
        if let type { out[Schema.named("keyClass")] = .number(type.value) }
        return out
    }
}

/// Hex as people paste it: either case, with or without colons or spaces (`openssl -fingerprint`).
func parseHash(_ text: String) -> [UInt8]? {
    let digits = Array(text.utf8.filter { $0 != UInt8(ascii: ":") && $0 != UInt8(ascii: " ") })
    guard !digits.isEmpty, digits.count % 2 == 0 else { return nil }
    var out: [UInt8] = []
    for i in stride(from: 0, to: digits.count, by: 2) {
        guard let byte = UInt8(String(decoding: digits[i..<i + 2], as: UTF8.self), radix: 16) else { return nil }
        out.append(byte)
    }
    return out
}

func keys(_ door: any KeychainDoor, matching attributes: Attributes) throws -> [KeychainItem] {
    try door.copyMatching(Query(.key, attributes, matchLimit: .all))
}

/// The one item of `found`, or a failure that names how many matched and how to choose.
func onlyOne(_ found: [KeychainItem], _ noun: String, hint: String) throws -> KeychainItem {
    guard found.count == 1 else {
        throw CLIError.failure("\(found.count) \(noun)s match; nothing deleted (\(hint))")
    }
    return found[0]
}

struct FindKey: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "find-key",
        abstract: "Find keys and print their attributes (never the key itself; export prints that).",
        usage: "keychainfs find-key [-l label] [-a hash] [-t public|private|symmetric] [-c creator]")
    @OptionGroup var vault: VaultOptions
    @OptionGroup var select: KeySelection

    func run() throws {
        let attributes = try select.attributes()
        let door = try vault.openDoor()
        for key in try keys(door, matching: attributes) {
            Output.write(Array(ItemPrinter.text(key, vault: door.vaultPath).utf8))
        }
    }
}

struct DeleteKey: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete-key",
        abstract:
            "Delete the one key the options select (not in macOS `security`, which deletes keys with their identity).",
        usage: "keychainfs delete-key (-l label | -a hash) [-t public|private|symmetric] [-c creator]")
    @OptionGroup var vault: VaultOptions
    @OptionGroup var select: KeySelection

    func run() throws {
        guard select.label != nil || select.applicationLabel != nil else {
            throw CLIError.usage("name the key to delete with -l label or -a hash")
        }
        let attributes = try select.attributes()
        let door = try vault.openDoor()
        let key = try onlyOne(
            keys(door, matching: attributes), "key", hint: "select one with -a HASH; find-key shows each key's klbl")
        try door.delete(Query(.key, persistentReference: key.id))
    }
}

struct DeleteCertificate: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete-certificate",
        abstract: "Delete the one certificate named by -c or -Z (its private key stays; delete-key removes that).",
        usage: "keychainfs delete-certificate (-c name | -Z hash) [-t]")
    @OptionGroup var vault: VaultOptions
    @Option(
        name: .customShort("c"),
        help: ArgumentHelp("The certificate whose label contains this string.", valueName: "name"))
    var name: String?
    @Option(
        name: .customShort("Z"),
        help: ArgumentHelp(
            "The certificate with this SHA-1 hash (as find-certificate -Z prints it).", valueName: "hash"))
    var hash: String?
    @Flag(name: .customShort("t"), help: "Accepted for macOS compatibility: keychainfs keeps no trust settings.")
    var trustSettings = false

    func validate() throws {
        if name == nil && hash == nil { throw ValidationError("name the certificate with -c name or -Z hash") }
        if let hash, parseHash(hash)?.count != 20 {
            throw ValidationError("-Z: expected a SHA-1 hash, 40 hexadecimal digits")
        }
    }

    func run() throws {
        let door = try vault.openDoor()
        let wanted = hash.flatMap(parseHash)
        let found = try certificates(door).filter { item in
            if let name, !(item.string(Schema.label) ?? "").containsIgnoringCase(name) { return false }
            if let wanted, CertificateData.fingerprint(item.data ?? []) != wanted { return false }
            return true
        }
        guard !found.isEmpty else {
            throw KeychainError(.itemNotFound, "no certificate matches \(describe())")
        }
        let certificate = try onlyOne(
            found, "certificate", hint: "select one with -Z HASH; find-certificate -a -Z lists them")
        try door.delete(Query(.certificate, persistentReference: certificate.id))
    }

    private func describe() -> String {
        [name.map { "-c \"\($0)\"" }, hash.map { "-Z \($0)" }].compactMap { $0 }.joined(separator: " ")
    }
}
