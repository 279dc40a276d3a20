import FoundationEssentials
import Glibc
@_spi(CallerRule) import Keychain
import SystemPackage
import Synchronization

/// The access layer: who is calling (the FUSE request's thread id → process → executable,
/// cached per thread and re-checked on every request against pid reuse and execve), which access groups that gives under the vault's policy,
/// how to ask for user presence, and the audit log of every access decision.
public final class AccessLayer: Sendable {
    let keychain: Keychain
    public let audit: AuditLog?
    private let presenceVerifier = Mutex<(any PresenceVerifier)?>(nil)
    /// The policy as last read, when, and the vault's change stamp then.
    private let policy = Mutex<(AccessPolicy, Date, [Int64]?)?>(nil)
    /// Callers identified once per thread lifetime, re-validated on each request (IdentityCache).
    public let identities = IdentityCache()

    /// How user presence is asked (set once by the mount command before serving).
    public var presence: (any PresenceVerifier)? {
        get { presenceVerifier.withLock { $0 } }
        set { presenceVerifier.withLock { $0 = newValue } }
    }

    /// The mount's `via=fuse vault=PATH`, spelled once: every open's audit line ends with it.
    private let mountLine: String

    public init(keychain: Keychain, audit: AuditLog?) {
        self.keychain = keychain
        self.audit = audit
        mountLine = VaultWord.line(via: "fuse", path: keychain.path)
    }

    /// The door for one request of a face this layer serves (the mount: `via` "fuse"): every
    /// keychain verb the face asks goes through it, decided for `caller` and audited.
    public func session(
        _ caller: Caller, via: String = "fuse", lessened: String? = nil, names: AuditNames = .door
    ) -> KeychainSession {
        KeychainSession(
            keychain: keychain, caller: caller, audit: audit, via: via, lessened: lessened, names: names,
            line: via == "fuse" ? mountLine : VaultWord.line(via: via, path: keychain.path))
    }

    /// The door for what every process of the user may see: the `default` access group (every
    /// process is in it, whatever the policy), no prompt, and nothing it does is audited as a
    /// decision (it reads attributes only). The mount's replay of a change to its watchers
    /// (issue 30) reads through it, so it can show nothing some process may not see.
    public func everyoneSession() -> KeychainSession {
        session(
            Caller(
                accessGroups: [Caller.defaultAccessGroup], authenticationUI: .fail,
                processDescription: "keychainfs (replay)"))
    }

    /// The presence answers and identity confirmations of a face's scopes (ScopeLedger.swift).
    public func makeScopeLedger() -> ScopeLedger { ScopeLedger(keychain: keychain) }

    /// The door for the service's own requests about its state (`via`: "control" for the
    /// control socket's `keychainfs lock|unlock|status MOUNTPOINT`, whose peer the socket
    /// checked is the user; "service" for the idle lock): no access group, no prompt; it may
    /// lock, unlock with the passphrase, and read the lock state, which need none.
    public func serviceSession(describedAs description: String, via: String) -> KeychainSession {
        session(Caller(accessGroups: [], authenticationUI: .fail, processDescription: description), via: via)
    }

    /// The keychain's lock state (for a status answer and the idle lock).
    public var lockState: LockState { keychain.lockState }

    /// Called after every lock (a face revokes what it holds of the keys' reach: open handles).
    public func onLock(_ observer: @escaping @Sendable () -> Void) { keychain.onLock(observer) }

    /// Called after every unlock (the idle lock starts counting).
    public func onUnlock(_ observer: @escaping @Sendable () -> Void) { keychain.onUnlock(observer) }

    /// Called after every commit of this process that changed items, with the changes, before
    /// the writers return (`Keychain.onCommit`): the mount drops what the kernel holds of them.
    public func onCommit(_ observer: @escaping @Sendable ([ItemChange]) -> Void) { keychain.onCommit(observer) }

    /// Called on each writer's own thread with its own changes, just before it returns
    /// (`Keychain.beforeWriterReturns`): where a face may wait, bounded, for what it does about them.
    public func beforeWriterReturns(_ observer: @escaping @Sendable ([ItemChange]) -> Void) {
        keychain.beforeWriterReturns(observer)
    }

    /// A committed change's names before and after it (`Keychain.names(of:)`): what an observer
    /// that shows changes by name spells them from. Never a secret.
    public func names(of change: ItemChange) -> ItemChange.Names { keychain.names(of: change) }

    /// A committed change's attributes before and after it, of any class (`Keychain.attributes(of:)`).
    public func attributes(of change: ItemChange) -> (before: Attributes?, after: Attributes?) {
        keychain.attributes(of: change)
    }

    /// Called for each row the core skipped as damaged (for the daemon log: never a secret).
    public func onDamagedRow(_ observer: @escaping @Sendable (DamagedRow) -> Void) {
        keychain.onDamagedRow(observer)
    }

    /// The policy, re-read at most once a second (a CLI change shows within a second), and
    /// only when the vault changed since it was read: a policy changes by a commit, and reading
    /// it verifies its signature, which the first request after a quiet second paid every time
    /// (a cold `stat` cost twice the floor's).
    func currentPolicy() throws -> AccessPolicy {
        let now = Date()
        guard let (p, at, stamp) = policy.withLock({ $0 }) else { return try readPolicy(at: now) }
        if now.timeIntervalSince(at) < 1 { return p }
        if let stamp, let current = try? keychain.changeStamp(), current == stamp {
            policy.withLock { $0 = (p, now, stamp) }
            return p
        }
        return try readPolicy(at: now)
    }

    private func readPolicy(at now: Date) throws -> AccessPolicy {
        // The stamp first: a commit between the two leaves it behind, so the policy is read again.
        let stamp = try? keychain.changeStamp()
        let p: AccessPolicy
        do { p = try keychain.accessPolicy() } catch KeychainStatus.interactionNotAllowed {
            policy.withLock { $0 = (AccessPolicy(), now, nil) }
            return AccessPolicy()  // not unlocked yet: nothing is readable anyway
        }
        policy.withLock { $0 = (p, now, stamp) }
        return p
    }

    /// Forgets the policy as last read: after an unlock, the next caller is decided under the
    /// signed policy, not the empty one a locked vault gave.
    public func invalidatePolicy() { policy.withLock { $0 = nil } }

    /// Whether an access policy is in force: then the kernel must not cache item entries,
    /// or one process's lookup would answer another's.
    public var hasPolicy: Bool { (try? currentPolicy().isEmpty == false) ?? false }

    /// `caller` (decided earlier, for an open handle) under the access policy as it is now: its
    /// executable's access groups and remembered presence again; what it was granted for this
    /// handle (presence given at open) stays.
    public func reevaluated(_ caller: Caller) throws -> Caller {
        guard let executable = caller.executable else { return caller }
        let policy: AccessPolicy
        do { policy = try currentPolicy() } catch let e as KeychainError {
            Log.error("access policy: \(e.message)")
            throw Errno.ioError
        }
        return caller.regrouped(
            policy.accessGroups(forExecutable: executable), granted: policy.rememberedPresence[executable] ?? [])
    }

    /// The caller of a request from thread `tid`. With no policy, and unless the decision is
    /// audited, the process need not be identified at all (the fast path).
    public func caller(tid: pid_t, identify: Bool) throws -> Caller {
        let policy: AccessPolicy
        do { policy = try currentPolicy() } catch let e as KeychainError {
            Log.error("access policy: \(e.message)")
            throw Errno.ioError
        }
        let presence = self.presence
        guard identify || !policy.isEmpty || !policy.rememberedPresence.isEmpty else {
            return Caller(presence: presence)
        }
        guard let process = identities.process(tid: tid) else {
            // The process is gone (or in another pid namespace): nothing to decide for.
            if policy.isEmpty { return Caller(presence: presence, processDescription: "pid \(tid)") }
            throw Errno.permissionDenied
        }
        // "Always allow" answers the user gave this executable count as presence already given.
        var groups = policy.accessGroups(forExecutable: process.executable)
        var grants =
            policy.rememberedPresence.isEmpty ? [] : process.executable.flatMap { policy.rememberedPresence[$0] } ?? []
        var description = process.description
        var executable = process.executable
        // Code injected into an allowed program (a tracer, LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH,
        // a process that hid itself from us) gets none of its groups or remembered answers
        // (docs/security.md, "The service's callers"). Read only when the program has something
        // to lose, so callers outside every group pay nothing.
        if groups.count > 1 || !grants.isEmpty, let why = identities.taint(tid: tid) {
            groups = [Caller.defaultAccessGroup]
            grants = []
            executable = nil
            description += " (default group only: \(why))"
        }
        return Caller(
            accessGroups: groups, presence: presence, processDescription: description, processKey: process.key,
            presenceGrants: grants, executable: executable)
    }

    /// The caller of a message on a socket face (the service's API socket, the ssh agent):
    /// `identities` are every process involved (`PeerProcess.judge`), the connecting one first.
    /// Fail closed: when anything lessened the identity (`lessened`: another process wrote the
    /// message, the connecting process exec'd or is gone, a sender could not be identified, the
    /// process is traced or preloaded), the caller is in the default group only, with no
    /// remembered presence; the description names every process involved, for the audit line.
    public func caller(peer identities: [ProcessIdentity], lessened: String?) throws -> Caller {
        let policy: AccessPolicy
        do { policy = try currentPolicy() } catch let e as KeychainError {
            Log.error("access policy: \(e.message)")
            throw e
        }
        guard let first = identities.first else { return Caller(presence: presence) }
        let whole = lessened == nil && identities.count == 1
        let others = identities.dropFirst().map(\.description).joined(separator: ", ")
        return Caller(
            accessGroups: policy.accessGroups(forExecutable: whole ? first.executable : nil), presence: presence,
            processDescription: others.isEmpty ? first.description : first.description + " (with " + others + ")",
            processKey: first.key,
            presenceGrants: whole ? first.executable.flatMap { policy.rememberedPresence[$0] } ?? [] : [],
            // Only a whole, untainted identity may be remembered for ("Always allow").
            executable: whole ? first.executable : nil)
    }

    /// The caller a holder of the vault's passphrase is (a command that opened the vault with
    /// it, or a connection that proved it to the service): every group of the policy, `default`
    /// first (where its new items go).
    public func holderCaller(_ process: ProcessIdentity?) throws -> Caller {
        let policy: AccessPolicy
        do { policy = try currentPolicy() } catch let e as KeychainError {
            Log.error("access policy: \(e.message)")
            throw e
        }
        let groups = policy.groups.map(\.name).filter { $0 != Caller.defaultAccessGroup }
        return Caller(
            accessGroups: [Caller.defaultAccessGroup] + groups, presence: presence,
            processDescription: (process?.description ?? "pid ?") + " (passphrase holder)",
            processKey: process?.key ?? "")
    }
}
