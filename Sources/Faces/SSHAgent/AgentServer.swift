import CPlatform
import FoundationEssentials
import Glibc
import Keychain
import Synchronization
import KeychainAccess
import KeychainCrypto

#if canImport(Glibc)
    import Glibc
#endif

/// What the agent decides beyond the vault's own rules: which keys go to which hosts, how long
/// a presence answer holds, how a locked vault is unlocked.
public struct AgentPolicy: Sendable {
    /// Per-key host restrictions (the `sshHosts` attribute), looked up in these known_hosts.
    public var hosts: HostRestriction
    /// Asks the user: user presence, and the passphrase of a locked vault. Nil: never asks.
    public var prompts: PinentryPresence?
    /// Whether a presence answer is remembered for (key, destination host) during the prompt
    /// program's reuse window; never for a forwarded or unbound connection.
    public var reusePerHost: Bool

    public init(hosts: HostRestriction, prompts: PinentryPresence?, reusePerHost: Bool) {
        self.hosts = hosts
        self.prompts = prompts
        self.reusePerHost = reusePerHost
    }
}

/// The vault behind one connection, reached through a `KeychainSession` per request: the
/// session lists the keys from their stored public halves, finds and signs with the one key a
/// request names, and audits each signature; the agent keeps its protocol, the destination
/// (session-bind) and its error table. The private key never reaches this target.
struct VaultBackend: AgentBackend {
    let access: AccessLayer
    /// The peer process of the connection, pinned at accept (docs/security.md, "The service's
    /// callers").
    let peer: PeerProcess
    /// The pids the kernel attributed to the bytes of the request being answered.
    let senders: CurrentSenders
    let policy: AgentPolicy

    /// The door for this request, for its caller decided now: the vault's policy may have
    /// changed (or been unreadable while the vault was locked), and the request gets the
    /// pinned executable's groups only when the pinned process alone wrote it and is unchanged
    /// (`PeerProcess.judge`); anything else is the default group only.
    func session() throws -> KeychainSession {
        let (identities, why) = peer.judge(senders: senders.current)
        if let why { Log.info("ssh agent: \(peer.identity.description): default group only: \(why)") }
        let caller = try access.caller(peer: identities, lessened: why)
        return access.session(caller, via: "ssh", lessened: why)
    }

    func identities(session: AgentSession) throws -> [SSHIdentity] {
        try unlockIfNeeded(purpose: "use its ssh keys")
        let listing = try self.session().sshIdentities()
        for (id, why) in listing.skipped { Log.info("ssh agent: key item \(id) not offered: \(why)") }
        let destination = session.hostKeys.last
        return listing.identities.filter {
            policy.hosts.allows(HostRestriction.patterns($0.hosts), destination: destination)
        }
    }

    /// A locked vault is unlocked through pinentry on the caller's terminal or display, or the
    /// request fails at once (never a hang, never an empty answer that reads as "no keys").
    func unlockIfNeeded(purpose: String) throws {
        if case .unlocked = access.lockState { return }
        guard let prompts = policy.prompts else {
            throw KeychainError(
                .interactionNotAllowed, "the vault is locked and the agent cannot ask for its passphrase")
        }
        try prompts.unlockVault(caller: try self.session().caller, purpose: purpose)
        access.invalidatePolicy()
    }

    /// `ssh-add -x`: the one keychain of the service locks, through the door (audited `lock`).
    func lock() throws { try session().lock() }

    /// `ssh-add -X`: the vault's passphrase unlocks it, through the door (audited `unlock`).
    func unlock(passphrase: [UInt8]) throws {
        try session().unlock(passphrase: try SecureBytes(copying: passphrase))
        access.invalidatePolicy()
    }

    func sign(publicKey: [UInt8], data: [UInt8], flags: UInt32, session: AgentSession) throws -> [UInt8] {
        try unlockIfNeeded(purpose: "use its ssh keys")
        let host = session.hostKeys.last.map(sshFingerprint) ?? "unknown"
        // The prompt (a key with userPresence) names the process, the destination and whether
        // the connection is forwarded; with no way to ask the core refuses at once.
        var destination: String
        if let hostKey = session.hostKeys.last {
            let names = policy.hosts.names(for: hostKey)
            destination =
                names.isEmpty
                ? " connecting to the host with key \(host)"
                : " connecting to \(names.prefix(3).joined(separator: ", ")) (host key \(host))"
        } else {
            destination = " (destination unknown)"
        }
        destination += session.forwarded ? ", through a forwarded agent" : ""
        // A presence answer holds for this key and this destination only, and only where the
        // destination is proved and the request comes from this machine's ssh, not through a
        // forwarded agent (a remote host could then sign for anywhere it likes).
        let reuse: PresenceReuseScope =
            policy.reusePerHost && !session.hostKeys.isEmpty && !session.forwarded ? .scope("ssh-host|\(host)") : .never
        let hosts = policy.hosts
        let bound = session.hostKeys.last
        let context = SSHSignContext(
            destination: destination, presenceReuse: reuse,
            auditDetail: "host=\(host) forwarded=\(session.forwarded ? "yes" : "no")",
            hostsAllow: { hosts.allows(HostRestriction.patterns($0), destination: bound) })
        return try self.session().sshSign(publicKey: publicKey, data: data, flags: flags, context: context)
    }
}

/// The pids the kernel attached to the bytes of the message being answered.
final class CurrentSenders: Sendable {
    private let pids = Mutex<Set<pid_t>>([])
    var current: Set<pid_t> { pids.withLock { $0 } }
    func set(_ senders: Set<pid_t>) { pids.withLock { $0 = senders } }
}

/// The agent's socket: 0600 from its creation, one thread per connection, each connection's
/// peer pinned at accept and each message judged as every process that wrote it, under the
/// vault's access policy.
public final class AgentServer: Sendable {
    public let path: String
    let access: AccessLayer
    let policy: AgentPolicy
    private let listener: Int32
    /// Whether this agent bound `path` (and removes it when it stops).
    private let ownsSocket: Bool
    /// A thread and three descriptors a connection: past 128 at once, a new one is closed (and
    /// logged), so no client can exhaust the service that hosts the agent.
    private let connections = ConnectionLimit(128)

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// Binds the socket. A socket at `path` that nobody answers (a dead agent's) is replaced;
    /// one that answers is a running agent and is left alone.
    public init(path: String, access: AccessLayer, policy: AgentPolicy) throws {
        self.path = path
        self.access = access
        self.policy = policy
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard path.utf8.count < capacity else { throw Failure(description: "socket path too long: \(path)") }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, b) in path.utf8.enumerated() { raw[i] = b }
        }
        if AgentServer.answers(&address) {
            throw Failure(description: "an agent is already listening on \(path)")
        }
        unlink(path)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket: \(String(cString: strerror(errno)))") }
        // 0600 from the first instant: umask while binding, then chmod to be sure.
        let old = umask(0o177)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        let bindErrno = errno
        umask(old)
        // Every accepted socket passes each message's sender (SCM_CREDENTIALS) from its first byte.
        _ = kcfs_set_passcred(fd)
        guard bound == 0, chmod(path, 0o600) == 0, listen(fd, 16) == 0 else {
            close(fd)
            throw Failure(description: "cannot listen on \(path): \(String(cString: strerror(bindErrno)))")
        }
        listener = fd
        ownsSocket = true
    }

    /// Serves a socket already listening (systemd's `keychainfs-ssh-agent.socket`), whose
    /// file systemd owns: never unlinked here.
    public init(listening fd: Int32, path: String, access: AccessLayer, policy: AgentPolicy) {
        self.path = path
        self.access = access
        self.policy = policy
        _ = kcfs_set_passcred(fd)
        listener = fd
        ownsSocket = false
    }

    static func answers(_ address: inout sockaddr_un) -> Bool {
        let probe = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard probe >= 0 else { return false }
        defer { close(probe) }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(probe, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0
            }
        }
    }

    /// Accepts connections until the process ends.
    public func serve() -> Never {
        while true {
            // Close-on-exec from the start: a pinentry started meanwhile must not inherit it.
            let connection = kcfs_accept_cloexec(listener)
            if connection < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                Log.error("ssh agent: accept: \(String(cString: strerror(errno)))")
                sleep(1)
                continue
            }
            guard connections.admit() else {
                Log.error("ssh agent: more than \(connections.limit) connections at once; one refused")
                close(connection)
                continue
            }
            Threads.detach { [self] in
                self.handle(connection)
                close(connection)
                connections.release()
            }
        }
    }

    public func removeSocket() { if ownsSocket { unlink(path) } }

    /// One connection: its peer process is pinned at accept, and must be of this user.
    func handle(_ fd: Int32) {
        _ = kcfs_set_passcred(fd)
        let peer: PeerProcess
        do { peer = try PeerProcess.pin(socket: fd, checkingOwnEnd: true) } catch {
            Log.warning("ssh agent: refused a connection: \(error)")
            return
        }
        let senders = CurrentSenders()
        let backend = VaultBackend(access: access, peer: peer, senders: senders, policy: policy)
        var handler = AgentRequestHandler(backend: backend)
        var session = AgentSession()
        var from = Set<pid_t>()
        var timedOut = false
        defer {
            if timedOut {
                Log.info(
                    "ssh agent: \(peer.identity.description): a message did not complete within \(Int(Self.messageTimeout)) s; connection closed"
                )
            }
        }
        while var message = readMessage(fd, senders: &from, timedOut: &timedOut) {
            senders.set(from)
            from.removeAll(keepingCapacity: true)
            let reply = handler.reply(to: message, session: &session)
            // An unlock request carried the vault's passphrase.
            Sodium.wipe(&message)
            if let why = handler.lastFailure {
                Log.info("ssh agent: refused a request from \(peer.identity.description): \(why)")
            }
            var framed = SSHWire()
            framed.string(reply)
            guard writeAll(fd, framed.bytes) else { return }
        }
    }

    /// How long the rest of a message may take once its first byte has come: a client that
    /// stops mid-message is dropped (its thread and descriptors freed), where an idle
    /// connection between messages is kept as long as the client likes (ssh keeps one open).
    static let messageTimeout: Double = 5

    /// One message; `senders` gains the pid the kernel attached to each read of its bytes. Nil
    /// at the end of the connection, on a length out of range, or (`timedOut`) when the message
    /// did not complete within `messageTimeout` of its first byte.
    private func readMessage(_ fd: Int32, senders: inout Set<pid_t>, timedOut: inout Bool) -> [UInt8]? {
        var deadline: Double?
        guard let header = readExactly(fd, 4, senders: &senders, deadline: &deadline, timedOut: &timedOut) else {
            return nil
        }
        let length = header.reduce(0) { $0 << 8 | Int($1) }
        guard length > 0, length <= AgentMessage.maxLength else { return nil }
        return readExactly(fd, length, senders: &senders, deadline: &deadline, timedOut: &timedOut)
    }

    private func readExactly(
        _ fd: Int32, _ count: Int, senders: inout Set<pid_t>, deadline: inout Double?, timedOut: inout Bool
    ) -> [UInt8]? {
        var out = [UInt8](repeating: 0, count: count)
        var got = 0
        while got < count {
            if let deadline {
                let left = deadline - ProcessInfo.processInfo.systemUptime
                var waiting = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                let ready = left > 0 ? poll(&waiting, 1, Int32(left * 1000) + 1) : 0
                if ready < 0 && errno == EINTR { continue }
                guard ready > 0 else {
                    timedOut = ready == 0
                    return nil
                }
            }
            var sender: Int32 = 0
            let n = out.withUnsafeMutableBytes {
                kcfs_recv_with_sender(fd, $0.baseAddress! + got, UInt(count - got), &sender)
            }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return nil }
            senders.insert(sender)
            got += n
            if deadline == nil { deadline = ProcessInfo.processInfo.systemUptime + Self.messageTimeout }
        }
        return out
    }

    private func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return false }
            sent += n
        }
        return true
    }
}
