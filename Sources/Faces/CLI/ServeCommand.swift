import ArgumentParser
import FoundationEssentials
import Glibc
import Keychain
import KeychainAPI

/// `keychainfs serve [VAULT]`: the keychain service without a mount (docs/service.md): the API
/// socket for the CLI, the credential helpers, `run` and `inject`, and with `-o ssh_agent` or
/// `-o secret_service` those faces, over one unlocked vault.
struct Serve: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Hold a vault unlocked and serve its faces without a mount (the keychain service).",
        usage: "keychainfs serve [options] [vault] [-f] [-o option[,option...]]",
        discussion: """
            Without -f the service goes to the background once it is listening, logging to \
            $XDG_STATE_HOME/keychainfs/daemon.log. It takes the mount's -o options that are not about \
            the mount: passphrase_file, passphrase_program, log, locked, lock_after, pinentry, presence_reuse, \
            presence_timeout, audit, secret_service, secret_service_address, ssh_agent, ssh_agent_socket. \
            Stop it with SIGTERM (its pid is in the log line and in 'keychainfs status --vault VAULT').
            """)
    @OptionGroup var vault: VaultOptions
    @Argument(help: ArgumentHelp("The vault (else --vault or the default).", valueName: "vault"))
    var path: String?
    @Flag(name: .customShort("f"), help: "Stay in the foreground.")
    var foreground = false
    @Option(
        name: .customShort("o"),
        help: ArgumentHelp("Service options, comma-separated (as mount's); may be repeated.", valueName: "options"))
    var options: [String] = []
    @Option(name: .long, help: .hidden) var readyFd: Int32?
    @Option(name: .long, help: .hidden) var masterKeyFd: Int32?

    func validate() throws {
        if path != nil && vault.vault != nil {
            throw ValidationError("give the vault as an argument or with --vault, not both")
        }
    }

    func run() throws {
        let parsed = try ParsedMountOptions(options)
        if let used = MountOption.names(options).first(where: MountOption.aboutTheMount.contains) {
            throw CLIError.usage("-o \(used) is about a mount; serve has none")
        }
        let vaultPath = absolutePath(path ?? vault.path)
        let daemon = ServiceDaemon(
            vault: vault, vaultPath: vaultPath, mountpoint: nil, options: options, readyFd: readyFd,
            masterKeyFd: masterKeyFd)
        if foreground { try daemon.runDaemon(parsed) } else { try daemon.spawnDaemon(parsed) }
    }
}
