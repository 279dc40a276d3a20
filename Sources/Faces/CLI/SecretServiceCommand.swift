import ArgumentParser
import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import KeychainSecretService

/// `keychainfs secret-service`: the Secret Service provider (docs/secret-service.md) in its own
/// process, with its own opening of the vault, as the credential helpers open it.
struct SecretServiceCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "secret-service",
        abstract: "Serve the vault as org.freedesktop.secrets (the Secret Service API of libsecret) on D-Bus.",
        discussion: """
            Runs in the foreground until the bus connection ends. Connects to the session bus \
            ($DBUS_SESSION_BUS_ADDRESS, else $XDG_RUNTIME_DIR/bus) or to --address. Each caller acts in \
            the access groups its executable has under the vault's policy. If another provider owns \
            org.freedesktop.secrets, says which process and exits 1.
            """)

    @OptionGroup var vault: VaultOptions

    @Option(
        name: .long,
        help: ArgumentHelp(
            "The D-Bus address to serve on (as `dbus-daemon --print-address` prints it).", valueName: "address"))
    var address: String?

    @Option(
        name: .long,
        help: ArgumentHelp("The audit log (default: $XDG_STATE_HOME/keychainfs/audit.log).", valueName: "path"))
    var audit: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "The program that asks for the vault's passphrase when a client unlocks (default: the first pinentry on PATH).",
            valueName: "path"))
    var pinentry: String?

    @Flag(
        name: .long,
        help:
            "Start with the keychain locked, reading no passphrase now: the first client that unlocks it gets a pinentry prompt (a Prompt object)."
    )
    var locked = false

    @Flag(
        name: .long,
        help:
            "Serve group items to a client on its pid alone where the bus gives no process handle, without the identity prompt (gives up the protection docs/secret-service.md describes)."
    )
    var trustPid = false

    func validate() throws {
        try vault.validate()
        if locked && (vault.passphraseFile != nil || vault.passphraseFd != nil || vault.passphraseProgram != nil) {
            throw ValidationError("--locked reads no passphrase: give it without --passphrase-file, -fd or -program")
        }
    }

    func run() throws {
        let keychain = try Keychain.open(at: vault.path)
        if !locked {
            try keychain.unlock(
                passphrase: vault.passphrase.read(prompt: "passphrase for \(vault.path): "),
                acceptRollback: vault.acceptRollback)
        }
        keychain.onDamagedRow { Log.error("skipped a damaged row: \($0)") }
        let log = try AuditLog(path: audit ?? (KeychainPaths.stateDirectory() + "/audit.log"))
        let access = AccessLayer(keychain: keychain, audit: log)
        let provider = Self.provider(
            keychain: keychain, access: access,
            prompter: PinentryPresence(keychain: keychain, program: pinentry, reuseSeconds: 0),
            passphraseFile: vault.passphraseFile, trustPid: trustPid)
        let described: String
        do { described = try provider.connect(address: address) } catch { throw CLIError.failure(error.message) }
        Output.line(
            "keychainfs secret-service: serving \(SecretServiceProvider.busName) on \(described) (vault \(vault.path))")
        do { try provider.serve() } catch { throw CLIError.failure(error.message) }
    }

    /// The provider over an opened keychain, as `secret-service` and `mount -o secret_service`
    /// run it: Service.Unlock re-reads `passphraseFile` when there is one (a descriptor was read
    /// to its end, a terminal may be gone); otherwise a Prompt object asks the client's user
    /// through `prompter`.
    static func provider(
        keychain: Keychain, access: AccessLayer, prompter: PinentryPresence, passphraseFile: String?,
        trustPid: Bool = false
    ) -> SecretServiceProvider {
        SecretServiceProvider(access: access, prompter: prompter, trustBusPid: trustPid) {
            guard let file = passphraseFile else {
                throw BusError(
                    "org.freedesktop.Secret.Error.IsLocked",
                    "the keychain is locked and no passphrase file can be read again (start the provider with --passphrase-file)"
                )
            }
            do {
                try keychain.unlock(passphrase: PassphraseSource(file: file, fd: nil).read(prompt: ""))
            } catch let e as KeychainError {
                throw BusError(e.status.secretServiceErrorName, e.message)
            } catch {
                throw BusError("org.freedesktop.Secret.Error.IsLocked", "cannot read the passphrase file \(file)")
            }
        }
    }
}
