import ArgumentParser
import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import KeychainAPI
import KeychainCrypto
import SystemPackage

/// Which vault and how to unlock it; shared by every command that opens a vault.
struct VaultOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp(
            "The vault file (default: $KEYCHAINFS_VAULT, else $XDG_DATA_HOME/keychainfs/default.vault).",
            valueName: "vault"))
    var vault: String?

    @Option(
        name: .long,
        help: ArgumentHelp("Read the passphrase from this file (one trailing newline is ignored).", valueName: "path"))
    var passphraseFile: String?

    @Option(
        name: .long,
        help: ArgumentHelp("Read the passphrase from this open file descriptor until EOF.", valueName: "fd"))
    var passphraseFd: Int32?

    @Flag(
        name: .long,
        help:
            "Open a vault older than the newest this device has seen (restored from a backup on purpose); resets the device's mark."
    )
    var acceptRollback = false

    @Flag(
        name: .long,
        help:
            "Open a vault whose Argon2id parameters differ from those this device last unlocked it with (changed on purpose elsewhere)."
    )
    var acceptKDFChange = false

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Run this shell command and read the passphrase from its standard output.", valueName: "command"))
    var passphraseProgram: String?

    var path: String { vault ?? KeychainPaths.defaultVault() }
    var passphrase: PassphraseSource {
        PassphraseSource(file: passphraseFile, fd: passphraseFd, program: passphraseProgram)
    }

    func validate() throws {
        if [passphraseFile != nil, passphraseFd != nil, passphraseProgram != nil].filter({ $0 }).count > 1 {
            throw ValidationError("give one of --passphrase-file, --passphrase-fd and --passphrase-program")
        }
        // Checked now, before anything is opened: a descriptor the caller did not open would
        // otherwise be read once the vault's own files have taken its number.
        if let fd = passphraseFd, fcntl(fd, F_GETFD) == -1 {
            throw CLIError.system("cannot read passphrase descriptor \(fd)", Errno(rawValue: errno))
        }
    }

    /// The door a one-shot command uses (docs/service.md): the keychain service of this vault
    /// when one runs (no passphrase asked, no KDF; the service decides by this executable's
    /// access groups, as the mount would), else the vault opened and unlocked here, where the
    /// passphrase's holder acts in every access group. Either way each decision is audited.
    /// A passphrase given on purpose (`--passphrase-file`, `-fd`, `-program`) is proved to the
    /// service, and the command then acts as its holder there too.
    func openDoor() throws -> any KeychainDoor {
        let door = try Doors.open(vault: path) { try directSession() }
        guard let client = door as? ServiceClient, passphrase.isGiven else { return door }
        let given = try passphrase.read(prompt: "passphrase for \(path): ")
        // A locked service answers nothing; the passphrase's holder then opens the vault itself
        // under the service's own name of it (as before there was a service).
        if try client.status().state.hasPrefix("locked") { return try directSession(given) }
        try client.prove(passphrase: given)
        return client
    }

    /// The door for a change the passphrase authorises (the access policy): the service when
    /// one holds the vault unlocked (it checks `given` itself, one KDF there), else the vault
    /// opened and unlocked here with it. Nothing is proved first: the change carries it.
    func openDoor(holding given: SecureBytes) throws -> any KeychainDoor {
        let door = try Doors.open(vault: path) { try directSession(given) }
        if let client = door as? ServiceClient, try client.status().state.hasPrefix("locked") {
            return try directSession(given)
        }
        return door
    }

    /// The vault opened and unlocked here, its decisions audited (`via=cli`).
    private func directSession(_ given: SecureBytes? = nil) throws -> KeychainSession {
        let keychain = try openUnlocked(given, incremental: true)
        let state = KeychainPaths.stateDirectory()
        try? makeDirectories(state, mode: 0o700)
        return KeychainSession(
            keychain: keychain, caller: try holderCaller(keychain), audit: try? AuditLog(path: state + "/audit.log"),
            via: "cli")
    }

    /// Opens the vault without unlocking it (a long-running face that asks for the passphrase
    /// when it is first needed: `ssh-agent --locked`).
    func openLocked() throws -> Keychain {
        try Doors.checkDirectOpen(vault: path)
        let keychain = try Keychain.open(at: path)
        keychain.onDamagedRow { Output.errorLine("keychainfs: warning: skipped a damaged row: \($0)") }
        return keychain
    }

    /// Opens and unlocks the vault. The CLI holds the passphrase, so it acts in every access
    /// group of the policy (with `default` first, where its new items go).
    /// `incremental`: check only what the command reads, as the mount does (docs/security.md,
    /// "Mounting"), not every row first: a one-shot read of a 100,000-item vault then answers
    /// within the KDF and milliseconds.
    func openUnlocked(_ given: SecureBytes? = nil, incremental: Bool = false) throws -> Keychain {
        try Doors.checkDirectOpen(vault: path)
        let keychain = try Keychain.open(at: path)
        if incremental { _ = keychain.withoutBackgroundIntegrityPass() }
        if let given {
            try keychain.unlock(
                passphrase: given, acceptRollback: acceptRollback, acceptKDFChange: acceptKDFChange,
                incrementalCheck: incremental)
        } else {
            try passphrase.unlocking(prompt: "passphrase for \(path): ") {
                try keychain.unlock(
                    passphrase: $0, acceptRollback: acceptRollback, acceptKDFChange: acceptKDFChange,
                    incrementalCheck: incremental)
            }
        }
        keychain.onDamagedRow { Output.errorLine("keychainfs: warning: skipped a damaged row: \($0)") }
        return keychain
    }

    /// Who this command is when it opened the vault with its passphrase: the holder, in every
    /// group of the policy, user presence asked through pinentry as the mount asks it (exit 36
    /// with no terminal or display). Pass it to every core call of a direct open: a call
    /// without a caller acts for the default group only.
    func holderCaller(_ keychain: Keychain) throws -> Caller {
        try DirectCaller.holder(of: keychain, describedAs: "keychainfs CLI (pid \(getpid()))")
    }
}

/// Options common to adding, finding and deleting passwords.
struct CommonItemOptions: ParsableArguments {
    @Option(name: .customShort("a"), help: ArgumentHelp("Account name.", valueName: "account"))
    var account: String?
    @Option(name: .customShort("l"), help: ArgumentHelp("Label.", valueName: "label"))
    var label: String?
    @Option(name: .customShort("j"), help: ArgumentHelp("Comment string.", valueName: "comment"))
    var comment: String?
    @Option(name: .customShort("D"), help: ArgumentHelp("Kind (kSecAttrDescription).", valueName: "kind"))
    var kind: String?
    @Option(
        name: .customShort("c"),
        help: ArgumentHelp("Creator (a four-character code or a number).", valueName: "creator"))
    var creator: String?
    @Option(name: .customShort("C"), help: ArgumentHelp("Type (a four-character code or a number).", valueName: "type"))
    var type: String?
    @Option(name: .long, help: ArgumentHelp("Access group (default: the caller's first group).", valueName: "group"))
    var accessGroup: String?

    func attributes(_ itemClass: ItemClass) throws -> Attributes {
        var out = Attributes()
        try set(&out, itemClass, "account", account)
        try set(&out, itemClass, "label", label)
        try set(&out, itemClass, "comment", comment)
        try set(&out, itemClass, "description", kind)
        try set(&out, itemClass, "accessGroup", accessGroup)
        // Four-character codes ('aapl') or numbers, as AttributeText reads them everywhere.
        try set(&out, itemClass, "creator", creator, option: "-c")
        try set(&out, itemClass, "type", type, option: "-C")
        return out
    }
}

/// Options that only make sense when adding.
struct AddOptions: ParsableArguments {
    @Option(
        name: .customShort("w"),
        help: ArgumentHelp("The secret. Visible to other processes in argv: prefer stdin.", valueName: "password"))
    var password: String?
    @Flag(name: .customShort("U"), help: "Update the item if it already exists.")
    var updateIfPresent = false
    @Option(
        name: .long,
        help: ArgumentHelp(
            "When the data is readable: whenUnlocked (default), afterFirstUnlock, whenUnlockedThisDeviceOnly, …",
            valueName: "class"))
    var accessible: String?
    @Option(
        name: .long, help: ArgumentHelp("Access control flags: userPresence or devicePasscode.", valueName: "flags"))
    var accessControl: String?
    @Flag(name: .long, help: "Mark the item synchronizable.")
    var synchronizable = false
    @OptionGroup var generation: GenerationOptions

    func validate() throws {
        if generation.generate && password != nil { throw ValidationError("give -w or --generate, not both") }
    }

    /// Whether the secret comes from standard input (neither -w nor --generate).
    var readsStandardInput: Bool { password == nil && !generation.generate }

    func apply(to attributes: inout Attributes, _ itemClass: ItemClass) throws {
        try Self.applyProtection(accessible: accessible, accessControl: accessControl, to: &attributes)
        if synchronizable { attributes[Schema.synchronizable] = .bool(true) }
    }

    /// `--accessible` and `--access-control` as attributes; shared with `create-keypair`.
    static func applyProtection(accessible: String?, accessControl: String?, to attributes: inout Attributes) throws {
        let protection: Accessibility
        if let accessible {
            guard let a = Accessibility(text: accessible) else {
                throw CLIError.usage(
                    "--accessible: unknown class '\(accessible)'; expected one of \(Accessibility.allCases.map(\.name).joined(separator: ", "))"
                )
            }
            protection = a
        } else {
            protection = .whenUnlocked
        }
        if let accessControl {
            guard let flags = AccessControlFlags(text: accessControl), !flags.isEmpty else {
                throw CLIError.usage(
                    "--access-control: expected userPresence or devicePasscode, not '\(accessControl)'")
            }
            attributes[Schema.accessControl] = .accessControl(AccessControl(protection: protection, flags: flags))
        } else if accessible != nil {
            attributes[Schema.accessible] = .accessibility(protection)
        }
    }

    /// The secret: generated, `-w`, else stdin (a no-echo prompt, typed twice, when stdin is a
    /// terminal).
    func secret() throws -> [UInt8] {
        if generation.generate { return generation.recipe.generate() }
        if let password {
            return Array(password.utf8)
        }
        if isatty(0) == 1 {
            guard let first = try SecretInput.prompt("password data for new item: "),
                let second = try SecretInput.prompt("retype password for new item: ")
            else {
                throw CLIError.failure("no terminal to prompt on")
            }
            guard first == second else { throw CLIError.failure("the passwords do not match") }
            return first
        }
        return try SecretInput.readAll(fd: 0, limit: Keychain.maxDataSize, what: "the secret on standard input")
    }
}

/// Sets an attribute from an option's text; a value that does not parse is a usage error,
/// naming the option when it is given.
func set(
    _ attributes: inout Attributes, _ itemClass: ItemClass, _ name: String, _ text: String?, option: String? = nil
) throws {
    guard let text else { return }
    let attribute = try Schema.attribute(named: name, in: itemClass)
    do {
        attributes[attribute] = try AttributeText.parse(attribute, Array(text.utf8))
    } catch let e as KeychainError {
        throw CLIError.usage((option.map { "\($0): " } ?? "") + e.message)
    }
}
