import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import CPlatform
import KeychainCrypto

#if canImport(Glibc)
    import Glibc
#endif

/// The door through the keychain service's API socket: the CLI's verbs, the credential helpers,
/// `run` and `inject` call it when a service holds their vault, and never run the KDF or open
/// the vault themselves (docs/service.md). The service decides as the mount does: this
/// process's executable's access groups, its presence prompts, its audit log.
public final class ServiceClient: KeychainDoor {
    public let vaultPath: String
    public let socketPath: String
    /// The service's pid, as the kernel gave it at connect.
    public let servicePID: pid_t
    private let fd: Int32
    private let nonce: [UInt8]

    /// Why a service that should be there could not be used (a socket that is not the user's,
    /// a service speaking another version): said, never silently bypassed.
    public struct Unusable: Error, CustomStringConvertible {
        public let description: String
    }

    /// Connects to the service holding `vault`, or returns nil when none listens (no socket,
    /// or one nobody accepts on: a service that died). `vault` is the vault as this process
    /// spells it; the service is found by the file's identity.
    public static func connect(vault: String, directory: String = ServiceLocator.directory()) throws -> ServiceClient? {
        guard let identity = ServiceLocator.identity(ofVault: vault) else { return nil }
        guard ServiceLocator.isPrivateDirectory(directory) else { return nil }
        return try connect(socket: ServiceLocator.socketPath(for: identity, directory: directory), vault: vault)
    }

    /// Connects to the service listening on `path` (see `connect(vault:)`), waiting up to
    /// `helloTimeout` seconds for its greeting (a service systemd is starting runs its KDF first).
    static func connect(socket path: String, vault: String, helloTimeout: Int = 120) throws -> ServiceClient? {
        // The service identifies this process by its /proc/<pid>/exe, which a process that is not
        // dumpable (ProcessHardening) keeps from every other process of its user: dumpable while
        // connected (core dumps stay off: RLIMIT_CORE is 0), not dumpable again after
        // (docs/security.md, "The service's callers").
        _ = kcfs_set_dumpable(1)
        var connected = false
        defer { if !connected { _ = kcfs_set_dumpable(0) } }
        let fd: Int32
        do { fd = try UnixSocket.connect(to: path) } catch {
            if error == .noSuchFileOrDirectory || error == .connectionRefused { return nil }
            // A path too long for a socket address finds no service (the locator keeps it short).
            if error == .fileNameTooLong { return nil }
            throw Unusable(description: "cannot connect to \(path): \(error)")
        }
        // Secrets go only to a service of this user.
        var cred = kcfs_ucred()
        guard kcfs_peer_cred(fd, &cred) == 0, cred.uid == getuid() else {
            close(fd)
            throw Unusable(description: "\(path) is served by another user's process")
        }
        // A service waiting on a prompt for another client must not hang this one forever.
        var timeout = timeval(tv_sec: helloTimeout, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let hello: APIHello
        do {
            guard let frame = try Framing.receive(limit: 64, { read(fd, $0.baseAddress, $0.count) }) else {
                close(fd)
                // The service refused this process at accept (another user, or gone): said in its log.
                throw Unusable(description: "the keychain service at \(path) closed the connection")
            }
            hello = try APICodec.decodeHello(frame)
        } catch let e as KeychainError {
            close(fd)
            throw Unusable(description: "the keychain service at \(path) did not greet: \(e.message)")
        }
        guard hello.version == APIWire.version else {
            close(fd)
            throw Unusable(
                description:
                    "the keychain service at \(path) speaks version \(hello.version), this client \(APIWire.version)")
        }
        if helloTimeout != 120 {
            timeout = timeval(tv_sec: 120, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }
        connected = true
        return ServiceClient(vault: vault, socketPath: path, pid: cred.pid, fd: fd, nonce: hello.nonce)
    }

    private init(vault: String, socketPath: String, pid: pid_t, fd: Int32, nonce: [UInt8]) {
        self.vaultPath = vault
        self.socketPath = socketPath
        self.servicePID = pid
        self.fd = fd
        self.nonce = nonce
    }

    deinit {
        close(fd)
        _ = kcfs_set_dumpable(0)
    }

    public var vaultDescription: String { "\(vaultPath) (keychain service pid \(servicePID))" }

    /// One request, one reply; a failure reply is thrown as the core's own status and message.
    public func call(_ request: APIRequest) throws -> APIReply {
        var body = APICodec.encode(request, nonce: nonce)
        defer { Framing.wipe(&body) }
        guard body.count <= APIWire.maxFrame else { throw Self.tooLarge(body.count) }
        try Framing.send(fd, body)
        guard var frame = try Framing.receive({ read(fd, $0.baseAddress, $0.count) }) else {
            throw KeychainError(.io, "the keychain service closed the connection without an answer")
        }
        defer { Framing.wipe(&frame) }
        let reply = try APICodec.decodeReply(frame)
        if case .failure(let status, let message) = reply { throw KeychainError(status, message) }
        return reply
    }

    /// `watch`: the logged changes after `since` (nil: from now on; -1: from the oldest retained)
    /// the service lets this process see, then, with `follow`, each commit's as it commits,
    /// handed to `body` frame by frame (the first frame, maybe empty, says the stream has started
    /// and where), until `body` returns false or the stream ends (without `follow`, once the
    /// service has sent what the log held). No read timeout: a quiet vault sends nothing.
    public func watch(since: Int64?, follow: Bool, _ body: (_ last: Int64, [WireChange]) throws -> Bool) throws {
        var forever = timeval(tv_sec: 0, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &forever, socklen_t(MemoryLayout<timeval>.size))
        try Framing.send(fd, APICodec.encode(.watch(since: since, follow: follow), nonce: nonce))
        while let frame = try Framing.receive({ read(fd, $0.baseAddress, $0.count) }) {
            switch try APICodec.decodeReply(frame) {
            case .changes(let last, let changes): guard try body(last, changes) else { return }
            case .failure(let status, let message): throw KeychainError(status, message)
            default: throw KeychainError(.decode, "the keychain service answered a watch with another reply")
            }
        }
        if follow { throw KeychainError(.io, "the keychain service closed the watch (it stopped)") }
    }

    static func tooLarge(_ size: Int) -> KeychainError {
        KeychainError(
            .param, "the request is too large for the keychain service (\(size) bytes; at most \(APIWire.maxFrame))")
    }

    private func unexpected() -> KeychainError { KeychainError(.io, "the keychain service gave an unexpected answer") }

    public func copyMatching(_ query: Query) throws -> [KeychainItem] {
        guard case .items(let items) = try call(.copyMatching(WireQuery(query))) else { throw unexpected() }
        return items.map(\.item)
    }

    public func add(_ itemClass: ItemClass, _ attributes: Attributes, data: [UInt8], extras: [UInt8]) throws
        -> KeychainItem
    {
        guard case .item(let item, _) = try call(.add(itemClass, attributes, data: data, extras: extras)) else {
            throw unexpected()
        }
        return item.item
    }

    public func update(_ query: Query, attributes: Attributes, data: [UInt8]?, extras: [UInt8]) throws -> Int {
        guard case .count(let n) = try call(.update(WireQuery(query), attributes, data: data, extras: extras)) else {
            throw unexpected()
        }
        return n
    }

    public func delete(_ query: Query) throws -> Int {
        guard case .count(let n) = try call(.delete(WireQuery(query))) else { throw unexpected() }
        return n
    }

    public func addOrUpdate(_ itemClass: ItemClass, _ attributes: Attributes, data: [UInt8], extras: [UInt8]) throws
        -> (item: KeychainItem, added: Bool)
    {
        guard
            case .item(let item, let added) = try call(
                .addOrUpdate(itemClass, attributes, data: data, extras: extras))
        else {
            throw unexpected()
        }
        return (item.item, added)
    }

    /// The identities this process may see, from the service's `items` reply: certificate,
    /// then key, per identity.
    public func identities() throws -> [Keychain.Identity] {
        guard case .items(let items) = try call(.identities), items.count % 2 == 0 else { throw unexpected() }
        return stride(from: 0, to: items.count, by: 2).map {
            Keychain.Identity(certificate: items[$0].item, key: items[$0 + 1].item)
        }
    }

    public func createKeyPair(_ algorithm: KeyAlgorithm, _ attributes: Attributes) throws -> (
        item: KeychainItem, publicKey: String
    ) {
        guard case .keyPair(let item, let publicKey) = try call(.createKeyPair(algorithm, attributes)) else {
            throw unexpected()
        }
        return (item.item, publicKey)
    }

    /// The core's `storeBatch` in the service; a refused batch is thrown as the core throws it
    /// (`BatchRefused`, each refusal with its status and message), so the importer reports it
    /// as it would with the vault opened itself.
    public func storeBatch(_ items: [NewItem], updateExisting: Bool) throws -> [Bool] {
        let request = APIRequest.storeBatch(items.map(WireNewItem.init), updateExisting: updateExisting)
        let reply: APIReply
        do { reply = try call(request) } catch let e as KeychainError
            where e.status == .param && e.message.hasPrefix("the request is too large")
        {
            throw KeychainError(
                .param,
                "\(e.message): an import this large is stored through the service in batches with --continue-on-error, or split the source"
            )
        }
        switch reply {
        case .stored(let added) where added.count == items.count: return added
        case .refused(let refusals) where !refusals.isEmpty:
            throw BatchRefused(
                refusals: refusals.map { ($0.index, KeychainError($0.status, $0.message)) })
        default: throw unexpected()
        }
    }

    public func accessPolicy() throws -> AccessPolicy {
        guard case .policy(let policy) = try call(.accessPolicy) else { throw unexpected() }
        return policy
    }

    /// The passphrase crosses the socket as `prove` sends it, and the service checks it.
    public func setAccessPolicy(_ policy: AccessPolicy, passphrase: SecureBytes) throws {
        var bytes = passphrase.withUnsafeBytes { Array($0) }
        defer { Framing.wipe(&bytes) }
        guard case .status = try call(.setAccessPolicy(policy, passphrase: bytes)) else { throw unexpected() }
    }

    /// The service writes the copy, so what it has committed (in its write-ahead log) is in it.
    /// `destination` is made absolute here: the service's working directory is not ours.
    public func backup(to destination: String) throws -> BackupSummary {
        let absolute =
            destination.hasPrefix("/") ? destination : FileManager.default.currentDirectoryPath + "/" + destination
        guard case .backup(let items, let format, let counter) = try call(.backup(destination: absolute)) else {
            throw unexpected()
        }
        return BackupSummary(items: items, format: format, counter: counter)
    }

    /// Proves this connection holds the vault's passphrase: from now on it acts in every
    /// access group, as a command that opened the vault with it would (one KDF in the service).
    public func prove(passphrase: SecureBytes) throws {
        var bytes = passphrase.withUnsafeBytes { Array($0) }
        defer { Framing.wipe(&bytes) }
        guard case .status = try call(.prove(passphrase: bytes)) else { throw unexpected() }
    }

    /// Changes the vault's passphrase in the service (and rotates its master key): every face
    /// the service hosts goes on with the new keys, with no restart and no alarm.
    public func changePassphrase(_ change: PassphraseChange) throws {
        var change = change
        defer {
            Framing.wipe(&change.old)
            Framing.wipe(&change.new)
        }
        guard case .status = try call(.changePassphrase(change)) else { throw unexpected() }
    }

    /// Locks the service's keychain (every face it hosts); returns its state after.
    public func lock() throws -> String {
        guard case .status(_, let state) = try call(.lock) else { throw unexpected() }
        return state
    }

    /// Unlocks the service's keychain with its passphrase; returns its state after.
    public func unlock(passphrase: SecureBytes) throws -> String {
        var bytes = passphrase.withUnsafeBytes { Array($0) }
        defer { Framing.wipe(&bytes) }
        guard case .status(_, let state) = try call(.unlock(passphrase: bytes)) else { throw unexpected() }
        return state
    }

    /// Asks the service to mount its vault on `request.mountpoint` (`keychainfs mount` joining
    /// it); returns once the mount is live, with the service's lock state.
    public func mount(_ request: MountRequest) throws -> String {
        guard case .status(_, let state) = try call(.mount(request)) else { throw unexpected() }
        return state
    }

    /// The service's vault path and lock state (`ok`-style text: `unlocked 2026-…`).
    public func status() throws -> (vault: String, state: String) {
        guard case .status(let vault, let state) = try call(.status) else { throw unexpected() }
        return (vault, state)
    }
}
