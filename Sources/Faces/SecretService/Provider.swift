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
/// One thread: `serve()` runs sd-bus's loop and each message is answered before the next.
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

    /// Prompts handed out by Unlock and not yet completed: whose (the unique bus name that asked,
    /// the only one that may run or dismiss it), the caller it asks for, what it unlocks.
    private struct Prompts {
        var next = 1
        var open: [Int: (owner: String, caller: Caller, paths: [String])] = [:]
    }
    private let prompts = Mutex(Prompts())

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
            let w = sd_bus_wait(pointer, UInt64.max)
            if w < 0 && w != -EINTR {
                throw ProviderStartError(message: "the bus connection ended: \(String(cString: strerror(-w)))")
            }
        }
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
    /// request's process. It is never prompted (no Prompt objects yet): an item that needs user
    /// presence answers IsLocked.
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
        if caller.processDescription.isEmpty { caller.processDescription = "pid \(pid)" }
        return caller
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
    func visibleItems(_ caller: Caller, narrowedBy query: [String: String] = [:]) throws -> [KeychainItem] {
        try keychain.secretServiceItems(matching: query, caller: caller)
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
            if SecretServiceMapping.isLocked(item, in: keychain) {
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
                "Locked": .bool(SecretServiceMapping.isLocked(item, in: keychain)),
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
            if collectionLocked {
                do { try unlock() } catch let refusal as BusError {
                    // No passphrase to read again: a Prompt object that asks the caller through
                    // pinentry, if it has a terminal or display to ask on; else the refusal, at
                    // once, saying why.
                    let caller = try caller(of: call)
                    guard let prompter else { throw refusal }
                    if let why = prompter.whyNoPrompt(for: caller) {
                        throw BusError(
                            "org.freedesktop.Secret.Error.IsLocked",
                            "the keychain is locked and \(why) (or start the provider with --passphrase-file)")
                    }
                    let n = prompts.withLock { p -> Int in
                        defer { p.next += 1 }
                        p.open[p.next] = (call.sender, caller, paths)
                        return p.next
                    }
                    try reply(call) { w throws(BusError) in
                        try w.objectPaths([])
                        try w.objectPath(ObjectPath.prompt(n))
                    }
                    return
                }
            }
            let unlocked = try paths.filter { path in
                switch ObjectPath(path) {
                case .collection?: return !collectionLocked
                case .item(let itemClass, let id)?:
                    let item = try visibleItem(try caller(of: call), itemClass, id)
                    return !SecretServiceMapping.isLocked(item, in: keychain)
                default: return false
                }
            }
            try reply(call) { w throws(BusError) in
                try w.objectPaths(unlocked)
                try w.objectPath("/")
            }
        case "Lock":
            let paths = try call.reader.objectPaths()
            keychain.lock()
            try reply(call) { w throws(BusError) in
                try w.objectPaths(paths.filter { ObjectPath($0) != nil })
                try w.objectPath("/")
            }
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
        default:
            throw BusError.unknownMethod("no method \(Introspection.item).\(member)")
        }
    }

    /// Prompt.Prompt asks for the vault's passphrase through pinentry on the caller's terminal
    /// or display, then says Completed (dismissed or not, and the objects now unlocked);
    /// Prompt.Dismiss ends it unanswered. Only the client that got the prompt may use it. The
    /// provider answers one message at a time, so other clients wait while the prompt is up (at
    /// most its timeout).
    private func prompt(_ call: Call, _ n: Int, interface: String, member: String) throws {
        guard accepts(interface, Introspection.prompt), member == "Prompt" || member == "Dismiss" else {
            throw BusError.unknownMethod("no method \(interface).\(member)")
        }
        let pending = prompts.withLock { p -> (owner: String, caller: Caller, paths: [String])? in
            guard let open = p.open[n], open.owner == call.sender else { return nil }
            p.open[n] = nil
            return open
        }
        guard let pending else {
            throw BusError("org.freedesktop.Secret.Error.NoSuchObject", "no prompt \(n) of this client")
        }
        if member == "Prompt" { try call.reader.skip("s") }  // the window id: pinentry finds its own
        try reply(call) { _ throws(BusError) in }
        var dismissed = true
        if member == "Prompt", let prompter {
            do {
                try prompter.unlockVault(caller: pending.caller, purpose: "read its secrets through the Secret Service")
                access.invalidatePolicy()
                dismissed = false
            } catch {
                Log.info("secret service: the unlock prompt for \(pending.caller.processDescription) ended: \(error)")
            }
        }
        let unlocked =
            dismissed
            ? []
            : pending.paths.filter { path in
                switch ObjectPath(path) {
                case .collection?: return !collectionLocked
                case .item(let itemClass, let id)?:
                    guard let item = try? visibleItem(pending.caller, itemClass, id) else { return false }
                    return !SecretServiceMapping.isLocked(item, in: keychain)
                default: return false
                }
            }
        emit(ObjectPath.prompt(n), Introspection.prompt, "Completed") { w throws(BusError) in
            try w.bool(dismissed)
            try w.variant("ao") { () throws(BusError) in try w.objectPaths(unlocked) }
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
