import CSystemd
import Foundation
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

    let keychain: Keychain
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
    }
    private struct Prompts {
        var next = 1
        var open: [Int: PendingPrompt] = [:]
        /// Prompts running now (each a thread and a pinentry): past the cap a prompt completes
        /// dismissed at once, so no client can pile up pinentries.
        var running = 0
    }
    private let prompts = Mutex(Prompts())
    static let maxRunningPrompts = 4

    /// User presence given through this provider's prompts, per client (unique bus name) and
    /// for the unlock it was given in: a lock, then an unlock, asks again.
    private struct PresenceGrants {
        var byClient: [String: (unlockedSince: Date, items: Set<Int64>)] = [:]
    }
    private let presenceGrants = Mutex(PresenceGrants())

    /// Work other threads hand to the bus thread (a prompt's Completed signal), and the pipe
    /// that wakes the bus thread's poll for it.
    private let busWork = Mutex<[@Sendable (SecretServiceProvider) -> Void]>([])
    private let wake: (read: Int32, write: Int32)

    /// Open sessions, by number, with the unique bus name of the client that opened each (a
    /// session serves only its own client) and how it carries secrets.
    private struct Sessions {
        var next = 1
        var open: [Int: (owner: String, algorithm: SessionAlgorithm)] = [:]
    }
    private let sessions = Mutex(Sessions())
    /// The bus connection; set once by `connect` before `serve`.
    private let bus = Mutex<BusHandle?>(nil)

    /// sd_bus pointer: used only from the provider's one thread, which is why it may cross the
    /// Sendable boundary here.
    struct BusHandle: @unchecked Sendable {
        let pointer: OpaquePointer
    }

    public init(
        keychain: Keychain, access: AccessLayer, prompter: PinentryPresence? = nil,
        unlock: @escaping @Sendable () throws -> Void
    ) {
        self.keychain = keychain
        self.access = access
        self.prompter = prompter
        self.unlock = unlock
        var fds: [Int32] = [-1, -1]
        if pipe(&fds) == 0 {
            for fd in fds {
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                _ = fcntl(fd, F_SETFL, O_NONBLOCK)
            }
        }
        wake = (fds[0], fds[1])
    }

    deinit {
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
        r = sd_bus_add_fallback(pointer, nil, ObjectPath.root, providerHandler, me)
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
        return !work.isEmpty
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
        let hadPresence = presenceGrants.withLock { $0.byClient.removeValue(forKey: name) != nil }
        if closedSessions + closedPrompts > 0 || hadPresence {
            Log.info(
                "secret service: client \(name) left: closed \(closedSessions) session(s) and \(closedPrompts) prompt(s)"
                    + (hadPresence ? ", forgot the presence it gave" : ""))
        }
        return 0
    }

    // MARK: Dispatch

    /// One method call to an object under /org/freedesktop/secrets: its reply, or an error reply.
    func handle(_ message: OpaquePointer) -> Int32 {
        guard isMethodCall(message) else { return 0 }
        let path = sd_bus_message_get_path(message).map { String(cString: $0) } ?? ""
        let interface = sd_bus_message_get_interface(message).map { String(cString: $0) } ?? ""
        let member = sd_bus_message_get_member(message).map { String(cString: $0) } ?? ""
        guard let object = ObjectPath(path) else {
            return replyError(
                message, BusError("org.freedesktop.DBus.Error.UnknownObject", "no object \(path)"))
        }
        let call = Call(message: message, reader: MessageReader(message: message), object: object)
        do {
            try dispatch(call, interface: interface, member: member)
            return 1
        } catch let e as BusError {
            return replyError(message, e)
        } catch let e as KeychainError {
            return replyError(message, BusError(e.status.secretServiceErrorName, e.message))
        } catch {
            return replyError(message, BusError.failed("\(error)"))
        }
    }

    private func isMethodCall(_ message: OpaquePointer) -> Bool {
        var type: UInt8 = 0
        return sd_bus_message_get_type(message, &type) >= 0 && type == 1  // SD_BUS_MESSAGE_METHOD_CALL
    }

    struct Call {
        let message: OpaquePointer
        let reader: MessageReader
        let object: ObjectPath
        var sender: String {
            sd_bus_message_get_sender(message).map { String(cString: $0) } ?? ""
        }
    }

    private func dispatch(_ call: Call, interface: String, member: String) throws {
        switch (interface, member) {
        case (Introspection.introspectable, "Introspect"):
            let xml = Introspection.xml(for: call.object, children: try children(of: call))
            try reply(call) { w throws(BusError) in try w.string(xml) }
        case (Introspection.properties, "Get"):
            let iface = try call.reader.string()
            let name = try call.reader.string()
            guard let value = try properties(of: call, interface: iface)[name] else {
                throw BusError.invalidArgs("no property \(iface).\(name)")
            }
            try reply(call) { w throws(BusError) in try value.write(w) }
        case (Introspection.properties, "GetAll"):
            let iface = try call.reader.string()
            let all = try properties(of: call, interface: iface)
            try reply(call) { w throws(BusError) in
                try w.open("a", "{sv}")
                for (name, value) in all.sorted(by: { $0.key < $1.key }) {
                    try w.open("e", "sv")
                    try w.string(name)
                    try value.write(w)
                    try w.close()
                }
                try w.close()
            }
        case (Introspection.properties, "Set"):
            try setProperty(call)
        default:
            switch call.object {
            case .service: try service(call, interface: interface, member: member)
            case .collection: try collection(call, interface: interface, member: member)
            case .item(let itemClass, let id): try item(call, itemClass, id, interface: interface, member: member)
            case .session(let n): try session(call, n, interface: interface, member: member)
            case .prompt(let n): try prompt(call, n, interface: interface, member: member)
            case .directory: throw BusError.unknownMethod("\(path(of: call)) has no methods")
            }
        }
    }

    private func path(of call: Call) -> String {
        sd_bus_message_get_path(call.message).map { String(cString: $0) } ?? ""
    }

    private func accepts(_ interface: String, _ expected: String) -> Bool { interface.isEmpty || interface == expected }

    // MARK: Replies

    func reply(_ call: Call, _ body: (MessageWriter) throws(BusError) -> Void) throws(BusError) {
        var reply: OpaquePointer?
        _ = try check(sd_bus_message_new_method_return(call.message, &reply), "reply")
        guard let reply else { throw BusError.failed("no reply message") }
        defer { sd_bus_message_unref(reply) }
        try body(MessageWriter(message: reply))
        _ = try check(sd_bus_send(nil, reply, nil), "send reply")
    }

    private func replyError(_ message: OpaquePointer, _ error: BusError) -> Int32 {
        var e = sd_bus_error()
        _ = sd_bus_error_set(&e, error.name, error.message)
        defer { sd_bus_error_free(&e) }
        _ = sd_bus_reply_method_error(message, &e)
        return 1
    }

    /// org.freedesktop.DBus.Properties.PropertiesChanged naming the properties that changed,
    /// with no values: what a property says depends on who asks (the access groups, the
    /// presence a client gave), and a signal goes to every client.
    func propertiesChanged(_ path: String, _ interface: String, _ names: [String]) {
        emit(path, Introspection.properties, "PropertiesChanged") { w throws(BusError) in
            try w.string(interface)
            try w.open("a", "{sv}")
            try w.close()
            try w.open("a", "s")
            for name in names { try w.string(name) }
            try w.close()
        }
    }

    func emit(_ path: String, _ interface: String, _ member: String, _ body: (MessageWriter) throws(BusError) -> Void) {
        guard let pointer = bus.withLock({ $0?.pointer }) else { return }
        var signal: OpaquePointer?
        guard sd_bus_message_new_signal(pointer, &signal, path, interface, member) >= 0, let signal else { return }
        defer { sd_bus_message_unref(signal) }
        guard (try? body(MessageWriter(message: signal))) != nil else { return }
        _ = sd_bus_send(pointer, signal, nil)
    }

    // MARK: Callers

    /// The caller of a bus message: the sender's pid from the bus (GetConnectionUnixProcessID),
    /// its executable and groups through the access layer, as the mount identifies a FUSE
    /// request's process. A call never prompts: an item that needs user presence is Locked to
    /// a caller until its Unlock prompt (a Prompt object) was answered, or its executable was
    /// told "Always allow".
    func caller(of call: Call) throws -> Caller {
        var creds: OpaquePointer?
        var pid: pid_t = 0
        if sd_bus_query_sender_creds(call.message, keychainfs_creds_pid, &creds) >= 0, let creds {
            _ = sd_bus_creds_get_pid(creds, &pid)
            sd_bus_creds_unref(creds)
        }
        guard pid > 0 else {
            throw BusError("org.freedesktop.DBus.Error.AccessDenied", "the caller's process cannot be identified")
        }
        var caller: Caller
        do { caller = try access.caller(tid: pid, identify: true) } catch {
            throw BusError("org.freedesktop.DBus.Error.AccessDenied", "the caller's process cannot be identified")
        }
        caller.authenticationUI = .fail
        caller.presence = nil
        caller.presenceGrants.formUnion(grants(for: call.sender))
        if caller.processDescription.isEmpty { caller.processDescription = "pid \(pid)" }
        return caller
    }

    /// The items a client gave presence for in this unlock of the keychain.
    func grants(for client: String) -> Set<Int64> {
        guard case .unlocked(let since) = keychain.lockState else { return [] }
        return presenceGrants.withLock { g in
            guard let given = g.byClient[client], given.unlockedSince == since else { return [] }
            return given.items
        }
    }

    func grant(_ items: Set<Int64>, to client: String) {
        guard case .unlocked(let since) = keychain.lockState, !items.isEmpty else { return }
        presenceGrants.withLock { g in
            var given = g.byClient[client] ?? (since, [])
            if given.unlockedSince != since { given = (since, []) }
            given.items.formUnion(items)
            g.byClient[client] = given
        }
    }

    func audit(_ caller: Caller, _ item: Int64?, _ op: AuditOperation, _ allowed: Bool, _ why: String? = nil) {
        access.audit?.record(caller, item: item, op, allowed: allowed, why: why)
    }

    /// Runs a core call, auditing it; a core failure is audited with its status and rethrown.
    func audited<T>(_ caller: Caller, _ item: Int64?, _ op: AuditOperation, _ body: () throws -> T) throws -> T {
        do {
            let result = try body()
            audit(caller, item, op, true)
            return result
        } catch let e as KeychainError {
            audit(caller, item, op, false, e.status.name)
            throw e
        }
    }

    // MARK: Items

    /// Every password item the caller may see (attributes only) whose Secret Service attributes
    /// include every pair of `query` (the core narrows through its attribute index), or IsLocked
    /// when the keychain cannot read attributes at all.
    ///
    /// An item whose label or attributes hold NUL is left out (with a line in the log): a
    /// D-Bus string cannot carry it, and one such item must not fail a client's whole search.
    /// Asked for by its object path, it answers an error (`MessageWriter.string`).
    func visibleItems(_ caller: Caller, narrowedBy query: [String: String] = [:]) throws -> [KeychainItem] {
        try keychain.secretServiceItems(matching: query, caller: caller).filter { item in
            let strings =
                [SecretServiceMapping.label(of: item)] + SecretServiceMapping.attributes(of: item).flatMap { [$0, $1] }
            guard !strings.allSatisfy(MessageWriter.canCarry) else { return true }
            Log.warning(
                "secret service leaves out \(item.summary): a value holds NUL, which a D-Bus string cannot carry")
            return false
        }
    }

    /// The item an object path names, if the caller may see it; else NoSuchObject (audited:
    /// an item of another access group is never told apart from a missing one).
    func visibleItem(_ caller: Caller, _ itemClass: ItemClass, _ id: Int64) throws -> KeychainItem {
        do {
            return try keychain.item(id: id, itemClass: itemClass, withData: false, caller: caller)
        } catch let e as KeychainError where e.status == .itemNotFound {
            audit(caller, id, .dbusLookup, false, e.status.name)
            throw BusError("org.freedesktop.Secret.Error.NoSuchObject", "no such item")
        }
    }

    func search(_ call: Call) throws -> (unlocked: [String], locked: [String]) {
        let query = try call.reader.stringMap()
        let caller = try self.caller(of: call)
        let found = try audited(caller, nil, .dbusSearch) { try visibleItems(caller, narrowedBy: query) }
        var unlocked: [String] = []
        var locked: [String] = []
        for item in found {
            if SecretServiceMapping.isLocked(item, in: keychain, for: caller) {
                locked.append(ObjectPath.item(item))
            } else {
                unlocked.append(ObjectPath.item(item))
            }
        }
        return (unlocked, locked)
    }

    /// A session the caller opened, and how it carries secrets; NoSession for any other.
    func checkSession(_ path: String, for call: Call) throws(BusError) -> SessionAlgorithm {
        guard case .session(let n)? = ObjectPath(path), let session = sessions.withLock({ $0.open[n] }),
            session.owner == call.sender
        else {
            throw BusError("org.freedesktop.Secret.Error.NoSession", "no session \(path) of this client")
        }
        return session.algorithm
    }

    /// A secret as the spec's struct (oayays), sealed for its session.
    func writeSecret(
        _ w: MessageWriter, session: String, algorithm: SessionAlgorithm, value: [UInt8], contentType: String
    ) throws(BusError) {
        var (parameters, sealed) = try algorithm.seal(value)
        defer { Sodium.wipe(&sealed) }
        try w.open("r", "oayays")
        try w.objectPath(session)
        try w.bytes(parameters)
        try w.bytes(sealed)
        try w.string(contentType)
        try w.close()
    }

    /// Reads a secret struct (oayays): the session it names must be the caller's.
    func readSecret(_ call: Call) throws -> (value: [UInt8], contentType: String) {
        guard try call.reader.enter("r", "oayays") else { throw BusError.invalidArgs("expected a secret (oayays)") }
        let session = try call.reader.objectPath()
        let parameters = try call.reader.bytes()
        var sent = try call.reader.bytes()
        defer { Sodium.wipe(&sent) }
        let contentType = try call.reader.string()
        try call.reader.exit()
        let algorithm = try checkSession(session, for: call)
        return (try algorithm.open(parameters: parameters, value: sent), contentType)
    }

    func readSecretOf(_ caller: Caller, _ itemClass: ItemClass, _ id: Int64) throws -> KeychainItem {
        _ = try visibleItem(caller, itemClass, id)
        return try audited(caller, id, .dbusGetSecret) {
            try keychain.item(id: id, itemClass: itemClass, withData: true, caller: caller, ui: .fail)
        }
    }

    func children(of call: Call) throws -> [String] {
        switch call.object {
        case .service: return ["collection", "aliases"]
        case .directory:
            return path(of: call).hasSuffix("/aliases") ? ObjectPath.aliases : ["login"]
        case .collection:
            let caller = try self.caller(of: call)
            return try visibleItems(caller).map { "\($0.itemClass.rawValue)\($0.id)" }
        default: return []
        }
    }

    // MARK: Properties

    func properties(of call: Call, interface: String) throws -> [String: PropertyValue] {
        switch call.object {
        case .service where accepts(interface, Introspection.service):
            return ["Collections": .paths([ObjectPath.collectionPath])]
        case .collection where accepts(interface, Introspection.collection):
            let caller = try self.caller(of: call)
            let items: [String]
            do { items = try visibleItems(caller).map(ObjectPath.item) } catch KeychainStatus.interactionNotAllowed {
                items = []
            }
            return [
                "Items": .paths(items), "Label": .string("Login"), "Locked": .bool(collectionLocked),
                "Created": .uint64(0), "Modified": .uint64(0),
            ]
        case .item(let itemClass, let id) where accepts(interface, Introspection.item):
            let caller = try self.caller(of: call)
            let item = try visibleItem(caller, itemClass, id)
            return [
                "Locked": .bool(SecretServiceMapping.isLocked(item, in: keychain, for: caller)),
                "Attributes": .map(SecretServiceMapping.attributes(of: item)),
                "Label": .string(SecretServiceMapping.label(of: item)),
                "Created": .uint64(UInt64(max(0, item.creationDate?.timeIntervalSince1970 ?? 0))),
                "Modified": .uint64(UInt64(max(0, item.modificationDate?.timeIntervalSince1970 ?? 0))),
            ]
        default:
            return [:]
        }
    }

    var collectionLocked: Bool {
        if case .unlocked = keychain.lockState { return false }
        return true
    }

    func setProperty(_ call: Call) throws {
        let iface = try call.reader.string()
        let name = try call.reader.string()
        guard case .item(let itemClass, let id) = call.object, accepts(iface, Introspection.item) else {
            throw BusError("org.freedesktop.DBus.Error.PropertyReadOnly", "\(iface).\(name) cannot be set")
        }
        let caller = try self.caller(of: call)
        let item = try visibleItem(caller, itemClass, id)
        let changes: Attributes
        switch name {
        case "Label":
            changes = [
                Schema.label: .string(try call.reader.variant("s") { () throws(BusError) in try call.reader.string() })
            ]
        case "Attributes":
            let map = try call.reader.variant("a{ss}") { () throws(BusError) in try call.reader.stringMap() }
            changes = try SecretServiceMapping.changes(settingAttributes: map, of: item)
        default:
            throw BusError("org.freedesktop.DBus.Error.PropertyReadOnly", "\(iface).\(name) cannot be set")
        }
        _ = try audited(caller, id, .dbusSetProperty) {
            try keychain.update(
                Query(itemClass, synchronizableAny: true, persistentReference: id), attributes: changes, caller: caller)
        }
        try reply(call) { _ throws(BusError) in }
        emit(ObjectPath.collectionPath, Introspection.collection, "ItemChanged") { w throws(BusError) in
            try w.objectPath(ObjectPath.item(item))
        }
        propertiesChanged(ObjectPath.item(item), Introspection.item, [name, "Modified"])
    }

    // MARK: Interfaces

    private func service(_ call: Call, interface: String, member: String) throws {
        guard accepts(interface, Introspection.service) else {
            throw BusError.unknownMethod("no method \(interface).\(member)")
        }
        switch member {
        case "OpenSession":
            let name = try call.reader.string()
            let algorithm: SessionAlgorithm
            var output: [UInt8]?
            switch name {
            case SessionAlgorithm.plainName:
                try call.reader.skip("v")
                algorithm = .plain
            case SessionAlgorithm.dhName:
                let peer = try call.reader.variant("ay") { () throws(BusError) in try call.reader.bytes() }
                (output, algorithm) = try SessionAlgorithm.negotiate(peer: peer)
            default:
                throw BusError.notSupported(
                    "session algorithm \(name) is not supported; use \(SessionAlgorithm.dhName) or plain")
            }
            let n = sessions.withLock {
                let n = $0.next
                $0.next += 1
                $0.open[n] = (call.sender, algorithm)
                return n
            }
            try reply(call) { w throws(BusError) in
                if let output {
                    try w.variant("ay") { () throws(BusError) in try w.bytes(output) }
                } else {
                    try w.variant("s") { () throws(BusError) in try w.string("") }
                }
                try w.objectPath(ObjectPath.session(n))
            }
        case "SearchItems":
            let (unlocked, locked) = try search(call)
            try reply(call) { w throws(BusError) in
                try w.objectPaths(unlocked)
                try w.objectPaths(locked)
            }
        case "GetSecrets":
            let paths = try call.reader.objectPaths()
            let session = try call.reader.objectPath()
            let algorithm = try checkSession(session, for: call)
            let caller = try self.caller(of: call)
            var secrets: [(String, KeychainItem)] = []
            for path in paths {
                guard case .item(let itemClass, let id)? = ObjectPath(path) else { continue }
                do { secrets.append((path, try readSecretOf(caller, itemClass, id))) } catch let e as BusError
                    where e.name == "org.freedesktop.Secret.Error.NoSuchObject"
                {
                    continue
                }
            }
            try reply(call) { w throws(BusError) in
                try w.open("a", "{o(oayays)}")
                for (path, item) in secrets {
                    try w.open("e", "o(oayays)")
                    try w.objectPath(path)
                    try writeSecret(
                        w, session: session, algorithm: algorithm, value: item.data ?? [],
                        contentType: SecretServiceMapping.contentType(of: item))
                    try w.close()
                }
                try w.close()
            }
        case "Unlock":
            let paths = try call.reader.objectPaths()
            let caller = try caller(of: call)
            var unlocksVault = false
            if collectionLocked {
                do { try unlock() } catch let refusal as BusError {
                    // No passphrase to read again: the Prompt object asks the caller's user.
                    guard prompter != nil else { throw refusal }
                    unlocksVault = true
                }
                access.invalidatePolicy()
            }
            // Unlocked now (the keychain, and items that need no presence or had it given), and
            // the items whose presence the prompt is to ask for.
            var unlocked: [String] = []
            var needPresence = false
            for path in paths where !unlocksVault {
                if try isUnlocked(path, for: caller) {
                    unlocked.append(path)
                } else if case .item(let itemClass, let id)? = ObjectPath(path),
                    caller.needsPresence(for: try visibleItem(caller, itemClass, id))
                {
                    needPresence = true
                }
            }
            guard unlocksVault || needPresence else {
                try reply(call) { w throws(BusError) in
                    try w.objectPaths(unlocked)
                    try w.objectPath("/")
                }
                return
            }
            if let why = prompter?.whyNoPrompt(for: caller) {
                let what = unlocksVault ? "the keychain is locked" : "the item needs user presence"
                let remedy = unlocksVault ? " (or start the provider with --passphrase-file)" : ""
                throw BusError("org.freedesktop.Secret.Error.IsLocked", "\(what) and \(why)\(remedy)")
            }
            let pending = PendingPrompt(owner: call.sender, caller: caller, paths: paths, unlocksVault: unlocksVault)
            let n = prompts.withLock { p -> Int in
                defer { p.next += 1 }
                p.open[p.next] = pending
                return p.next
            }
            try reply(call) { w throws(BusError) in
                try w.objectPaths(unlocked)
                try w.objectPath(ObjectPath.prompt(n))
            }
        case "Lock":
            let paths = try call.reader.objectPaths()
            keychain.lock()
            try reply(call) { w throws(BusError) in
                try w.objectPaths(paths.filter { ObjectPath($0) != nil })
                try w.objectPath("/")
            }
            propertiesChanged(ObjectPath.collectionPath, Introspection.collection, ["Locked"])
        case "ReadAlias":
            let alias = try call.reader.string()
            try reply(call) { w throws(BusError) in
                try w.objectPath(ObjectPath.aliases.contains(alias) ? ObjectPath.collectionPath : "/")
            }
        case "CreateCollection":
            try call.reader.skip("a{sv}")
            let alias = try call.reader.string()
            guard ObjectPath.aliases.contains(alias) else {
                throw BusError.notSupported(
                    "keychainfs serves one collection (login, aliases default and login); new collections are not supported"
                )
            }
            try reply(call) { w throws(BusError) in
                try w.objectPath(ObjectPath.collectionPath)
                try w.objectPath("/")
            }
        case "SetAlias", "ChangeLock", "LockService", "CreateWithMasterPassword", "UnlockWithMasterPassword":
            throw BusError.notSupported("\(member) is not supported by keychainfs")
        default:
            throw BusError.unknownMethod("no method \(Introspection.service).\(member)")
        }
    }

    private func collection(_ call: Call, interface: String, member: String) throws {
        guard accepts(interface, Introspection.collection) else {
            throw BusError.unknownMethod("no method \(interface).\(member)")
        }
        switch member {
        case "SearchItems":
            let (unlocked, locked) = try search(call)
            try reply(call) { w throws(BusError) in try w.objectPaths(unlocked + locked) }
        case "CreateItem":
            var label = ""
            var attributes: [String: String] = [:]
            let r = call.reader
            guard try r.enter("a", "{sv}") else { throw BusError.invalidArgs("expected properties a{sv}") }
            while try r.enter("e", "sv") {
                switch try r.string() {
                case "org.freedesktop.Secret.Item.Label":
                    label = try r.variant("s") { () throws(BusError) in try r.string() }
                case "org.freedesktop.Secret.Item.Attributes":
                    attributes = try r.variant("a{ss}") { () throws(BusError) in try r.stringMap() }
                default: try r.skip("v")
                }
                try r.exit()
            }
            try r.exit()
            let (value, contentType) = try readSecret(call)
            let replace = try r.bool()
            let caller = try self.caller(of: call)
            let (itemClass, mapped) = try SecretServiceMapping.newItem(
                attributes: attributes, label: label, contentType: contentType)
            let created = try audited(caller, nil, .dbusCreate) {
                replace
                    ? try keychain.addOrUpdate(itemClass, mapped, data: value, caller: caller).item
                    : try keychain.add(itemClass, mapped, data: value, caller: caller)
            }
            let path = ObjectPath.item(created)
            try reply(call) { w throws(BusError) in
                try w.objectPath(path)
                try w.objectPath("/")
            }
            emit(ObjectPath.collectionPath, Introspection.collection, "ItemCreated") { w throws(BusError) in
                try w.objectPath(path)
            }
            propertiesChanged(ObjectPath.collectionPath, Introspection.collection, ["Items"])
        case "Delete":
            throw BusError(
                "org.freedesktop.DBus.Error.AccessDenied", "the login collection is the vault: it cannot be deleted")
        default:
            throw BusError.unknownMethod("no method \(Introspection.collection).\(member)")
        }
    }

    private func item(_ call: Call, _ itemClass: ItemClass, _ id: Int64, interface: String, member: String) throws {
        guard accepts(interface, Introspection.item) else {
            throw BusError.unknownMethod("no method \(interface).\(member)")
        }
        switch member {
        case "GetSecret":
            let session = try call.reader.objectPath()
            let algorithm = try checkSession(session, for: call)
            let caller = try self.caller(of: call)
            let item = try readSecretOf(caller, itemClass, id)
            try reply(call) { w throws(BusError) in
                try writeSecret(
                    w, session: session, algorithm: algorithm, value: item.data ?? [],
                    contentType: SecretServiceMapping.contentType(of: item))
            }
        case "SetSecret":
            let (value, contentType) = try readSecret(call)
            let caller = try self.caller(of: call)
            let item = try visibleItem(caller, itemClass, id)
            let changes = try SecretServiceMapping.changes(settingContentType: contentType, of: item)
            _ = try audited(caller, id, .dbusSetSecret) {
                try keychain.update(
                    Query(itemClass, synchronizableAny: true, persistentReference: id),
                    attributes: SecretServiceMapping.isKept(item) ? changes : [:], data: value, caller: caller)
            }
            try reply(call) { _ throws(BusError) in }
            emit(ObjectPath.collectionPath, Introspection.collection, "ItemChanged") { w throws(BusError) in
                try w.objectPath(ObjectPath.item(item))
            }
            propertiesChanged(ObjectPath.item(item), Introspection.item, ["Modified"])
        case "Delete":
            let caller = try self.caller(of: call)
            let item = try visibleItem(caller, itemClass, id)
            _ = try audited(caller, id, .dbusDelete) {
                try keychain.delete(Query(itemClass, synchronizableAny: true, persistentReference: id), caller: caller)
            }
            try reply(call) { w throws(BusError) in try w.objectPath("/") }
            emit(ObjectPath.collectionPath, Introspection.collection, "ItemDeleted") { w throws(BusError) in
                try w.objectPath(ObjectPath.item(item))
            }
            propertiesChanged(ObjectPath.collectionPath, Introspection.collection, ["Items"])
        default:
            throw BusError.unknownMethod("no method \(Introspection.item).\(member)")
        }
    }

    /// Prompt.Prompt runs the prompt on a thread of its own (the bus thread goes on answering
    /// other clients) and says Completed when it ends; Prompt.Dismiss ends it unanswered. Only
    /// the client that got the prompt may use it, once.
    private func prompt(_ call: Call, _ n: Int, interface: String, member: String) throws {
        guard accepts(interface, Introspection.prompt), member == "Prompt" || member == "Dismiss" else {
            throw BusError.unknownMethod("no method \(interface).\(member)")
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
            completed(n, dismissed: true, unlocked: [])
            return
        }
        Thread.detachNewThread { [self] in
            defer { prompts.withLock { $0.running -= 1 } }
            let (dismissed, unlocked) = run(started.pending)
            onBusThread { $0.completed(n, dismissed: dismissed, unlocked: unlocked) }
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
            caller.presenceGrants.formUnion(grants(for: pending.owner))
            var given: Set<Int64> = []
            for path in pending.paths {
                guard case .item(let itemClass, let id)? = ObjectPath(path),
                    let item = try? visibleItem(caller, itemClass, id),
                    caller.needsPresence(for: item)
                else { continue }
                let answer = try prompter.confirm(item: item, caller: caller) { passphrase in
                    guard let executable = caller.executable else { return }
                    try self.keychain.rememberPresence(executable: executable, itemID: id, passphrase: passphrase)
                }
                audit(caller, id, .dbusPresence, true, answer.auditNote)
                if case .remembered = answer { access.invalidatePolicy() }
                given.insert(id)
                caller.presenceGrants.insert(id)
            }
            grant(given, to: pending.owner)
        } catch {
            Log.info("secret service: the prompt for \(caller.processDescription) ended: \(error)")
            audit(caller, nil, .dbusPresence, false, (error as? KeychainError)?.status.name)
            return (true, [])
        }
        return (false, pending.paths.filter { (try? isUnlocked($0, for: caller)) ?? false })
    }

    /// Whether an object Unlock names is open to `caller` now: the collection when the keychain
    /// is unlocked, an item it may see when its secret is in reach (Locked false); another
    /// path never. An item the caller may not see is NoSuchObject.
    func isUnlocked(_ path: String, for caller: Caller) throws -> Bool {
        switch ObjectPath(path) {
        case .collection?: return !collectionLocked
        case .item(let itemClass, let id)?:
            return !SecretServiceMapping.isLocked(try visibleItem(caller, itemClass, id), in: keychain, for: caller)
        default: return false
        }
    }

    /// Prompt.Completed, and PropertiesChanged for what it unlocked (on the bus thread).
    func completed(_ n: Int, dismissed: Bool, unlocked: [String]) {
        emit(ObjectPath.prompt(n), Introspection.prompt, "Completed") { w throws(BusError) in
            try w.bool(dismissed)
            try w.variant("ao") { () throws(BusError) in try w.objectPaths(unlocked) }
        }
        for path in unlocked {
            let interface = path == ObjectPath.collectionPath ? Introspection.collection : Introspection.item
            propertiesChanged(path, interface, ["Locked"])
        }
    }

    private func session(_ call: Call, _ n: Int, interface: String, member: String) throws {
        guard accepts(interface, Introspection.session), member == "Close" else {
            throw BusError.unknownMethod("no method \(interface).\(member)")
        }
        let closed = sessions.withLock { s -> Bool in
            guard s.open[n]?.owner == call.sender else { return false }
            s.open[n] = nil
            return true
        }
        guard closed else {
            throw BusError("org.freedesktop.Secret.Error.NoSession", "no session \(n) of this client")
        }
        try reply(call) { _ throws(BusError) in }
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
