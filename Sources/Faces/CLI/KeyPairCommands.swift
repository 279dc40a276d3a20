import ArgumentParser
import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess

extension KeyAlgorithm: ExpressibleByArgument {}

/// `security create-keypair`: a key pair made in the vault. The private key is stored as a
/// `keys` item, not extractable unless asked; its public key is printed in OpenSSH form.
struct CreateKeypair: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create-keypair",
        abstract: "Create a key pair in the vault and print its public key (OpenSSH form).",
        discussion:
            "The private key never leaves the vault unless --extractable is given: /keys/<label> reads as the public key and `export` refuses it. The ssh agent (`keychainfs ssh-agent`) signs with it."
    )
    @OptionGroup var vault: VaultOptions
    @Option(
        name: .customShort("a"),
        help: ArgumentHelp(
            "Algorithm: \(KeyAlgorithm.allCases.map(\.rawValue).joined(separator: ", ")).", valueName: "alg"))
    var algorithm: KeyAlgorithm = .ed25519
    @Option(name: .customShort("l"), help: ArgumentHelp("Label (the name under /keys).", valueName: "label"))
    var label: String
    @Option(name: .long, help: ArgumentHelp("Access group (default: the caller's first group).", valueName: "group"))
    var accessGroup: String?
    @Option(
        name: .long,
        help: ArgumentHelp(
            "When the key is usable: whenUnlocked (default), afterFirstUnlock, whenUnlockedThisDeviceOnly, …",
            valueName: "class"))
    var accessible: String?
    @Option(
        name: .long, help: ArgumentHelp("Access control flags: userPresence or devicePasscode.", valueName: "flags"))
    var accessControl: String?
    @Flag(name: .long, help: "Allow the private key to be read and exported (kSecAttrIsExtractable).")
    var extractable = false
    @Option(
        name: .long,
        help: ArgumentHelp(
            "Offer the key through the ssh agent only to these hosts: names as in known_hosts (wildcards * and ?) or host key fingerprints (SHA256:…), comma-separated (the sshHosts attribute).",
            valueName: "hosts"))
    var hosts: String?

    func run() throws {
        guard !label.isEmpty else { throw CLIError.usage("-l: a key needs a label") }
        var attributes: Attributes = [Schema.label: .string(label), Schema.isExtractable: .bool(extractable)]
        try set(&attributes, .key, "accessGroup", accessGroup)
        try set(&attributes, .key, "sshHosts", hosts)
        try AddOptions.applyProtection(accessible: accessible, accessControl: accessControl, to: &attributes)
        let (_, publicKey) = try vault.openDoor().createKeyPair(algorithm, attributes)
        Output.line(publicKey)
    }
}
