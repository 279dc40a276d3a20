import ArgumentParser
import FoundationEssentials
import Glibc
import SystemPackage
import Keychain
import KeychainCrypto
import KeychainAccess
import KeychainFS
import KeychainSecretService
import KeychainAPI
import KeychainService
import KeychainSSHAgent
import CPlatform

struct Mount: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Mount a vault as a directory.",
        usage: "keychainfs mount [options] [vault] mountpoint [-f] [-o opt[,opt...]]",
        discussion: """
            keychainfs mount [VAULT] MOUNTPOINT. Without -f the daemon goes to the background once the mount \
            is live, logging to $XDG_STATE_HOME/keychainfs/daemon.log.

            \(MountOption.helpText)
            """)
    @OptionGroup var vault: VaultOptions
    @Argument(
        help: ArgumentHelp(
            "The vault (else --vault or the default) and the mountpoint.", valueName: "[vault] mountpoint"))
    var paths: [String]
    @Flag(name: .customShort("f"), help: "Stay in the foreground.")
    var foreground = false
    @Option(
        name: .customShort("o"),
        help: ArgumentHelp("Mount options, comma-separated (the table above); may be repeated.", valueName: "options"))
    var options: [String] = []
    @Option(name: .long, help: .hidden) var readyFd: Int32?
    /// The daemon `spawnDaemon` starts reads the vault's master key here (`MasterKeyPipe`).
    @Option(name: .long, help: .hidden) var masterKeyFd: Int32?

    func validate() throws {
        guard (1...2).contains(paths.count) else { throw ValidationError("expected [VAULT] MOUNTPOINT") }
        if paths.count == 2 && vault.vault != nil {
            throw ValidationError("give the vault as an argument or with --vault, not both")
        }
    }

    var vaultPath: String { absolutePath(paths.count == 2 ? paths[0] : vault.path) }
    var mountpoint: String { absolutePath(paths.last!) }

    func run() throws {
        let parsed = try ParsedMountOptions(options)
        try prepareMountpoint(nonempty: parsed.nonempty)
        // A service that holds the vault already (`serve`, or started by D-Bus activation) mounts
        // it itself: one keychain, one more face; no passphrase is asked.
        if !foreground, let running = try? ServiceClient.connect(vault: vaultPath) {
            try join(running, parsed)
            return
        }
        let daemon = ServiceDaemon(
            vault: vault, vaultPath: vaultPath, mountpoint: mountpoint, options: options, readyFd: readyFd,
            masterKeyFd: masterKeyFd)
        if foreground {
            try daemon.runDaemon(parsed)
        } else {
            try daemon.spawnDaemon(parsed)
        }
    }

    /// Asks the running service to mount (docs/service.md, "Joining a running service"). Only
    /// options about the mount travel; one about the service is the service's already, and is
    /// refused rather than silently dropped (a passphrase option is not needed and is ignored).
    func join(_ running: ServiceClient, _ parsed: ParsedMountOptions) throws {
        let unneeded: Set<String> = ["passphrase_file", "passphrase_program"]
        for name in MountOption.names(options) {
            guard MountOption.aboutTheMount.contains(name) || unneeded.contains(name) else {
                throw CLIError.usage(
                    "-o \(name) is about the keychain service, and one runs for \(vaultPath) already (pid \(running.servicePID)) with its own options; mount without it, or stop that service first"
                )
            }
        }
        var request = MountRequest(mountpoint: mountpoint)
        request.allowOther = parsed.fuse.allowOther
        request.defaultPermissions = parsed.fuse.defaultPermissions
        request.debug = parsed.fuse.debug
        request.cacheMilliseconds = Int64((parsed.fuse.cacheSeconds * 1000).rounded())
        let state: String
        do { state = try running.mount(request) } catch let e as KeychainError where e.status == .duplicateItem {
            // Mounted already (its own mount, or one it joined): a failure, as a second daemon's was.
            throw CLIError.failure(e.message)
        }
        Output.errorLine(
            "keychainfs: mounted \(vaultPath) on \(mountpoint) (joined the keychain service, pid \(running.servicePID); \(state.split(separator: " ").first ?? ""))"
        )
    }

    /// Refuses a live mount, clears a stale one (a killed daemon), checks the directory, and
    /// refuses one with entries unless `-o nonempty` (as fuse2 and sshfs did: files there would
    /// vanish from view while mounted, and a script writing into the mountpoint before the mount
    /// is live would write beside the vault, not into it).
    func prepareMountpoint(nonempty: Bool) throws {
        if MountTable.isKeychainMount(mountpoint) {
            guard MountTable.isStale(mountpoint) else {
                throw CLIError.failure("\(mountpoint) is already a keychainfs mount")
            }
            _ = MountTable.fusermount(["-u", "-z", mountpoint])
            Output.errorLine("keychainfs: cleared a stale mount on \(mountpoint)")
        }
        var isDirectory = false
        guard FileManager.default.fileExists(atPath: mountpoint, isDirectory: &isDirectory), isDirectory
        else {
            throw CLIError.failure("mountpoint \(mountpoint) is not a directory")
        }
        if !nonempty, let entries = try? FileManager.default.contentsOfDirectory(atPath: mountpoint), !entries.isEmpty {
            throw CLIError.failure(
                "mountpoint \(mountpoint) is not empty (\(entries.count) entries); mount with -o nonempty to hide them while mounted"
            )
        }
    }
}

struct Unmount: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Unmount a keychainfs mount (a stale one too).")
    @Argument(help: ArgumentHelp("The mountpoint.", valueName: "mountpoint")) var mountpoint: String

    func run() throws {
        let path = absolutePath(mountpoint)
        guard MountTable.isKeychainMount(path) else { throw CLIError.failure("\(path) is not a keychainfs mount") }
        // A call in flight on the mount makes it busy for that moment, the daemon's replay of a
        // change made elsewhere to the mount's watchers too (docs/paths.md): the daemon pauses
        // its replays first, and a busy answer is tried again briefly.
        if let socket = try? controlSocket(of: path) { _ = try? ControlServer.request(socket: socket, "quiesce") }
        for attempt in 0..<10 {
            if attempt > 0 { usleep(20_000) }
            if MountTable.fusermount(["-u", path]) == 0 { return }
            guard !MountTable.isStale(path), MountTable.isKeychainMount(path) else { break }
        }
        // A killed daemon leaves a mount that only a lazy unmount clears.
        if MountTable.isStale(path) && MountTable.fusermount(["-u", "-z", path]) == 0 { return }
        throw CLIError.failure("cannot unmount \(path): it is busy (a process has a file or directory open there)")
    }
}

/// Finds a mount's control socket through the mount's root xattr.
func controlSocket(of mountpoint: String) throws -> String {
    let path = absolutePath(mountpoint)
    guard MountTable.isKeychainMount(path) else { throw CLIError.failure("\(path) is not a keychainfs mount") }
    var buffer = [UInt8](repeating: 0, count: 4096)
    let n = buffer.withUnsafeMutableBytes { getxattr(path, KeychainFileSystem.controlXattr, $0.baseAddress, $0.count) }
    guard n > 0 else {
        let cause = Errno(rawValue: errno)  // before isStale's statvfs overwrites errno
        if MountTable.isStale(path) {
            throw CLIError.failure("\(path) is a stale mount (its daemon died); run 'keychainfs unmount \(path)'")
        }
        throw CLIError(message: "\(path): the daemon does not answer (\(cause))", exitCode: 1, cause: cause)
    }
    return String(decoding: buffer[0..<n], as: UTF8.self)
}

/// Sends one control request and turns an error reply into a KeychainError.
func control(_ mountpoint: String, _ command: String, payload: SecureBytes? = nil) throws -> String {
    let socket = try controlSocket(of: mountpoint)
    let reply: String
    do { reply = try ControlServer.request(socket: socket, command, payload: payload) } catch let e as Errno {
        throw CLIError.system("cannot reach the daemon of \(mountpoint) at \(socket)", e)
    }
    if reply.hasPrefix("ok ") { return String(reply.dropFirst(3)) }
    let parts = reply.split(separator: " ", maxSplits: 2).map(String.init)
    guard parts.count == 3, parts[0] == "error", let code = Int32(parts[1]) else {
        throw CLIError.failure("unexpected reply from the daemon: \(reply.prefix(80))")
    }
    throw KeychainError(KeychainStatus(rawValue: code), parts[2])
}

func printState(_ mountpoint: String, _ state: String, json: Bool = false) {
    let parts = state.split(separator: " ").map(String.init)
    if json {
        var object: [String: JSONValue] = [
            "path": .string(absolutePath(mountpoint)), "state": .string(parts.first ?? state),
        ]
        if parts.count == 2 && parts[1] != "never-unlocked" { object["since"] = .string(parts[1]) }
        Output.line(JSONText.text(.object(object)))
        return
    }
    if parts.count == 2 && parts[1] == "never-unlocked" {
        Output.line("\(absolutePath(mountpoint)): locked (not unlocked since it was mounted)")
    } else if parts.count == 2 {
        Output.line("\(absolutePath(mountpoint)): \(parts[0]) since \(parts[1])")
    } else {
        Output.line("\(absolutePath(mountpoint)): \(state)")
    }
}

/// The keychain service of `vault` (or the default vault), for `lock`, `unlock` and `status`
/// without a mountpoint; an error when none runs.
func service(of vault: String?) throws -> (ServiceClient, String) {
    let path = absolutePath(vault ?? KeychainPaths.defaultVault())
    guard let client = try ServiceClient.connect(vault: path) else {
        throw CLIError.failure(
            "no keychain service holds \(path) (start one with 'keychainfs mount' or 'keychainfs serve')")
    }
    return (client, path)
}

/// What `lock`, `unlock` and `status` act on: a mountpoint, or `--vault` (the service of that
/// vault, mounted or not).
struct ServiceTarget: ParsableArguments {
    @Argument(
        help: ArgumentHelp(
            "The mountpoint (else the service of --vault or the default vault).", valueName: "mountpoint"))
    var mountpoint: String?
    @Option(name: .long, help: ArgumentHelp("The vault whose keychain service to address.", valueName: "vault"))
    var vault: String?

    func validate() throws {
        if mountpoint != nil && vault != nil { throw ValidationError("give a mountpoint or --vault, not both") }
    }
}

struct Lock: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Lock a keychain service (its mount, ssh agent and Secret Service): WhenUnlocked data becomes unreadable.")
    @OptionGroup var target: ServiceTarget
    func run() throws {
        if let mountpoint = target.mountpoint { return printState(mountpoint, try control(mountpoint, "lock")) }
        let (client, path) = try service(of: target.vault)
        printState(path, try client.lock())
    }
}

struct Unlock: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Unlock a keychain service with its passphrase.")
    @OptionGroup var target: ServiceTarget
    @Option(name: .long, help: ArgumentHelp("Read the passphrase from this file.", valueName: "path"))
    var passphraseFile: String?
    @Option(name: .long, help: ArgumentHelp("Read the passphrase from this descriptor.", valueName: "fd"))
    var passphraseFd: Int32?
    func run() throws {
        if let mountpoint = target.mountpoint {
            _ = try controlSocket(of: mountpoint)
            let passphrase = try PassphraseSource(file: passphraseFile, fd: passphraseFd).read(
                prompt: "passphrase for \(absolutePath(mountpoint)): ")
            return printState(mountpoint, try control(mountpoint, "unlock", payload: passphrase))
        }
        let (client, path) = try service(of: target.vault)
        let passphrase = try PassphraseSource(file: passphraseFile, fd: passphraseFd).read(
            prompt: "passphrase for \(path): ")
        printState(path, try client.unlock(passphrase: passphrase))
    }
}

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Say whether a keychain service (a mount, or --vault) is locked, and since when.")
    @OptionGroup var target: ServiceTarget
    @Flag(
        name: .long,
        help: "Print one JSON object: path, state (locked or unlocked), since (absent when never unlocked).")
    var json = false
    func run() throws {
        if let mountpoint = target.mountpoint {
            return printState(mountpoint, try control(mountpoint, "status"), json: json)
        }
        let (client, path) = try service(of: target.vault)
        printState(path, try client.status().state, json: json)
    }
}
