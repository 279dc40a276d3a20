import FoundationEssentials
import Glibc
import Synchronization
import Keychain
import KeychainCrypto

/// User presence through pinentry (the Assuan protocol of GnuPG's prompt programs), on the
/// calling process's terminal or display:
/// - `userPresence`: a confirmation naming the process and the item (CONFIRM);
/// - `devicePasscode`: the vault passphrase (GETPIN), checked against the vault.
/// A reuse window (0–300 s, per item and per the caller's `presenceReuse` scope: by default its
/// process) skips repeated prompts. With no terminal,
/// no display or no pinentry there is no way to ask: errSecInteractionNotAllowed at once.
/// A prompt runs on the requesting thread only; other requests go on meanwhile.
public final class PinentryPresence: PresenceVerifier, Sendable {
    public let program: String?
    public let reuseSeconds: Double
    public let timeoutSeconds: Int
    let keychain: Keychain
    private struct State {
        /// When a process (pid and start time) last allowed an item, for the reuse window.
        var grants: [String: Date] = [:]
        /// Prompts waiting at once. Each holds a FUSE worker thread; past the cap a request
        /// that would prompt is refused at once instead of starving every other request.
        var activePrompts = 0
    }
    private let state = Mutex(State())
    /// Held for the whole of a vault-unlock prompt: one prompt at a time, the others wait.
    private let unlocking = Mutex(())
    public static let maxConcurrentPrompts = 4

    public init(keychain: Keychain, program: String?, reuseSeconds: Double, timeoutSeconds: Int = 60) {
        self.keychain = keychain
        self.program = program ?? Self.findProgram()
        self.reuseSeconds = min(max(reuseSeconds, 0), 300)
        self.timeoutSeconds = timeoutSeconds
    }

    static func findProgram() -> String? {
        let dirs = (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":").map(
            String.init)
        for name in ["pinentry", "pinentry-tty", "pinentry-curses", "pinentry-gnome3", "pinentry-qt"] {
            for dir in dirs where access(dir + "/" + name, X_OK) == 0 { return dir + "/" + name }
        }
        return nil
    }

    /// Where a prompt for this caller appears: its process's terminal or display (nil, nil:
    /// nowhere, so no prompt is possible).
    static func promptTarget(_ caller: Caller) -> (pid: pid_t, tty: String?, display: String?) {
        let pid = pid_t(caller.processKey.split(separator: ":").first.flatMap { Int32($0) } ?? 0)
        guard pid > 0 else { return (0, nil, nil) }
        let display =
            ProcessIdentity.environment(of: pid, "WAYLAND_DISPLAY") ?? ProcessIdentity.environment(of: pid, "DISPLAY")
        return (pid, ProcessIdentity.terminal(of: pid), display)
    }

    /// Where to ask this caller; errSecInteractionNotAllowed ("WHY, and pid 42 … has no terminal
    /// or display to ask on") when there is nowhere.
    static func askable(
        _ caller: Caller, _ why: String, _ toAsk: String = "to ask on"
    ) throws -> (pid: pid_t, tty: String?, display: String?) {
        let target = promptTarget(caller)
        guard target.tty != nil || target.display != nil else {
            throw KeychainError(
                .interactionNotAllowed,
                "\(why), and \(caller.processDescription) has no terminal or display \(toAsk)")
        }
        return target
    }

    /// pinentry started on the caller's terminal or display (with its TERM), titled.
    static func session(
        _ program: String, at target: (pid: pid_t, tty: String?, display: String?), timeout: Int
    ) throws -> AssuanSession {
        let session = try AssuanSession(
            program: program, tty: target.tty, display: target.display,
            term: target.pid > 0 ? ProcessIdentity.environment(of: target.pid, "TERM") : nil, timeout: timeout)
        do { try session.command("SETTITLE keychainfs") } catch {
            session.finish()
            throw error
        }
        return session
    }

    /// Why no prompt can be shown to this caller (no pinentry program, or its process has no
    /// terminal or display), or nil when one can.
    public func whyNoPrompt(for caller: Caller) -> String? {
        guard program != nil else { return "no pinentry program is installed" }
        let (_, tty, display) = Self.promptTarget(caller)
        guard tty == nil && display == nil else { return nil }
        return "\(caller.processDescription) has no terminal or display to ask for its passphrase on"
    }

    /// Unlocks a locked vault with its passphrase asked through pinentry on the caller's
    /// terminal or display (the ssh agent, when a key is wanted and the vault is locked).
    /// Three tries, as gpg-agent gives. Requests that arrive meanwhile wait for this one prompt
    /// instead of opening their own. No way to ask: errSecInteractionNotAllowed at once.
    public func unlockVault(caller: Caller, purpose: String) throws {
        try unlocking.withLock { _ in
            if case .unlocked = keychain.lockState { return }
            guard let program else {
                throw KeychainError(
                    .interactionNotAllowed, "the vault is locked, and no pinentry program is installed to unlock it")
            }
            let target = try Self.askable(caller, "the vault is locked", "to ask for its passphrase on")
            let session = try Self.session(program, at: target, timeout: 3 * timeoutSeconds + 5)
            defer { session.finish() }
            try session.command(
                "SETDESC "
                    + AssuanSession.escape(
                        "The vault \(keychain.path) is locked. Enter its passphrase to let \(caller.processDescription) \(purpose)."
                    ))
            try session.command("SETPROMPT Passphrase:")
            try session.command("SETTIMEOUT \(timeoutSeconds)")
            for attempt in 1...3 {
                var pin = try session.getPin()
                defer { Sodium.wipe(&pin) }
                do {
                    try keychain.unlock(passphrase: try SecureBytes(copying: pin))
                    return
                } catch let error as KeychainError where error.status == .authFailed && attempt < 3 {
                    try session.command(
                        "SETERROR " + AssuanSession.escape("Wrong passphrase (try \(attempt + 1) of 3)"))
                }
            }
        }
    }

    public func verify(item: KeychainItem, flags: AccessControlFlags, caller: Caller) throws {
        let grantKey: String?
        switch caller.presenceReuse {
        case .process: grantKey = "process|\(caller.processKey)|\(item.id)"
        case .scope(let scope): grantKey = "scope|\(scope)|\(item.id)"
        case .never: grantKey = nil
        }
        if reuseSeconds > 0, let grantKey, let at = state.withLock({ $0.grants[grantKey] }),
            Date().timeIntervalSince(at) < reuseSeconds
        {
            return
        }
        guard let program else {
            throw KeychainError(
                .interactionNotAllowed, "\(item.summary) needs user presence, and no pinentry program is installed")
        }
        let target = try Self.askable(caller, "\(item.summary) needs user presence")
        guard
            state.withLock({ s -> Bool in
                guard s.activePrompts < Self.maxConcurrentPrompts else { return false }
                s.activePrompts += 1
                return true
            })
        else {
            throw KeychainError(
                .interactionNotAllowed,
                "\(item.summary) needs user presence, and \(Self.maxConcurrentPrompts) prompts are already waiting")
        }
        defer { state.withLock { $0.activePrompts -= 1 } }
        let passcode = flags.contains(.devicePasscode) && !flags.contains(.userPresence)
        let session = try Self.session(program, at: target, timeout: timeoutSeconds + 5)
        defer { session.finish() }
        let what = passcode ? "Enter the vault passphrase to let" : "Allow"
        try session.command(
            "SETDESC " + AssuanSession.escape("\(what) \(caller.processDescription) to use \(item.summary)?"))
        try session.command("SETTIMEOUT \(timeoutSeconds)")
        if passcode {
            try session.command("SETPROMPT Passphrase:")
            var pin = try session.getPin()
            defer { Sodium.wipe(&pin) }
            try keychain.verifyPassphrase(try SecureBytes(copying: pin))
        } else {
            try session.command("SETOK Allow")
            try session.command("SETNOTOK Deny")
            try session.command("CONFIRM")
        }
        if reuseSeconds > 0, let grantKey { state.withLock { $0.grants[grantKey] = Date() } }
    }
}

/// What the user answered a presence prompt that offers to remember the decision.
public enum PresenceAnswer: Sendable, Equatable {
    /// "Allow once".
    case allowedOnce
    /// "Always allow", and the decision is now in the signed policy.
    case remembered
    /// "Always allow", but the passphrase that signs the decision was not given (cancelled or
    /// wrong three times): allowed this once only, for the reason said.
    case allowedNotRemembered(String)
}

extension PinentryPresence {
    /// A presence prompt for `item` that can also remember the answer (the Secret Service's
    /// Prompt): Allow once, Always allow, or Deny. "Always allow" then asks for the vault
    /// passphrase in the same pinentry, because remembering changes the signed policy;
    /// `remember` gets it (and throws errSecAuthFailed for a wrong one: three tries). Deny,
    /// cancel and timeout throw. Items that need the passphrase itself (devicePasscode) ask
    /// for it as `verify` does and are never remembered.
    public func confirm(
        item: KeychainItem, caller: Caller, remember: ((SecureBytes) throws -> Void)?
    ) throws -> PresenceAnswer {
        let flags = item.accessControl?.flags ?? []
        guard let program, !flags.contains(.devicePasscode) || flags.contains(.userPresence) else {
            try verify(item: item, flags: flags, caller: caller)
            return .allowedOnce
        }
        let target = try Self.askable(caller, "\(item.summary) needs user presence")
        let remember = caller.executable == nil ? nil : remember
        let session = try Self.session(program, at: target, timeout: 4 * timeoutSeconds + 5)
        defer { session.finish() }
        var description = "Allow \(caller.processDescription) to use \(item.summary)?"
        if remember != nil, let executable = caller.executable {
            description += " \"Always allow\" lets \(executable) use it from now on without asking."
        }
        try session.command("SETDESC " + AssuanSession.escape(description))
        try session.command("SETTIMEOUT \(timeoutSeconds)")
        try session.command(remember == nil ? "SETOK Allow" : "SETOK Allow once")
        if remember != nil {
            try session.command("SETNOTOK Always allow")
            try session.command("SETCANCEL Deny")
        } else {
            try session.command("SETNOTOK Deny")
        }
        switch try session.confirm() {
        case AssuanSession.confirmed: return .allowedOnce
        case AssuanSession.notConfirmed where remember != nil: break  // the middle button
        case AssuanSession.cancelled where remember != nil: throw KeychainError(.authFailed, "the user denied access")
        case let code: throw AssuanSession.error(code: code)
        }
        guard let remember, let executable = caller.executable else { return .allowedOnce }
        try session.command(
            "SETDESC "
                + AssuanSession.escape(
                    "To always allow \(executable) to use \(item.summary), enter the passphrase of \(keychain.path): "
                        + "the decision is signed into the vault's access policy."))
        try session.command("SETPROMPT Passphrase:")
        for attempt in 1...3 {
            var pin: [UInt8]
            do { pin = try session.getPin() } catch let e as KeychainError {
                return .allowedNotRemembered("the passphrase prompt ended: \(e.message)")
            }
            defer { Sodium.wipe(&pin) }
            do {
                try remember(try SecureBytes(copying: pin))
                return .remembered
            } catch let e as KeychainError where e.status == .authFailed {
                if attempt == 3 { return .allowedNotRemembered("the passphrase was wrong three times") }
                try session.command("SETERROR " + AssuanSession.escape("Wrong passphrase (try \(attempt + 1) of 3)"))
            }
        }
        return .allowedOnce
    }
}
