import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess

// Prompt objects, /org/freedesktop/secrets/prompt/N: org.freedesktop.Secret.Prompt. Unlock hands
// one out when the vault's passphrase or an item's user presence must be asked for.

extension SecretServiceProvider {
    static let promptInterface = Interface(
        name: Introspection.prompt,
        methods: [
            Method("Prompt", in: [Argument("window-id", "s")]) { try $0.prompt($1, member: "Prompt") },
            Method("Dismiss") { try $0.prompt($1, member: "Dismiss") },
        ],
        signals: [Signal("Completed", [Argument("dismissed", "b"), Argument("result", "v")])])

    /// Prompt.Prompt runs the prompt on a thread of its own (the bus thread goes on answering
    /// other clients) and says Completed when it ends; Prompt.Dismiss ends it unanswered. Only
    /// the client that got the prompt may use it, once.
    func prompt(_ call: Call, member: String) throws {
        guard case .prompt(let n) = call.object else {
            throw BusError("org.freedesktop.Secret.Error.NoSuchObject", "no such prompt")
        }
        let started = prompts.withLock { p -> (pending: PendingPrompt, runs: Bool)? in
            guard let open = p.open[n], open.owner == call.sender else { return nil }
            p.open[n] = nil
            guard member == "Prompt", p.running < Self.maxRunningPrompts else { return (open, false) }
            p.running += 1
            return (open, true)
        }
        guard let started else {
            throw BusError("org.freedesktop.Secret.Error.NoSuchObject", "no prompt \(n) of this client")
        }
        if member == "Prompt" { try call.reader.skip("s") }  // the window id: pinentry finds its own
        try reply(call) { _ throws(BusError) in }
        guard started.runs else {
            if member == "Prompt" {
                Log.info("secret service: \(Self.maxRunningPrompts) prompts are up; prompt \(n) completes dismissed")
            }
            completed(n, owner: started.pending.owner, dismissed: true, unlocked: [])
            return
        }
        Threads.detach { [self] in
            defer { prompts.withLock { $0.running -= 1 } }
            let (dismissed, unlocked) = run(started.pending)
            let owner = started.pending.owner
            onBusThread { $0.completed(n, owner: owner, dismissed: dismissed, unlocked: unlocked) }
        }
    }

    /// A prompt's work, off the bus thread: the vault's passphrase if the keychain was locked,
    /// then a presence confirmation for each item that needs one from this caller ("Always
    /// allow" also asks for the passphrase, which signs the decision into the policy). Returns
    /// whether it was dismissed (cancelled, denied, timed out, or a wrong passphrase three
    /// times) and the objects it unlocked.
    func run(_ pending: PendingPrompt) -> (dismissed: Bool, unlocked: [String]) {
        guard let prompter else { return (true, []) }
        var caller = pending.caller
        do {
            if pending.unlocksVault {
                try prompter.unlockVault(caller: caller, purpose: "read its secrets through the Secret Service")
                access.invalidatePolicy()
            }
            if pending.confirmsIdentity, let item = firstNeedingIdentity(pending.paths, caller) {
                // One confirmation naming the pid and executable (Allow or Deny; nothing is
                // remembered: a pid is what cannot be trusted here).
                _ = try prompter.confirm(item: item, caller: caller, remember: nil)
                audit(
                    caller, item.id, .dbusPresence, true, "identity confirmed (the bus gives a pid, no process handle)")
                caller = ledger.confirm(caller, pid: pending.pid, scope: pending.owner)
            }
            for path in pending.paths {
                guard case .item(let itemClass, let id)? = ObjectPath(path),
                    let item = try? visibleItem(caller, itemClass, id),
                    caller.needsPresence(for: item)
                else { continue }
                let answer = try prompter.confirm(item: item, caller: caller) { passphrase in
                    guard let executable = caller.executable else { return }
                    try self.session(caller).rememberPresence(
                        executable: executable, itemID: id, passphrase: passphrase)
                }
                audit(caller, id, .dbusPresence, true, answer.auditNote)
                if case .remembered = answer { access.invalidatePolicy() }
                caller = ledger.grant([id], scope: pending.owner, to: caller)
            }
        } catch {
            Log.info("secret service: the prompt for \(caller.processDescription) ended: \(error)")
            audit(caller, nil, .dbusPresence, false, (error as? KeychainError)?.status.name)
            return (true, [])
        }
        return (false, pending.paths.filter { (try? isUnlocked($0, for: caller)) ?? false })
    }

    /// The first item of `paths` that `caller` may see and whose identity it needs confirmed.
    func firstNeedingIdentity(_ paths: [String], _ caller: Caller) -> KeychainItem? {
        for path in paths {
            guard case .item(let itemClass, let id)? = ObjectPath(path),
                let item = try? visibleItem(caller, itemClass, id), needsIdentity(item, caller)
            else { continue }
            return item
        }
        return nil
    }

    /// Whether an object Unlock names is open to `caller` now: the collection when the keychain
    /// is unlocked, an item it may see when its secret is in reach (Locked false); another
    /// path never. An item the caller may not see is NoSuchObject.
    func isUnlocked(_ path: String, for caller: Caller) throws -> Bool {
        switch ObjectPath(path) {
        case .collection(.login)?: return !collectionLocked
        case .collection(.session)?: return true
        case .sessionItem(let n)?: return (try? sessionItem(n)) != nil
        case .item(let itemClass, let id)?:
            return !isLocked(try visibleItem(caller, itemClass, id), for: caller)
        default: return false
        }
    }

    /// Prompt.Completed, and PropertiesChanged for what it unlocked (on the bus thread). Both
    /// go to the prompt's client only (`owner`), but the collection's `Locked` (the keychain
    /// unlocked for everyone): the objects are the items that client asked for, which may be of
    /// an access group other clients are not in (their paths must not reach them), and an item
    /// a presence or identity prompt unlocked is unlocked for that client alone.
    func completed(_ n: Int, owner: String, dismissed: Bool, unlocked: [String]) {
        emit(ObjectPath.prompt(n), Introspection.prompt, "Completed", to: owner) { w throws(BusError) in
            try w.bool(dismissed)
            try w.variant("ao") { () throws(BusError) in try w.objectPaths(unlocked) }
        }
        for path in unlocked {
            if ObjectPath.collectionPaths.contains(path) {
                propertiesChanged(path, Introspection.collection, ["Locked"])
            } else {
                propertiesChanged(path, Introspection.item, ["Locked"], to: owner)
            }
        }
    }
}

extension PresenceAnswer {
    /// What the audit line says of an allowed presence prompt.
    var auditNote: String {
        switch self {
        case .allowedOnce: return "allowed once"
        case .remembered: return "always allowed (remembered in the policy)"
        case .allowedNotRemembered(let why): return "allowed once; not remembered: \(why)"
        }
    }
}
