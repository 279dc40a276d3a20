import CSystemd
import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import KeychainCrypto
import Synchronization

/// Why the provider could not start (no bus, the name taken): said on stderr, exit 1.
public struct ProviderStartError: Error, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}

/// The Secret Service provider (org.freedesktop.secrets): answers the spec's Service,
/// Collection, Item and Session interfaces, with Properties and Introspectable, from the vault.
/// Every call that reaches an item identifies its caller through the bus (the sender's pid →
/// executable, re-checked by start time) and acts with that executable's access groups, as the
/// mount does for a file operation; every item access is audited. The keychain rules (which
/// class and names an item gets, what is locked) are the core's (`SecretServiceMapping`).
///
/// One bus thread: `serve()` runs sd-bus's loop and answers each message before the next.
/// A prompt (pinentry, which may wait a minute for its user) runs on a thread of its own, and
/// its Completed signal goes back to the bus thread through `onBusThread`: sd-bus objects
/// belong to one thread, and no client waits for another's prompt.
public final class SecretServiceProvider: Sendable {
    public static let busName = "org.freedesktop.secrets"

    let access: AccessLayer
    /// Unlocks the keychain again (Service.Unlock) without a prompt: the face that started the
    /// provider knows whether it can (a passphrase file) and says why not.
    let unlock: @Sendable () throws -> Void
    /// Asks a caller for the vault's passphrase through pinentry (a Prompt object's work); nil:
    /// no prompts, Unlock answers IsLocked.
    let prompter: PinentryPresence?

    /// A prompt handed out by Unlock and not yet run: whose (the unique bus name that asked, the
    /// only one that may run or dismiss it), the caller it asks for, the objects it unlocks,
    /// and whether it first asks for the vault's passphrase (the keychain was locked).
    struct PendingPrompt: Sendable {
        let owner: String
        let caller: Caller
        let paths: [String]
        let unlocksVault: Bool
        /// The caller's identity rests on a pid alone and it asked for items that need it
        /// confirmed: the prompt first asks the user to confirm the pid and executable.
        var confirmsIdentity = false
        /// The pid the caller was identified by (what a confirmation is for).
        var pid: pid_t = 0
    }
    struct Prompts {
        var next = 1
        var open: [Int: PendingPrompt] = [:]
        /// Prompts running now (each a thread and a pinentry): past the cap a prompt completes
        /// dismissed at once, so no client can pile up pinentries.
        var running = 0
    }
    let prompts = Mutex(Prompts())
    static let maxRunningPrompts = 4

    /// User presence given through this provider's prompts and identities they confirmed, per
    /// client (unique bus name) and for the unlock they were given in, kept by the door's owner
    /// (a lock, then an unlock, asks again).
    let ledger: ScopeLedger

    /// Work other threads hand to the bus thread (a prompt's Completed signal), and the pipe
    /// that wakes the bus thread's poll for it.
    private let busWork = Mutex<[@Sendable (SecretServiceProvider) -> Void]>([])
    private let wake: (read: Int32, write: Int32)
    /// Changes other faces and processes committed, waiting for the bus thread to signal them
    /// (`ChangeSignals.swift`): the committing thread only appends here and wakes the bus thread;
    /// once the bus loop has ended nothing is kept (the mount goes on without the bus).
    let pendingChanges = Mutex(PendingChanges())
    struct PendingChanges {
        var changes: [ItemChange] = []
        var busEnded = false
    }

    /// Open sessions, by number, with the unique bus name of the client that opened each (a
    /// session serves only its own client) and how it carries secrets.
    struct Sessions {
        var next = 1
        var open: [Int: (owner: String, algorithm: SessionAlgorithm)] = [:]
    }
    let sessions = Mutex(Sessions())
    /// The session collection: in this process's memory only, never written to the vault, gone
    /// when the provider stops (a deleted item's secret is wiped at once).
    let sessionCollection = Mutex(SessionCollection())
    /// The login collection's label (Collection.Label is read-write): kept in memory, "Login"
    /// again when the provider starts (docs/secret-service.md).
    let loginLabel = Mutex("Login")
    /// Per client: whether the bus gives its process handle, and the identity a prompt confirmed.
    let busIdentities = Mutex(BusIdentities())

    /// The bus connection; set once by `connect` before `serve`.
    let bus = Mutex<BusHandle?>(nil)

    /// sd_bus pointer: used only from the provider's one thread, which is why it may cross the
    /// Sendable boundary here.
    struct BusHandle: @unchecked Sendable {
        let pointer: OpaquePointer
    }

    /// Whether a sender's pid from the bus is trusted as its identity where the bus gives no
    /// process handle (`BusIdentity.swift`): false (the default) serves group-restricted items
    /// and remembered "Always allow" decisions only after a prompt naming the pid and
    /// executable.
    let trustBusPid: Bool

    public init(
        access: AccessLayer, prompter: PinentryPresence? = nil, trustBusPid: Bool = false,
        unlock: @escaping @Sendable () throws -> Void
    ) {
        self.access = access
        self.ledger = access.makeScopeLedger()
        self.prompter = prompter
        self.trustBusPid = trustBusPid
        self.unlock = unlock
        var fds: [Int32] = [-1, -1]
        if pipe(&fds) == 0 {
            for fd in fds {
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                _ = fcntl(fd, F_SETFL, O_NONBLOCK)
            }
        }
        wake = (fds[0], fds[1])
        // Every commit of this process, whichever face made it: signalled on the bus thread.
        access.onCommit { [weak self] in self?.committed($0) }
    }

    deinit {
        sessionCollection.withLock { $0.wipe() }
        close(wake.read)
        close(wake.write)
    }

    /// Connects to the session bus (`DBUS_SESSION_BUS_ADDRESS`, else `$XDG_RUNTIME_DIR/bus`) or
    /// to `address`, and takes the name. Another owner of the name is named in the error, with
    /// how to stop it.
    public func connect(address: String?) throws(ProviderStartError) -> String {
        var pointer: OpaquePointer?
        var r: Int32
        if let address {
            r = sd_bus_new(&pointer)
            if r >= 0 { r = sd_bus_set_address(pointer, address) }
            if r >= 0 { r = sd_bus_set_bus_client(pointer, 1) }
            if r >= 0 { r = sd_bus_start(pointer) }
        } else {
            r = sd_bus_open_user(&pointer)
        }
        let described = address ?? ProcessInfo.processInfo.environment["DBUS_SESSION_BUS_ADDRESS"] ?? "the session bus"
        guard r >= 0, let pointer else {
            if let pointer { sd_bus_unref(pointer) }
            throw ProviderStartError(
                message: "cannot connect to \(described): \(String(cString: strerror(-r))) "
                    + "(headless: run under `dbus-run-session`, or give --address)")
        }
        r = sd_bus_request_name(pointer, Self.busName, 0)
        if r == -EEXIST {
            let owner = Self.describeOwner(pointer)
            sd_bus_unref(pointer)
            throw ProviderStartError(
                message: "\(Self.busName) is already owned on \(described) by \(owner): another Secret Service "
                    + "provider (gnome-keyring-daemon, kwalletd, keepassxc, oo7-daemon) is running; stop it first "
                    + "(`kill PID`, or `systemctl --user stop gnome-keyring-daemon.service gnome-keyring-daemon.socket`)"
            )
        }
        guard r >= 0 else {
            sd_bus_unref(pointer)
            throw ProviderStartError(message: "cannot own \(Self.busName): \(String(cString: strerror(-r)))")
        }
        let me = Unmanaged.passUnretained(self).toOpaque()
        // Every path: one outside the service's tree is NoSuchObject, as clients expect of a
        // Secret Service (secretstorage's ItemNotFoundException), not sd-bus's UnknownObject.
        r = sd_bus_add_fallback(pointer, nil, "/", providerHandler, me)
        guard r >= 0 else {
            sd_bus_unref(pointer)
            throw ProviderStartError(message: "cannot serve \(ObjectPath.root): \(String(cString: strerror(-r)))")
        }
        // A client that leaves the bus leaves nothing behind: its sessions, prompts and presence.
        r = sd_bus_match_signal(
            pointer, nil, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "NameOwnerChanged",
            nameOwnerChangedHandler, me)
        guard r >= 0 else {
            sd_bus_unref(pointer)
            throw ProviderStartError(message: "cannot watch clients leave: \(String(cString: strerror(-r)))")
        }
        bus.withLock { $0 = BusHandle(pointer: pointer) }
        return described
    }

    /// "pid 42 (gnome-keyring-d, /usr/bin/gnome-keyring-daemon)", or what is known.
    static func describeOwner(_ bus: OpaquePointer) -> String {
        var creds: OpaquePointer?
        guard sd_bus_get_name_creds(bus, busName, keychainfs_creds_pid_comm_exe, &creds) >= 0, let creds else {
            return "another process"
        }
        defer { sd_bus_creds_unref(creds) }
        var pid: pid_t = 0
        var comm: UnsafePointer<CChar>?
        var exe: UnsafePointer<CChar>?
        _ = sd_bus_creds_get_pid(creds, &pid)
        _ = sd_bus_creds_get_comm(creds, &comm)
        _ = sd_bus_creds_get_exe(creds, &exe)
        let names = [comm, exe].compactMap { $0.map { String(cString: $0) } }
        return "pid \(pid)" + (names.isEmpty ? "" : " (\(names.joined(separator: ", ")))")
    }

    /// Answers messages until the connection ends (the bus went away): the provider's loop.
    public func serve() throws(ProviderStartError) {
        guard let pointer = bus.withLock({ $0?.pointer }) else {
            throw ProviderStartError(message: "not connected")
        }
        defer {
            pendingChanges.withLock {
                $0.busEnded = true
                $0.changes.removeAll()
            }
        }
        while true {
            let r = sd_bus_process(pointer, nil)
            if r < 0 {
                throw ProviderStartError(message: "the bus connection ended: \(String(cString: strerror(-r)))")
            }
            if r > 0 { continue }
            if runBusWork() { continue }
            // sd_bus_wait, plus the wake pipe: the bus's fd and events, and its timeout (an
            // absolute CLOCK_MONOTONIC time in µs, UINT64_MAX for none).
            var fds = [
                pollfd(
                    fd: sd_bus_get_fd(pointer), events: Int16(truncatingIfNeeded: sd_bus_get_events(pointer)),
                    revents: 0),
                pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0),
            ]
            var until: UInt64 = 0
            var timeout: Int32 = -1
            if sd_bus_get_timeout(pointer, &until) >= 0 && until != UInt64.max {
                var now = timespec()
                clock_gettime(CLOCK_MONOTONIC, &now)
                let nowMicros = UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000
                timeout = until > nowMicros ? Int32(min((until - nowMicros + 999) / 1000, 60_000)) : 0
            }
            if poll(&fds, 2, timeout) < 0 && errno != EINTR {
                throw ProviderStartError(message: "the bus connection ended: \(String(cString: strerror(errno)))")
            }
        }
    }

    /// Hands `work` to the bus thread and wakes it.
    func onBusThread(_ work: @escaping @Sendable (SecretServiceProvider) -> Void) {
        busWork.withLock { $0.append(work) }
        wakeBusThread()
    }

    /// Wakes the bus thread's poll (the pipe is non-blocking: a full pipe is awake already).
    func wakeBusThread() {
        var one: UInt8 = 1
        _ = write(wake.write, &one, 1)
    }

    /// Runs what other threads handed over; whether there was any.
    private func runBusWork() -> Bool {
        var drained = [UInt8](repeating: 0, count: 64)
        while read(wake.read, &drained, drained.count) > 0 {}
        let work = busWork.withLock { w -> [@Sendable (SecretServiceProvider) -> Void] in
            defer { w.removeAll() }
            return w
        }
        for item in work { item(self) }
        let changes = pendingChanges.withLock { p -> [ItemChange] in
            defer { p.changes.removeAll() }
            return p.changes
        }
        signalChanges(changes)
        return !work.isEmpty || !changes.isEmpty
    }

    /// A client left the bus (NameOwnerChanged with no new owner): its sessions, prompts and
    /// presence grants go with it.
    func clientLeft(_ message: OpaquePointer) -> Int32 {
        let reader = MessageReader(message: message)
        guard let name = try? reader.string(), name.hasPrefix(":"), (try? reader.string()) != nil,
            let newOwner = try? reader.string(), newOwner.isEmpty
        else { return 0 }
        let closedSessions = sessions.withLock { s -> Int in
            let before = s.open.count
            s.open = s.open.filter { $0.value.owner != name }
            return before - s.open.count
        }
        let closedPrompts = prompts.withLock { p -> Int in
            let before = p.open.count
            p.open = p.open.filter { $0.value.owner != name }
            return before - p.open.count
        }
        let hadPresence = ledger.forget(scope: name)
        busIdentities.withLock { $0.handles[name] = nil }
        if closedSessions + closedPrompts > 0 || hadPresence {
            Log.info(
                "secret service: client \(name) left: closed \(closedSessions) session(s) and \(closedPrompts) prompt(s)"
                    + (hadPresence ? ", forgot the presence it gave" : ""))
        }
        return 0
    }

}

/// sd-bus's callback for every message under /org/freedesktop/secrets: back into the provider.
private func providerHandler(
    _ message: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?, _ error: UnsafeMutablePointer<sd_bus_error>?
) -> Int32 {
    guard let message, let userdata else { return 0 }
    return Unmanaged<SecretServiceProvider>.fromOpaque(userdata).takeUnretainedValue().handle(message)
}

/// sd-bus's callback for NameOwnerChanged: a client may have left.
private func nameOwnerChangedHandler(
    _ message: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?, _ error: UnsafeMutablePointer<sd_bus_error>?
) -> Int32 {
    guard let message, let userdata else { return 0 }
    return Unmanaged<SecretServiceProvider>.fromOpaque(userdata).takeUnretainedValue().clientLeft(message)
}
