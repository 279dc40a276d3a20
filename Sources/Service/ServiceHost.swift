import FoundationEssentials
import Glibc
import Keychain
import KeychainAPI
import KeychainAccess
import KeychainCrypto
import KeychainFS
import KeychainSSHAgent
import KeychainSecretService

/// The keychain service (docs/service.md): the one process that holds a vault unlocked and
/// hosts its faces over one `Keychain`, one `AccessLayer` (policy, presence, audit) and one
/// pinentry: the API socket always, and as configured the FUSE mount, the ssh agent and the
/// Secret Service. `lock`, `unlock`, auto-lock and a passphrase change or key rotation through
/// the API act on that one `Keychain`, so every face sees them at once. `keychainfs mount` and
/// `keychainfs serve` build one and run it; nothing else starts faces.
public final class ServiceHost: Sendable {
    public struct Configuration: Sendable {
        public var auditPath: String
        public var pinentry: String?
        public var presenceReuse: Double = 0
        public var presenceTimeout: Int = 60
        public var lockAfter: Double?
        /// The control socket's path (`lock`/`unlock`/`status MOUNTPOINT`), when mounted.
        public var controlSocket: String?
        /// The mount, when there is one.
        public var mountpoint: String?
        public var mountOptions = MountOptions()
        /// The ssh agent's socket, when the service hosts the agent.
        public var sshAgentSocket: String?
        public var knownHosts: [String] = []
        /// The Secret Service, when hosted: on the session bus (nil address) or this address.
        public var secretService = false
        public var secretServiceAddress: String?
        /// Sockets systemd listens on for the service (`ActivatedSockets.take()`): the default
        /// vault's API socket is served beside the service's own, an ssh agent socket makes the
        /// service host the agent on it.
        public var activated = ActivatedSockets()
        /// Trust a Secret Service client's pid from a bus that gives no process handle: serve
        /// group-restricted items and remembered decisions without the identity prompt
        /// (docs/secret-service.md, "Access control"). Off unless the user opts out.
        public var secretServiceTrustPid = false
        /// Where a locked vault's passphrase can be read again (the Secret Service's Unlock).
        public var unlockPassphrase: (@Sendable () throws -> SecureBytes)?

        public init(auditPath: String) { self.auditPath = auditPath }
    }

    public struct StartFailure: Error, CustomStringConvertible {
        public let description: String
    }

    public let keychain: Keychain
    public let configuration: Configuration
    public let audit: AuditLog
    public let access: AccessLayer
    public let api: APIServer
    let fileSystem: KeychainFileSystem?
    let control: ControlServer?
    let agent: AgentServer?
    let secretService: SecretServiceProvider?
    let fuse: FuseSession?
    let idle: IdleLocker?
    /// The sync engine (Sync/SyncEngine.swift): idle in poll(2) until the vault is in a group.
    let syncEngine: SyncEngine
    /// Without a mount of its own: the mount `keychainfs mount` may ask it to take on.
    let joined: JoinedMount?

    /// Binds every socket and connects to the bus (a name another provider owns fails here,
    /// before anything is live); nothing is served until `run`.
    public init(keychain: Keychain, configuration: Configuration) throws {
        self.keychain = keychain
        self.configuration = configuration
        // Buffered: one write(2) a second instead of one per open (AuditLog says what is kept
        // at which stop); flushed when the service stops and by `status`/`lock`.
        let audit = try AuditLog(path: configuration.auditPath, buffered: true)
        self.audit = audit
        let access = AccessLayer(keychain: keychain, audit: audit)
        self.access = access
        let fileSystem = configuration.mountpoint.map { _ in KeychainFileSystem(access: access) }
        self.fileSystem = fileSystem
        let pinentry = PinentryPresence(
            keychain: keychain, program: configuration.pinentry, reuseSeconds: configuration.presenceReuse,
            timeoutSeconds: configuration.presenceTimeout)
        access.presence = pinentry
        if configuration.secretService {
            let unlock = configuration.unlockPassphrase
            let provider = SecretServiceProvider(
                access: access, prompter: pinentry,
                trustBusPid: configuration.secretServiceTrustPid
            ) {
                guard let unlock else {
                    throw BusError(
                        "org.freedesktop.Secret.Error.IsLocked",
                        "the keychain is locked and no passphrase file can be read again (start the service with a passphrase file)"
                    )
                }
                do { try keychain.unlock(passphrase: unlock()) } catch let e as KeychainError {
                    throw BusError(e.status.secretServiceErrorName, e.message)
                } catch {
                    throw BusError("org.freedesktop.Secret.Error.IsLocked", "the passphrase could not be read again")
                }
            }
            do {
                let described = try provider.connect(address: configuration.secretServiceAddress)
                Log.info("secret service: serving \(SecretServiceProvider.busName) on \(described)")
            } catch {
                throw StartFailure(description: error.message)
            }
            secretService = provider
        } else {
            secretService = nil
        }
        if let path = configuration.controlSocket {
            let control = try ControlServer(path: path, access: access)
            fileSystem?.controlSocketPath = control.path
            if let fs = fileSystem { control.onQuiesce = { [weak fs] in fs?.pauseReplays() } }
            self.control = control
        } else {
            control = nil
        }
        api = try APIServer(keychain: keychain, access: access, activated: configuration.activated.api)
        // Commits of other processes (a command that opened the vault itself: docs/service.md,
        // "Watching the vault's changes") reach the faces' observers too.
        do { try keychain.followOtherProcesses() } catch {
            Log.error("cannot follow other processes' commits to \(keychain.path): \(error)")
        }
        let policy = AgentPolicy(
            hosts: HostRestriction(knownHostsFiles: configuration.knownHosts), prompts: pinentry,
            reusePerHost: configuration.presenceReuse > 0)
        if let fd = configuration.activated.sshAgent {
            let path = ActivatedSockets.boundPath(fd) ?? configuration.sshAgentSocket ?? "(socket from systemd)"
            agent = AgentServer(listening: fd, path: path, access: access, policy: policy)
        } else if let socket = configuration.sshAgentSocket {
            do { agent = try AgentServer(path: socket, access: access, policy: policy) } catch {
                throw StartFailure(description: "ssh agent: \(error)")
            }
        } else {
            agent = nil
        }
        if let fileSystem, let mountpoint = configuration.mountpoint {
            fuse = FuseSession(fs: fileSystem, mountpoint: mountpoint, options: configuration.mountOptions)
        } else {
            fuse = nil
        }
        idle = configuration.lockAfter.map { IdleLocker(access: access, seconds: $0) }
        syncEngine = SyncEngine(
            keychain: keychain, audit: access.serviceSession(describedAs: "keychainfs (sync)", via: "sync"))
        joined = fuse == nil ? JoinedMount(keychain: keychain, access: access, idle: idle) : nil
    }

    /// Starts every face, calls `ready` once they are live (the mount included), and serves
    /// until the mount ends or, without one, until SIGTERM, SIGINT or SIGHUP. Returns the FUSE
    /// loop's result (0 without a mount).
    public func run(ready: () -> Void) throws -> Int32 {
        // Without a mount the service waits for a signal: blocked before any face's thread
        // starts (threads inherit the mask), so none of them takes it instead.
        if fuse == nil { Self.blockTerminationSignals() }
        control?.start()
        api.start()
        if let joined {
            api.onMount { try joined.mount($0) }
        } else if let mountpoint = configuration.mountpoint {
            // A service with a mount of its own takes no other: one view of one keychain.
            let path = keychain.path
            api.onMount { _ in
                throw KeychainError(
                    .duplicateItem,
                    "vault \(path) is already mounted on \(mountpoint) by a keychainfs service (pid \(getpid()))")
            }
        }
        syncEngine.start()
        defer {
            syncEngine.stop()
            api.stop()
            control?.stop()
            agent?.removeSocket()
            audit.flush()
        }
        if let agent {
            Threads.detach { agent.serve() }
            Log.info("ssh agent: serving \(keychain.path) on \(agent.path)")
        }
        if let idle {
            // Any face's request counts as activity: the mount's, and the API's.
            fuse?.onRequest = { idle.touch() }
            idle.start()
        }
        if let fuse {
            // The first listing's Swift and store set-up, before the mount is announced.
            fuse.warmUp()
            do { try fuse.mount() } catch {
                throw StartFailure(
                    description:
                        "cannot mount on \(configuration.mountpoint ?? "") (is /dev/fuse usable, and fusermount3 installed?)"
                )
            }
            Log.info("mounted \(keychain.path) on \(configuration.mountpoint ?? "")")
        }
        if let secretService {
            Threads.detach {
                do { try secretService.serve() } catch {
                    Log.error("secret service: \(error); the service goes on without it")
                }
            }
        }
        Log.info("keychain service for \(keychain.path): API on \(api.path)")
        ready()
        if let fuse { return fuse.run() }
        Self.waitForTermination()
        api.onMount(nil)
        joined?.unmount()
        return 0
    }

    static var terminationSignals: sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for sig in [SIGTERM, SIGINT, SIGHUP] { sigaddset(&set, sig) }
        return set
    }

    static func blockTerminationSignals() {
        var set = terminationSignals
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// Blocks until SIGTERM, SIGINT or SIGHUP.
    static func waitForTermination() {
        var set = terminationSignals
        var received: Int32 = 0
        sigwait(&set, &received)
        Log.info("stopping on signal \(received)")
    }
}
