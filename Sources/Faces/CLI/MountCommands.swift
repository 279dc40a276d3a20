import ArgumentParser
import Foundation
import SystemPackage
import Keychain
import KeychainCrypto
import KeychainAccess
import KeychainFS
import KeychainSecretService
import KeychainService
import CPlatform

struct Mount: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Mount a vault as a directory.",
        usage: "keychainfs mount [options] [vault] mountpoint [-f] [-o option[,option...]]",
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
        try prepareMountpoint()
        if foreground {
            try runDaemon(parsed)
        } else {
            try spawnDaemon(parsed)
        }
    }

    /// Refuses a live mount, clears a stale one (a killed daemon), checks the directory.
    func prepareMountpoint() throws {
        if MountTable.isKeychainMount(mountpoint) {
            guard MountTable.isStale(mountpoint) else {
                throw CLIError.failure("\(mountpoint) is already a keychainfs mount")
            }
            _ = MountTable.fusermount(["-u", "-z", mountpoint])
            Output.errorLine("keychainfs: cleared a stale mount on \(mountpoint)")
        }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: mountpoint, isDirectory: &isDirectory), isDirectory.boolValue
        else {
            throw CLIError.failure("mountpoint \(mountpoint) is not a directory")
        }
    }

    func passphraseSource(_ parsed: ParsedMountOptions) -> PassphraseSource {
        var source = vault.passphrase
        if !source.isGiven {
            source.file = parsed.passphraseFile
            source.program = parsed.passphraseProgram
        }
        return source
    }

    /// Foreground: the daemon itself. Reports readiness (or the failure) on --ready-fd.
    func runDaemon(_ parsed: ParsedMountOptions) throws {
        func report(_ line: String) {
            guard let fd = readyFd else { return }
            _ = (line + "\n").withCString { write(fd, $0, strlen($0)) }
            close(fd)
        }
        do {
            // One daemon per vault file: a second would serve stale views of the same items.
            let lock = try DaemonLock.acquire(vault: vaultPath)
            defer { lock?.release() }

            let keychain = try Keychain.open(at: vaultPath)
            // The incremental check (docs/security.md, "Mounting"): the unlock checks the
            // manifest's tag and bucket table; each bucket's rows are checked at its first read
            // and by a background pass. A failure makes every read EIO and is logged once here.
            keychain.onIntegrityFailure { Log.error("\(vaultPath): \($0)") }
            if let masterKeyFd {
                // The CLI that started this daemon ran the Argon2id (spawnDaemon).
                try keychain.unlock(
                    masterKey: try MasterKeyPipe.receive(fd: masterKeyFd), acceptRollback: vault.acceptRollback,
                    incrementalCheck: true)
            } else if !parsed.fuse.startLocked {
                try keychain.unlock(
                    passphrase: passphraseSource(parsed).read(prompt: "passphrase for \(vaultPath): "),
                    acceptRollback: vault.acceptRollback, incrementalCheck: true)
            }
            var fuseOptions = parsed.fuse
            fuseOptions.fsname = vaultPath
            // Buffered: one write(2) a second instead of one per open (AuditLog says what is
            // kept at which stop); flushed when the loop ends and by `status`/`lock`.
            let audit = try AuditLog(
                path: parsed.audit ?? (KeychainPaths.stateDirectory() + "/audit.log"), buffered: true)
            defer { audit.flush() }
            let fs = KeychainFileSystem(keychain: keychain, audit: audit)
            let pinentry = PinentryPresence(
                keychain: keychain, program: parsed.pinentry,
                reuseSeconds: parsed.presenceReuse, timeoutSeconds: parsed.presenceTimeout)
            fs.access.presence = pinentry
            // Connected before the mount goes live: a name another provider owns fails the mount.
            let secretService =
                try parsed.secretService ? connectSecretService(parsed, keychain, fs.access, pinentry) : nil
            let control = try ControlServer(path: controlSocketPath(), keychain: keychain, audit: audit)
            fs.controlSocketPath = control.path
            control.start()
            defer { control.stop() }
            // The keychain service's API socket (docs/service.md): the CLI, the credential
            // helpers, `run` and `inject` use this unlocked vault instead of opening it again.
            let api = try APIServer(keychain: keychain, access: fs.access)
            api.start()
            defer { api.stop() }
            let session = FuseSession(fs: fs, mountpoint: mountpoint, options: fuseOptions)
            if let seconds = fuseOptions.lockAfter {
                let idle = IdleLocker(keychain: keychain, seconds: seconds)
                session.onRequest = { idle.touch() }
                idle.start()
            }
            do { try session.mount() } catch {
                throw CLIError.failure(
                    "cannot mount on \(mountpoint) (is /dev/fuse usable, and fusermount3 installed?)")
            }
            Log.info("mounted \(vaultPath) on \(mountpoint)")
            if let secretService {
                Thread.detachNewThread {
                    do { try secretService.serve() } catch {
                        Log.error("secret service: \(error); the mount goes on without it")
                    }
                }
            }
            report("ok")
            // A Type=notify unit (mount -f under systemd) is started now that the mount is live.
            SystemdNotify.send("READY=1")
            let rc = session.run()
            audit.flush()
            SystemdNotify.send("STOPPING=1")
            Log.info("unmounted \(mountpoint)")
            // libfuse returns the number of the signal that ended the loop: SIGTERM, SIGINT and
            // SIGHUP are the documented ways to stop the daemon, so they are a clean exit.
            if rc != 0 && ![SIGTERM, SIGINT, SIGHUP].contains(abs(rc)) {
                throw CLIError.failure("the FUSE session ended with an error (\(rc))")
            }
        } catch let e as KeychainError {
            report("error \(e.status.exitCode) \(e.message)")
            throw e
        } catch let e as CLIError {
            report("error \(e.exitCode) \(e.message)")
            throw e
        }
    }

    /// `-o secret_service`: the provider of `keychainfs secret-service` over the mount's vault,
    /// access layer (policy, presence, audit) and pinentry (its timeout, and one vault-unlock
    /// prompt at a time for both faces), connected and owning its name.
    func connectSecretService(
        _ parsed: ParsedMountOptions, _ keychain: Keychain, _ access: AccessLayer, _ pinentry: PinentryPresence
    ) throws -> SecretServiceProvider {
        let provider = SecretServiceCommand.provider(
            keychain: keychain, access: access, prompter: pinentry,
            passphraseFile: vault.passphraseFile ?? parsed.passphraseFile)
        do {
            let described = try provider.connect(address: parsed.secretServiceAddress)
            Log.info("secret service: serving \(SecretServiceProvider.busName) on \(described)")
        } catch {
            throw CLIError.failure(error.message)
        }
        return provider
    }

    /// The control socket: in $XDG_RUNTIME_DIR/keychainfs when there is one, else the state
    /// directory; a path too long for sun_path falls back to a private directory in /tmp.
    func controlSocketPath() -> String {
        let name = "/ctl-\(getpid()).sock"
        var dir = KeychainPaths.stateDirectory()
        if let runtime = ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"], runtime.hasPrefix("/") {
            dir = runtime + "/keychainfs"
        }
        if (dir + name).utf8.count > 100 { dir = "/tmp/keychainfs-\(getuid())" }
        return dir + name
    }

    /// Background: start `mount -f` in a new session with the vault's master key on a pipe
    /// (never argv, env or a file), logs to a file, and return once it says the mount is live.
    /// The passphrase is stretched here, once (a wrong one fails here, with the message and
    /// exit code every command gives); the daemon unlocks with the key and runs the integrity
    /// check, so a mount costs one Argon2id and one scan (docs/security.md, "Mounting").
    func spawnDaemon(_ parsed: ParsedMountOptions) throws {
        let keychain = try Keychain.open(at: vaultPath)
        var masterKey: SecureBytes?
        if !parsed.fuse.startLocked {
            let passphrase = try passphraseSource(parsed).read(prompt: "passphrase for \(vaultPath): ")
            masterKey = try keychain.masterKey(passphrase: passphrase, acceptRollback: vault.acceptRollback)
        }
        let logPath = parsed.log ?? (KeychainPaths.stateDirectory() + "/daemon.log")
        try makeDirectories(KeychainPaths.parent(of: logPath), mode: 0o700)
        var secretPipe: [Int32] = [0, 0], readyPipe: [Int32] = [0, 0]
        // Close-on-exec: the daemon must hold only the ends dup2'ed to fds 3 and 4, or its own
        // copy of the write end would keep it waiting for the passphrase's EOF forever.
        guard pipe(&secretPipe) == 0, pipe(&readyPipe) == 0 else {
            throw CLIError.system("pipe", Errno(rawValue: errno))
        }
        for fd in secretPipe + readyPipe { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }

        var args = ["keychainfs", "mount", vaultPath, mountpoint, "-f", "--ready-fd", "4"]
        if masterKey != nil { args += ["--master-key-fd", "3"] }
        if vault.acceptRollback { args.append("--accept-rollback") }
        for o in options { args += ["-o", o] }
        let pid: pid_t
        do {
            pid = try ChildProcess.spawn(
                "/proc/self/exe", arguments: args,
                descriptors: [
                    (0, .null), (1, .appending(logPath)), (2, .duplicate(1)),
                    (3, .duplicate(secretPipe[0])), (4, .duplicate(readyPipe[1])),
                ],
                newSession: true)
        } catch {
            close(secretPipe[0]); close(readyPipe[1]); close(secretPipe[1]); close(readyPipe[0])
            throw CLIError.system("cannot start the daemon", error)
        }
        close(secretPipe[0]); close(readyPipe[1])
        if let masterKey { MasterKeyPipe.send(masterKey, fd: secretPipe[1]) }
        masterKey = nil  // wiped (sodium_free) now that it is in the pipe
        close(secretPipe[1])

        var reply = [UInt8]()
        var byte: UInt8 = 0
        while read(readyPipe[0], &byte, 1) == 1 && byte != 10 { reply.append(byte) }
        close(readyPipe[0])
        let line = String(decoding: reply, as: UTF8.self)
        if line == "ok" {
            Output.errorLine("keychainfs: mounted \(vaultPath) on \(mountpoint) (daemon pid \(pid), log \(logPath))")
            return
        }
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        if line.hasPrefix("error ") {
            let rest = line.dropFirst(6)
            let code = Int32(rest.prefix { $0 != " " }) ?? 1
            throw CLIError(message: String(rest.drop { $0 != " " }.dropFirst()), exitCode: code)
        }
        throw CLIError.failure("the daemon exited before the mount was live; see \(logPath)")
    }
}

struct Unmount: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Unmount a keychainfs mount (a stale one too).")
    @Argument(help: ArgumentHelp("The mountpoint.", valueName: "mountpoint")) var mountpoint: String

    func run() throws {
        let path = absolutePath(mountpoint)
        guard MountTable.isKeychainMount(path) else { throw CLIError.failure("\(path) is not a keychainfs mount") }
        if MountTable.fusermount(["-u", path]) == 0 { return }
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

func printState(_ mountpoint: String, _ state: String) {
    let parts = state.split(separator: " ").map(String.init)
    if parts.count == 2 && parts[1] == "never-unlocked" {
        Output.line("\(absolutePath(mountpoint)): locked (not unlocked since it was mounted)")
    } else if parts.count == 2 {
        Output.line("\(absolutePath(mountpoint)): \(parts[0]) since \(parts[1])")
    } else {
        Output.line("\(absolutePath(mountpoint)): \(state)")
    }
}

struct Lock: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Lock a mounted keychain: WhenUnlocked data becomes unreadable.")
    @Argument(help: "The mountpoint.") var mountpoint: String
    func run() throws { printState(mountpoint, try control(mountpoint, "lock")) }
}

struct Unlock: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Unlock a mounted keychain with its passphrase.")
    @Argument(help: "The mountpoint.") var mountpoint: String
    @Option(name: .long, help: ArgumentHelp("Read the passphrase from this file.", valueName: "path"))
    var passphraseFile: String?
    @Option(name: .long, help: ArgumentHelp("Read the passphrase from this descriptor.", valueName: "fd"))
    var passphraseFd: Int32?
    func run() throws {
        _ = try controlSocket(of: mountpoint)
        let passphrase = try PassphraseSource(file: passphraseFile, fd: passphraseFd).read(
            prompt: "passphrase for \(absolutePath(mountpoint)): ")
        printState(mountpoint, try control(mountpoint, "unlock", payload: passphrase))
    }
}

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Say whether a mounted keychain is locked, and since when.")
    @Argument(help: "The mountpoint.") var mountpoint: String
    func run() throws { printState(mountpoint, try control(mountpoint, "status")) }
}
