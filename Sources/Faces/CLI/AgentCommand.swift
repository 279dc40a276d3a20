import ArgumentParser
import Dispatch
import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import KeychainCrypto
import KeychainSSHAgent
import SystemPackage

/// `keychainfs ssh-agent`: an ssh agent whose keys are the vault's private keys. Its own
/// process that opens the vault as the CLI does (docs/ssh.md says why not a daemon face).
struct SSHAgentCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ssh-agent",
        abstract: "Serve the vault's private keys to ssh (prints SSH_AUTH_SOCK=…; like ssh-agent -s).",
        discussion:
            "Without -D the agent starts in the background and the lines to eval are printed: eval \"$(keychainfs ssh-agent)\". Keys are listed and used, never added or removed through the agent."
    )
    @OptionGroup var vault: VaultOptions
    @Option(
        name: .customShort("a"),
        help: ArgumentHelp(
            "The socket (default: $XDG_RUNTIME_DIR/keychainfs/ssh-agent.sock).", valueName: "bind_address"))
    var socketPath: String?
    @Flag(name: .customShort("D"), help: "Stay in the foreground (for systemd or a supervisor).")
    var foreground = false
    @Option(name: .long, help: .hidden) var readyFd: Int32?
    @Option(name: .long, help: ArgumentHelp("The agent's log (background mode).", valueName: "path"))
    var log: String?
    @Option(
        name: .long,
        help: ArgumentHelp(
            "The audit log (default $XDG_STATE_HOME/keychainfs/audit.log, shared with mounts).", valueName: "path"))
    var audit: String?
    @Option(
        name: .long,
        help: ArgumentHelp(
            "The program that asks for user presence (default: the first pinentry on PATH).", valueName: "path"))
    var pinentry: String?
    @Option(
        name: .long, help: ArgumentHelp("Give up on an unanswered presence prompt (default 60).", valueName: "seconds"))
    var presenceTimeout: Int = 60
    @Option(
        name: .long,
        help: ArgumentHelp(
            "Remember an allowed presence prompt for the same key and destination host this long (0–300, default 0: every signature asks).",
            valueName: "seconds"))
    var presenceReuse: Int = 0
    @Option(
        name: .long,
        help: ArgumentHelp(
            "A known_hosts file for host-restricted keys (repeatable; default ~/.ssh/known_hosts and /etc/ssh/ssh_known_hosts).",
            valueName: "path"))
    var knownHosts: [String] = []
    @Flag(
        name: .long,
        help:
            "Start with the vault locked, asking for no passphrase now: the first use asks through pinentry on the terminal or display of the process that wants a key."
    )
    var locked = false
    @Flag(name: .customShort("s"), help: "Print Bourne shell commands (the default), as ssh-agent -s.")
    var bourneShell = false
    @Flag(name: .customShort("c"), help: "Print C shell commands, as ssh-agent -c.")
    var cShell = false
    @Flag(
        name: .customShort("k"),
        help: "Stop the agent named by $SSH_AGENT_PID (a keychainfs ssh-agent) and print the commands that unset it.")
    var kill = false

    func validate() throws {
        if bourneShell && cShell { throw ValidationError("give -s or -c, not both") }
        guard (0...300).contains(presenceReuse) else {
            throw ValidationError("--presence-reuse: give 0 to 300 seconds")
        }
        guard presenceTimeout > 0 else {
            throw ValidationError("--presence-timeout: give a positive number of seconds")
        }
    }

    func resolvedSocket() throws -> String {
        if let socketPath { return absolutePath(socketPath) }
        guard let runtime = ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"], !runtime.isEmpty else {
            throw CLIError.usage("XDG_RUNTIME_DIR is not set: give the socket with -a PATH")
        }
        try makeDirectories(runtime + "/keychainfs", mode: 0o700)
        return runtime + "/keychainfs/ssh-agent.sock"
    }

    static func environmentLines(_ path: String, pid: pid_t, cShell: Bool = false) -> String {
        cShell
            ? "setenv SSH_AUTH_SOCK \(path);\nsetenv SSH_AGENT_PID \(pid);\necho Agent pid \(pid);"
            : "SSH_AUTH_SOCK=\(path); export SSH_AUTH_SOCK;\nSSH_AGENT_PID=\(pid); export SSH_AGENT_PID;\necho Agent pid \(pid);"
    }

    /// `-k`: stops the agent `$SSH_AGENT_PID` names, only if it is a keychainfs ssh agent of
    /// this user (never another program that took the pid), as `ssh-agent -k` does.
    func stopAgent() throws {
        guard let text = ProcessInfo.processInfo.environment["SSH_AGENT_PID"], let pid = pid_t(text), pid > 0 else {
            throw CLIError.failure("SSH_AGENT_PID is not set to an agent's pid; nothing stopped")
        }
        let cmdline = (FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") ?? Data()).split(separator: 0).map {
            String(decoding: $0, as: UTF8.self)
        }
        guard cmdline.count >= 2, cmdline.contains("ssh-agent"), cmdline[0].hasSuffix("keychainfs") else {
            throw CLIError.failure("pid \(pid) is not a keychainfs ssh agent; nothing stopped")
        }
        guard Glibc.kill(pid, SIGTERM) == 0 else {
            throw CLIError.system("cannot stop the agent (pid \(pid))", Errno(rawValue: errno))
        }
        Output.line(
            cShell
                ? "unsetenv SSH_AUTH_SOCK;\nunsetenv SSH_AGENT_PID;\necho Agent pid \(pid) killed;"
                : "unset SSH_AUTH_SOCK;\nunset SSH_AGENT_PID;\necho Agent pid \(pid) killed;")
    }

    func run() throws {
        if kill { return try stopAgent() }
        let path = try resolvedSocket()
        if foreground { try serve(path) } else { try spawnAgent(path) }
    }

    /// The agent itself: unlock, bind, say so, serve until SIGTERM (which removes the socket).
    func serve(_ path: String) throws {
        // Blocked before any thread starts, so every thread inherits the mask and only the
        // thread below takes them (sigwait). Not a DispatchSource: a signal source on a global
        // queue starts libdispatch's workqueue, whose 1 Hz monitor wakes the agent every second
        // for good (docs/architecture.md, "Background work").
        var terminating = AgentSignals.terminating
        pthread_sigmask(SIG_BLOCK, &terminating, nil)
        let keychain = locked ? try vault.openLocked() : try vault.openUnlocked()
        let auditLog = try AuditLog(path: audit ?? (KeychainPaths.stateDirectory() + "/audit.log"))
        let access = AccessLayer(keychain: keychain, audit: auditLog)
        let prompts = PinentryPresence(
            keychain: keychain, program: pinentry, reuseSeconds: Double(presenceReuse), timeoutSeconds: presenceTimeout)
        access.presence = prompts
        let knownHostsFiles =
            knownHosts.isEmpty
            ? HostRestriction.defaultFiles(home: ProcessInfo.processInfo.environment["HOME"])
            : knownHosts.map(absolutePath)
        let policy = AgentPolicy(
            hosts: HostRestriction(knownHostsFiles: knownHostsFiles), prompts: prompts, reusePerHost: presenceReuse > 0)
        let server = try AgentServer(path: path, access: access, policy: policy)
        Threads.detach {
            var set = AgentSignals.terminating
            var received: Int32 = 0
            sigwait(&set, &received)
            server.removeSocket()
            Glibc.exit(0)
        }
        if let readyFd {
            Terminal.writeAll(readyFd, Array("ok\n".utf8))
            close(readyFd)
        } else {
            Output.line(Self.environmentLines(path, pid: getpid(), cShell: cShell))
        }
        Log.info("ssh agent: serving \(keychain.path) on \(path)")
        server.serve()
    }

    /// Background: `ssh-agent -D` in a new session, the passphrase on a pipe (never argv);
    /// prints the lines to eval once the socket is listening.
    func spawnAgent(_ path: String) throws {
        let passphrase: SecureBytes?
        if locked {
            passphrase = nil
            _ = try vault.openLocked()  // the vault exists and is one
        } else {
            let typed = try vault.passphrase.read(prompt: "passphrase for \(vault.path): ")
            // Fail early on a wrong passphrase, with the same message the CLI gives.
            try Keychain.open(at: vault.path).unlock(passphrase: typed, acceptRollback: vault.acceptRollback)
            passphrase = typed
        }
        let logPath = log ?? (KeychainPaths.stateDirectory() + "/ssh-agent.log")
        try makeDirectories(KeychainPaths.parent(of: logPath), mode: 0o700)
        var secretPipe: [Int32] = [0, 0], readyPipe: [Int32] = [0, 0]
        guard pipe(&secretPipe) == 0, pipe(&readyPipe) == 0 else {
            throw CLIError.system("pipe", Errno(rawValue: errno))
        }
        for fd in secretPipe + readyPipe { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var args = [
            "keychainfs", "ssh-agent", "-D", "-a", path, "--vault", absolutePath(vault.path), "--ready-fd", "4",
            "--presence-timeout", String(presenceTimeout), "--presence-reuse", String(presenceReuse),
        ]
        args += locked ? ["--locked"] : ["--passphrase-fd", "3"]
        for file in knownHosts { args += ["--known-hosts", absolutePath(file)] }
        if let audit { args += ["--audit", absolutePath(audit)] }
        if let pinentry { args += ["--pinentry", absolutePath(pinentry)] }
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
            for fd in secretPipe + readyPipe { close(fd) }
            throw CLIError.system("cannot start the agent", error)
        }
        close(secretPipe[0]); close(readyPipe[1])
        passphrase?.withUnsafeBytes { _ = write(secretPipe[1], $0.baseAddress, $0.count) }
        close(secretPipe[1])
        var reply = [UInt8]()
        var byte: UInt8 = 0
        while read(readyPipe[0], &byte, 1) == 1 && byte != 10 { reply.append(byte) }
        close(readyPipe[0])
        guard reply == Array("ok".utf8) else {
            var status: Int32 = 0
            waitpid(pid, &status, 0)
            throw CLIError.failure("the agent exited before it was listening; see \(logPath)")
        }
        Output.line(Self.environmentLines(path, pid: pid, cShell: cShell))
    }
}

/// The signals that stop the agent (and remove its socket).
enum AgentSignals {
    static var terminating: sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for sig in [SIGTERM, SIGINT, SIGHUP] { sigaddset(&set, sig) }
        return set
    }
}
