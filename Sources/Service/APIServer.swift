import CPlatform
import FoundationEssentials
import Glibc
import Keychain
import KeychainAPI
import KeychainAccess
import KeychainCrypto
import Synchronization

/// The keychain service's API socket (docs/service.md): `$XDG_RUNTIME_DIR/keychainfs/vault-<dev>-<ino>.sock`,
/// 0600 in a 0700 directory, one thread per connection. Each connection's peer is pinned at
/// accept (`PeerProcess`), greeted with a fresh nonce, and every request is judged as every
/// process that wrote its bytes (`SCM_CREDENTIALS`), through `AccessLayer.caller(peer:)`, and
/// answered through a `KeychainSession`: the same groups, prompts and audit as the mount.
public final class APIServer: Sendable {
    public let path: String
    let keychain: Keychain
    let access: AccessLayer
    private let listener: Int32
    /// The default vault's socket systemd listens on for the service (`keychainfs.socket`,
    /// `SocketActivation.swift`), served beside `path`; systemd owns its file.
    private let activated: Int32?
    /// Connections beyond 64 at once are closed at accept (logged): a client cannot make the
    /// service start unbounded threads.
    private let connections = ConnectionLimit(64)
    /// Mounts the vault for `keychainfs mount` joining this service (`ServiceHost.join`); nil
    /// where the service cannot (it has a mount of its own already, or is being stopped).
    private let mounter = Mutex<(@Sendable (MountRequest) throws -> Void)?>(nil)
    /// Wakes the `watch` connections at each commit (APIServer+Watch.swift).
    let feed = ChangeFeed()

    /// What a `mount` request runs.
    public func onMount(_ mount: (@Sendable (MountRequest) throws -> Void)?) { mounter.withLock { $0 = mount } }

    public init(
        keychain: Keychain, access: AccessLayer, directory: String = ServiceLocator.directory(), activated: Int32? = nil
    ) throws {
        guard let identity = ServiceLocator.identity(ofVault: keychain.path) else {
            throw KeychainError(.noSuchKeychain, "the vault \(keychain.path) is not a regular file")
        }
        try ServiceLocator.prepareDirectory(directory)
        self.path = ServiceLocator.socketPath(for: identity, directory: directory)
        self.keychain = keychain
        self.access = access
        self.activated = activated
        access.onCommit { [feed] _ in feed.wake() }
        if let activated { _ = kcfs_set_passcred(activated) }
        // A socket left by a service that died (kill -9) is replaced; one that answers belongs
        // to a live service of the same vault, which the daemon's lock on the file rules out.
        unlink(path)
        // Passing credentials from the listener on: every accepted socket has it before its
        // client's first byte.
        do { listener = try UnixSocket.listen(at: path, backlog: 64, passCredentials: true) } catch {
            throw KeychainError(.io, "cannot listen on \(path): \(error)")
        }
    }

    /// Accepts on a thread of its own per listening socket until `stop()`.
    public func start() {
        accept(on: listener)
        if let activated { accept(on: activated) }
    }

    private func accept(on listener: Int32) {
        Threads.detach { [self] in
            while true {
                let client = kcfs_accept_cloexec(listener)
                if client < 0 {
                    let e = errno
                    if e == EINTR || e == ECONNABORTED { continue }
                    // stop() closed the listener: the thread ends. Anything else (EMFILE, ENOMEM)
                    // passes: said, and tried again a moment later, never the end of the API.
                    if e == EBADF || e == EINVAL { return }
                    Log.error("api: accept: \(String(cString: strerror(e))); retrying")
                    usleep(100_000)
                    continue
                }
                // A client that connects and says nothing holds a thread: it is let go after a
                // minute without a request.
                var idle = timeval(tv_sec: 60, tv_usec: 0)
                setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &idle, socklen_t(MemoryLayout<timeval>.size))
                _ = kcfs_set_passcred(client)
                guard connections.admit() else {
                    Log.error("api: more than \(connections.limit) connections; one refused")
                    close(client)
                    continue
                }
                Threads.detach { [self] in
                    serve(client)
                    close(client)
                    connections.release()
                }
            }
        }
    }

    public func stop() {
        for fd in [listener] + (activated.map { [$0] } ?? []) {
            shutdown(fd, Int32(SHUT_RDWR))
            close(fd)
        }
        unlink(path)
    }

    private func serve(_ client: Int32) {
        let peer: PeerProcess
        do { peer = try PeerProcess.pin(socket: client) } catch {
            Log.info("api: connection refused: \(error)")
            return
        }
        let nonce = Sodium.randomBytes(APIWire.nonceLength)
        do { try Framing.send(client, APICodec.encode(APIHello(nonce: nonce))) } catch { return }
        // Set once the connection proved the passphrase (`prove`).
        var holder = false
        while true {
            // Every pid the kernel attached to this request's bytes.
            var senders = Set<pid_t>()
            var frame: [UInt8]
            do {
                guard
                    let f = try Framing.receive({ buffer in
                        var sender: Int32 = 0
                        let n = kcfs_recv_with_sender(client, buffer.baseAddress, UInt(buffer.count), &sender)
                        if n > 0 { senders.insert(sender) }
                        return n
                    })
                else { return }
                frame = f
            } catch {
                return
            }
            defer { Framing.wipe(&frame) }
            if case (.watch(let since, let follow), let sent)? = try? APICodec.decodeRequest(frame),
                Sodium.constantTimeEqual(sent, nonce)
            {
                return serveWatch(
                    client, since: since, follow: follow, peer: peer, senders: senders, holder: holder)
            }
            let reply = answer(frame, peer: peer, nonce: nonce, senders: senders, holder: &holder)
            var body = APICodec.encode(reply)
            defer { Framing.wipe(&body) }
            do { try Framing.send(client, body) } catch { return }
        }
    }

    private func answer(
        _ frame: [UInt8], peer: PeerProcess, nonce expected: [UInt8], senders: Set<pid_t>, holder: inout Bool
    ) -> APIReply {
        let request: APIRequest
        let nonce: [UInt8]
        do { (request, nonce) = try APICodec.decodeRequest(frame) } catch let e as KeychainError {
            return .failure(e.status, e.message)
        } catch {
            return .failure(.decode, "malformed request")
        }
        guard Sodium.constantTimeEqual(nonce, expected) else {
            return .failure(.param, "request without the connection's nonce (sent before the greeting?)")
        }
        switch request {
        case .status:
            // Answered once the buffered audit lines are written, as the control socket does.
            access.audit?.flush()
            return status()
        case .lock:
            keychain.lock()
            Log.info("api: locked by \(peer.identity.description)")
            access.audit?.flush()
            return status()
        case .unlock(var passphrase):
            defer { Framing.wipe(&passphrase) }
            return withPassphrase(passphrase, peer: peer, what: "unlock") {
                try keychain.unlock(passphrase: $0)
                access.invalidatePolicy()
            }
        case .prove(var passphrase):
            defer { Framing.wipe(&passphrase) }
            let reply = withPassphrase(passphrase, peer: peer, what: "prove the passphrase") {
                try keychain.verifyPassphrase($0)
            }
            if case .status = reply { holder = true }
            return reply
        case .changePassphrase(var change):
            defer {
                Framing.wipe(&change.old)
                Framing.wipe(&change.new)
            }
            return changePassphrase(change, by: peer)
        case .setAccessPolicy(let policy, var passphrase):
            defer { Framing.wipe(&passphrase) }
            // The passphrase is the authority, as for a command that opens the vault: the core
            // unwraps the master key with it to sign the policy. Every face of the service
            // decides its next request under the new policy (no cached one, no alarm).
            return withPassphrase(passphrase, peer: peer, what: "access policy change") {
                try keychain.setAccessPolicy(policy, passphrase: $0)
                access.invalidatePolicy()
            }
        case .mount(let mount):
            guard let mounter = mounter.withLock({ $0 }) else {
                return .failure(.param, "the keychain service of \(keychain.path) does not take a mount now")
            }
            do { try mounter(mount) } catch let e as KeychainError {
                Log.info("api: mount on \(mount.mountpoint) by \(peer.identity.description) failed: \(e.message)")
                return .failure(e.status, e.message)
            } catch {
                return .failure(.io, "cannot mount on \(mount.mountpoint): \(error)")
            }
            Log.info("api: mounted on \(mount.mountpoint) for \(peer.identity.description)")
            return status()
        case .copyMatching, .add, .update, .delete, .addOrUpdate, .identities, .createKeyPair, .storeBatch,
            .accessPolicy, .backup, .watch:
            return answerVerb(request, peer: peer, senders: senders, holder: holder)
        }
    }

    private func status() -> APIReply { .status(vault: keychain.path, state: Self.describe(keychain.lockState)) }

    /// A request that carries the vault's passphrase: `body` with it in guarded memory; the
    /// log says who and whether it held, never the passphrase.
    private func withPassphrase(
        _ bytes: [UInt8], peer: PeerProcess, what: String, _ body: (SecureBytes) throws -> Void
    ) -> APIReply {
        do {
            try body(try SecureBytes(copying: bytes))
            Log.info("api: \(what) by \(peer.identity.description)")
            return status()
        } catch let e as KeychainError {
            Log.info("api: \(what) by \(peer.identity.description) refused: \(e.status.name)")
            return .failure(e.status, e.message)
        } catch {
            return .failure(.io, "the passphrase could not be checked")
        }
    }

    /// Who a request acts for: the pinned process as the passphrase's holder when it proved it
    /// and wrote the request itself, else the groups `PeerProcess.judge` leaves it (fail-closed),
    /// with why they are fewer. A lessened request is no holder's: the passphrase was proved by
    /// the pinned process. The one rule for every request of the API socket (a verb, a watch).
    func caller(of peer: PeerProcess, senders: Set<pid_t>, holder: Bool) throws -> (Caller, String?) {
        let (identities, why) = peer.judge(senders: senders)
        let caller =
            holder && why == nil
            ? try access.holderCaller(peer.identity) : try access.caller(peer: identities, lessened: why)
        return (caller, why)
    }

    /// A keychain verb, through a `KeychainSession` for the pinned process when it wrote the
    /// request itself, unchanged (as the passphrase's holder once it proved it), else for the
    /// default group only (`PeerProcess.judge`, fail-closed).
    private func answerVerb(_ request: APIRequest, peer: PeerProcess, senders: Set<pid_t>, holder: Bool) -> APIReply {
        let (caller, why): (Caller, String?)
        do {
            (caller, why) = try self.caller(of: peer, senders: senders, holder: holder)
        } catch let e as KeychainError {
            return .failure(e.status, e.message)
        } catch {
            return .failure(.io, "the caller could not be decided")
        }
        if let why { Log.info("api: \(peer.identity.description): default group only: \(why)") }
        let session = KeychainSession(
            keychain: keychain, caller: caller, audit: access.audit, via: "api", lessened: why)
        do {
            switch request {
            case .copyMatching(let q): return .items(try session.copyMatching(q.query).map(WireItem.init))
            case .add(let c, let a, let data, let extras):
                return .item(WireItem(try session.add(c, a, data: data, extras: extras)), added: true)
            case .update(let q, let a, let data, let extras):
                return .count(try session.update(q.query, attributes: a, data: data, extras: extras))
            case .delete(let q): return .count(try session.delete(q.query))
            case .addOrUpdate(let c, let a, let data, let extras):
                let (item, added) = try session.addOrUpdate(c, a, data: data, extras: extras)
                return .item(WireItem(item), added: added)
            default:
                return try answerVaultVerb(request, session: session, by: peer)
                    ?? .failure(.param, "not a keychain verb")
            }
        } catch let e as KeychainError {
            return .failure(e.status, e.message)
        } catch {
            // The type only: a raw error value could carry a library's internals.
            return .failure(.io, "internal failure (\(type(of: error)))")
        }
    }

    /// The old passphrase is the authority here, as for a command that opens the vault.
    private func changePassphrase(_ change: PassphraseChange, by peer: PeerProcess) -> APIReply {
        do {
            let old = try SecureBytes(copying: change.old)
            let new = try SecureBytes(copying: change.new)
            var parameters: PasswordHashParameters?
            if let ops = change.opsLimit, let mem = change.memLimit {
                parameters = PasswordHashParameters(opsLimit: ops, memLimit: mem)
            }
            if change.rotate {
                try keychain.rotateMasterKey(old: old, new: new, parameters: parameters)
            } else {
                try keychain.changePassphrase(old: old, new: new, parameters: parameters)
            }
            // The policy is re-signed under the new keys: read it again, not from the cache.
            access.invalidatePolicy()
            Log.info(
                "api: \(peer.identity.description) \(change.rotate ? "rotated the master key" : "changed the passphrase")"
            )
            return .status(vault: keychain.path, state: Self.describe(keychain.lockState))
        } catch let e as KeychainError {
            Log.info("api: \(peer.identity.description): passphrase change refused: \(e.status.name)")
            return .failure(e.status, e.message)
        } catch {
            return .failure(.io, "internal failure (\(type(of: error)))")
        }
    }

    static func describe(_ state: LockState) -> String {
        switch state {
        case .neverUnlocked: "locked never-unlocked"
        case .locked(let since): "locked " + AttributeText.iso8601(since)
        case .unlocked(let since): "unlocked " + AttributeText.iso8601(since)
        }
    }
}
