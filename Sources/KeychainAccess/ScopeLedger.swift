import FoundationEssentials
import Glibc
@_spi(CallerRule) import Keychain
import Synchronization

/// What the callers of a scope a face names (a D-Bus client's unique bus name) were given, for
/// this unlock of the keychain: the user presence its prompts were answered with, and whether a
/// prompt confirmed the pid and executable it rests on where the face could not pin its
/// process. Kept here, by the door's owner, so that no face raises a `Caller` itself: a face asks
/// for its caller in a scope (`caller(_:scope:pinned:)`) and reports what a prompt gave
/// (`grant`, `confirm`). A lock, then an unlock, forgets everything (the next unlock asks again);
/// so does the scope ending (`forget`: the client left the bus).
public final class ScopeLedger: Sendable {
    private struct Scope {
        var unlockedSince: Date
        var grants: Set<Int64> = []
        /// The pid and executable a prompt confirmed.
        var confirmed: (pid: pid_t, executable: String?)?
    }
    private let scopes = Mutex<[String: Scope]>([:])
    let keychain: Keychain

    init(keychain: Keychain) { self.keychain = keychain }

    /// The scope as this unlock has it (a new one after each unlock), or nil while locked.
    private func current(_ name: String, _ body: (inout Scope) -> Void = { _ in }) -> Scope? {
        guard case .unlocked(let since) = keychain.lockState else { return nil }
        return scopes.withLock { all in
            var scope = all[name].flatMap { $0.unlockedSince == since ? $0 : nil } ?? Scope(unlockedSince: since)
            body(&scope)
            all[name] = scope
            return scope
        }
    }

    /// `base` (the access layer's caller for the process) as this scope may use it: never with
    /// a prompt of its own or the core's authentication UI (the face asks through its own
    /// prompts), with the presence its prompts gave in this unlock; and, unless `pinned` (the
    /// face holds the process: a pidfd) or a prompt confirmed this pid and executable, with its
    /// identity unconfirmed: no remembered answers, nothing that rests on its executable.
    public func caller(_ base: Caller, scope name: String, pid: pid_t, pinned: Bool) -> Caller {
        let scope = current(name)
        var caller = base.withoutPrompts()
        let confirmed = scope?.confirmed.map { $0.pid == pid && $0.executable == base.executable } ?? false
        if !pinned && !confirmed { caller = caller.unconfirmed() }
        return caller.granting(scope?.grants ?? [])
    }

    /// Presence a prompt of this scope was answered with, for these items: kept for the scope's
    /// next requests, and returned on `caller` for the rest of this one.
    public func grant(_ items: Set<Int64>, scope name: String, to caller: Caller) -> Caller {
        guard !items.isEmpty else { return caller }
        _ = current(name) { $0.grants.formUnion(items) }
        return caller.granting(items)
    }

    /// A prompt confirmed the pid and executable `caller` rests on: kept for this scope's next
    /// requests, and `caller` returned whole for the rest of this one.
    public func confirm(_ caller: Caller, pid: pid_t, scope name: String) -> Caller {
        _ = current(name) { $0.confirmed = (pid, caller.executable) }
        return caller.confirmed()
    }

    /// The scope ended (the client left): what it was given is forgotten. Returns whether it
    /// had been given presence.
    @discardableResult public func forget(scope name: String) -> Bool {
        scopes.withLock { $0.removeValue(forKey: name)?.grants.isEmpty == false }
    }
}
