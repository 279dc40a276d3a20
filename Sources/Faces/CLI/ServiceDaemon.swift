import ArgumentParser
import FoundationEssentials
import Glibc
import SystemPackage
import Keychain
import KeychainAPI
import KeychainCrypto
import KeychainAccess
import KeychainFS
import KeychainService
import KeychainSSHAgent
import CPlatform

/// The keychain service's daemon, as `mount` and `serve` start it (docs/service.md): in the
/// foreground (`-f`, systemd) it is the service; in the background the CLI runs the one Argon2id,
/// starts `-f` in a session of its own with the master key on a pipe, and returns once the
/// service (and its mount, if any) is live.
struct ServiceDaemon {
    let vault: VaultOptions
    let vaultPath: String
    /// The mount, or nil for `serve`.
    let mountpoint: String?
    /// The `-o` arguments as given, handed on to the foreground daemon.
    let options: [String]
    let readyFd: Int32?
    let masterKeyFd: Int32?

    func passphraseSource(_ parsed: ParsedMountOptions) -> PassphraseSource {
        var source = vault.passphrase
        if !source.isGiven {
            source.file = parsed.passphraseFile
            source.program = parsed.passphraseProgram
        }
        return source
    }

    /// Foreground: the daemon itself. Reports readiness (or the failure) on --ready-fd.
    /// One service per vault file, whatever its name: a second would serve stale views of the
    /// same items. Said at once, before any passphrase is asked.
    func refuseRunningService() throws {
        if let running = try? ServiceClient.connect(vault: vaultPath) {
            throw CLIError.failure(
                "vault \(vaultPath) is already mounted or served by a keychainfs service (pid \(running.servicePID))"
                    + (mountpoint != nil ? "; without -f, mount joins it" : ""))
        }
    }

    func runDaemon(_ parsed: ParsedMountOptions) throws {
        func report(_ line: String) {
            guard let fd = readyFd else { return }
            _ = (line + "\n").withCString { write(fd, $0, strlen($0)) }
            close(fd)
        }
        do {
            // Taken first, so that no failure below leaves them to a child.
            let activated: ActivatedSockets
            do { activated = try ActivatedSockets.take() } catch { throw CLIError.failure(error.description) }
            // One daemon per vault file: a second would serve stale views of the same items.
            try refuseRunningService()
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
                    acceptRollback: vault.acceptRollback, acceptKDFChange: vault.acceptKDFChange,
                    incrementalCheck: true)
            }
            var configuration = serviceConfiguration(parsed)
            configuration.activated = activated
            configuration.mountpoint = mountpoint
            configuration.mountOptions = parsed.fuse
            configuration.mountOptions.fsname = vaultPath
            // `lock|unlock|status MOUNTPOINT` find it through the mount; without one they use the
            // API socket (`--vault`).
            if mountpoint != nil { configuration.controlSocket = controlSocketPath() }
            let host: ServiceHost
            do { host = try ServiceHost(keychain: keychain, configuration: configuration) } catch let e
                as ServiceHost.StartFailure
            {
                throw CLIError.failure(e.description)
            }
            let rc: Int32
            do {
                rc = try host.run {
                    report("ok")
                    // A Type=notify unit (mount -f under systemd) is started now that the mount is live.
                    SystemdNotify.send("READY=1")
                }
            } catch let e as ServiceHost.StartFailure {
                throw CLIError.failure(e.description)
            }
            SystemdNotify.send("STOPPING=1")
            Log.info(mountpoint.map { "unmounted \($0)" } ?? "stopped serving \(vaultPath)")
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

    /// What the service hosts beside the mount, from the `-o` options: the audit log, pinentry,
    /// auto-lock, the ssh agent (`ssh_agent`) and the Secret Service (`secret_service`).
    func serviceConfiguration(_ parsed: ParsedMountOptions) -> ServiceHost.Configuration {
        var configuration = ServiceHost.Configuration(
            auditPath: parsed.audit ?? (KeychainPaths.stateDirectory() + "/audit.log"))
        configuration.pinentry = parsed.pinentry
        configuration.presenceReuse = parsed.presenceReuse
        configuration.presenceTimeout = parsed.presenceTimeout
        configuration.lockAfter = parsed.fuse.lockAfter
        configuration.sshAgentSocket = parsed.sshAgentSocket
        configuration.knownHosts = HostRestriction.defaultFiles(home: ProcessInfo.processInfo.environment["HOME"])
        configuration.secretService = parsed.secretService
        configuration.secretServiceAddress = parsed.secretServiceAddress
        configuration.secretServiceTrustPid = parsed.secretServiceTrustPid
        if let file = vault.passphraseFile ?? parsed.passphraseFile {
            configuration.unlockPassphrase = { try PassphraseSource(file: file, fd: nil).read(prompt: "") }
        }
        return configuration
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
        try refuseRunningService()
        let keychain = try Keychain.open(at: vaultPath)
        var masterKey: SecureBytes?
        if !parsed.fuse.startLocked {
            masterKey = try passphraseSource(parsed).unlocking(prompt: "passphrase for \(vaultPath): ") {
                try keychain.masterKey(
                    passphrase: $0, acceptRollback: vault.acceptRollback, acceptKDFChange: vault.acceptKDFChange)
            }
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

        var args =
            mountpoint.map { ["keychainfs", "mount", vaultPath, $0] } ?? ["keychainfs", "serve", vaultPath]
        args += ["-f", "--ready-fd", "4"]
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
            Output.errorLine(
                mountpoint.map { "keychainfs: mounted \(vaultPath) on \($0) (daemon pid \(pid), log \(logPath))" }
                    ?? "keychainfs: serving \(vaultPath) (daemon pid \(pid), log \(logPath))")
            return
        }
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        if line.hasPrefix("error ") {
            let rest = line.dropFirst(6)
            let code = Int32(rest.prefix { $0 != " " }) ?? 1
            throw CLIError(message: String(rest.drop { $0 != " " }.dropFirst()), exitCode: code)
        }
        throw CLIError.failure("the daemon exited before the service was live; see \(logPath)")
    }
}
