import CSystemd
import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess

// The dispatcher: a method call to an object under /org/freedesktop/secrets is answered through
// the object's interface tables (Interfaces.swift) and nothing else; replies, errors, signals,
// and the caller of a message.

extension SecretServiceProvider {
    struct Call {
        let message: OpaquePointer
        let reader: MessageReader
        let object: ObjectPath
        var sender: String {
            sd_bus_message_get_sender(message).map { String(cString: $0) } ?? ""
        }
        var path: String { sd_bus_message_get_path(message).map { String(cString: $0) } ?? "" }
    }

    /// One method call to an object under /org/freedesktop/secrets: its reply, or an error reply.
    func handle(_ message: OpaquePointer) -> Int32 {
        guard isMethodCall(message) else { return 0 }
        let path = sd_bus_message_get_path(message).map { String(cString: $0) } ?? ""
        let interface = sd_bus_message_get_interface(message).map { String(cString: $0) } ?? ""
        let member = sd_bus_message_get_member(message).map { String(cString: $0) } ?? ""
        guard let object = ObjectPath(path) else {
            // The nodes above the service ("/", "/org", "/org/freedesktop") introspect as the way
            // to it, so `busctl tree` finds it.
            if (ObjectPath.root + "/").hasPrefix(path == "/" ? path : path + "/"), member == "Introspect" {
                let child = ObjectPath.root.dropFirst(path == "/" ? 1 : path.count + 1).split(separator: "/")[0]
                let call = Call(message: message, reader: MessageReader(message: message), object: .directory)
                guard
                    (try? reply(call) { w throws(BusError) in
                        try w.string(Introspection.xml(for: .directory, children: [String(child)]))
                    }) != nil
                else {
                    return replyError(message, BusError.failed("the reply could not be sent"))
                }
                return 1
            }
            return replyError(message, BusError("org.freedesktop.Secret.Error.NoSuchObject", "no object \(path)"))
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

    /// The method of the object's interfaces (the named one, or any when the call names none)
    /// with the call's signature checked against its declared arguments.
    func dispatch(_ call: Call, interface: String, member: String) throws {
        let interfaces = Introspection.interfaces(of: call.object).filter { interface.isEmpty || $0.name == interface }
        guard let method = interfaces.lazy.compactMap({ $0.method(member) }).first else {
            let named = interface.isEmpty ? member : "\(interface).\(member)"
            throw BusError.unknownMethod("\(call.path) has no method \(named)")
        }
        let signature = sd_bus_message_get_signature(call.message, 1).map { String(cString: $0) } ?? ""
        guard signature == method.inputSignature else { throw BusError.invalidArgs(method.mismatch(signature)) }
        try method.handler(self, call)
    }

    // MARK: Introspectable and Properties

    func introspect(_ call: Call) throws {
        let xml = Introspection.xml(for: call.object, children: try children(of: call))
        try reply(call) { w throws(BusError) in try w.string(xml) }
    }

    /// The interface a Properties call names (any of the object's when it names none) that has
    /// `name`, or all of the object's with properties.
    private func propertyInterfaces(_ call: Call, _ iface: String) -> [Interface] {
        Introspection.interfaces(of: call.object).filter {
            (iface.isEmpty || $0.name == iface) && $0.values != nil
        }
    }

    func getProperty(_ call: Call) throws {
        let iface = try call.reader.string()
        let name = try call.reader.string()
        guard let spec = propertyInterfaces(call, iface).first(where: { $0.property(name) != nil }),
            let value = try spec.values?(self, call)[name]
        else {
            throw BusError.invalidArgs("no property \(iface.isEmpty ? "" : iface + ".")\(name) on \(call.path)")
        }
        try reply(call) { w throws(BusError) in try value.write(w) }
    }

    func getAllProperties(_ call: Call) throws {
        let iface = try call.reader.string()
        var all: [String: PropertyValue] = [:]
        for spec in propertyInterfaces(call, iface) {
            all.merge(try spec.values?(self, call) ?? [:]) { a, _ in a }
        }
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
    }

    /// Properties.Set: only a property its table declares writable, and only with a value of
    /// its type.
    func setProperty(_ call: Call) throws {
        let iface = try call.reader.string()
        let name = try call.reader.string()
        let found = propertyInterfaces(call, iface).lazy.compactMap { spec in spec.property(name).map { (spec, $0) } }
            .first
        guard let (spec, property) = found, property.writable, let set = spec.set else {
            throw BusError(
                "org.freedesktop.DBus.Error.PropertyReadOnly",
                "\(iface.isEmpty ? "" : iface + ".")\(name) cannot be set on \(call.path)")
        }
        let given = try call.reader.variantSignature()
        guard given == property.type else {
            throw BusError.invalidArgs(
                "\(spec.name).\(name) must be \(describe(property.type)) (\(property.type)), not \(given)")
        }
        try set(self, call, name)
    }

    // MARK: Replies

    func reply(_ call: Call, _ body: (MessageWriter) throws(BusError) -> Void) throws(BusError) {
        var reply: OpaquePointer?
        _ = try check(sd_bus_message_new_method_return(call.message, &reply), "the reply could not be made")
        guard let reply else { throw BusError.failed("no reply message") }
        defer { sd_bus_message_unref(reply) }
        try body(MessageWriter(message: reply))
        _ = try check(sd_bus_send(nil, reply, nil), "the reply could not be sent")
    }

    func replyError(_ message: OpaquePointer, _ error: BusError) -> Int32 {
        var e = sd_bus_error()
        _ = sd_bus_error_set(&e, error.name, error.message)
        defer { sd_bus_error_free(&e) }
        _ = sd_bus_reply_method_error(message, &e)
        return 1
    }

    /// org.freedesktop.DBus.Properties.PropertiesChanged naming the properties that changed,
    /// with no values: what a property says depends on who asks (the access groups, the
    /// presence a client gave), and a signal goes to every client.
    func propertiesChanged(_ path: String, _ interface: String, _ names: [String], to destination: String? = nil) {
        emit(path, Introspection.properties, "PropertiesChanged", to: destination) { w throws(BusError) in
            try w.string(interface)
            try w.open("a", "{sv}")
            try w.close()
            try w.open("a", "s")
            for name in names { try w.string(name) }
            try w.close()
        }
    }

    /// A signal on `path`: to every client of the bus, or, with a `destination` (a unique bus
    /// name), to that client only (the bus delivers it there whatever the other clients' match
    /// rules): what only one client may know, as what its prompt unlocked.
    func emit(
        _ path: String, _ interface: String, _ member: String, to destination: String? = nil,
        _ body: (MessageWriter) throws(BusError) -> Void
    ) {
        guard let pointer = bus.withLock({ $0?.pointer }) else { return }
        var signal: OpaquePointer?
        guard sd_bus_message_new_signal(pointer, &signal, path, interface, member) >= 0, let signal else { return }
        defer { sd_bus_message_unref(signal) }
        if let destination, sd_bus_message_set_destination(signal, destination) < 0 { return }
        guard (try? body(MessageWriter(message: signal))) != nil else { return }
        _ = sd_bus_send(pointer, signal, nil)
    }

    // MARK: Callers

    /// The caller of a bus message: the sender's pid from the bus (GetConnectionUnixProcessID),
    /// its executable and groups through the access layer, as the mount identifies a FUSE
    /// request's process. A call never prompts: an item that needs user presence is Locked to
    /// a caller until its Unlock prompt (a Prompt object) was answered, or its executable was
    /// told "Always allow".
    ///
    /// Where the bus gives the sender's process handle (ProcessFD), the pid comes from it and
    /// the process is checked to be alive once identified; where it gives a pid only, the
    /// caller is `identityUnconfirmed` (and its remembered "Always allow" decisions do not
    /// count) until a prompt confirms it (BusIdentity.swift), unless the provider trusts pids.
    func caller(of call: Call) throws -> Caller { try callerAndPid(of: call).caller }

    func callerAndPid(of call: Call) throws -> (caller: Caller, pid: pid_t) {
        let handle = trustBusPid ? nil : processHandle(of: call)
        defer { if let handle { close(handle) } }
        var pid: pid_t = 0
        if let handle {
            pid = Self.pid(ofHandle: handle) ?? 0
        } else {
            var creds: OpaquePointer?
            if sd_bus_query_sender_creds(call.message, keychainfs_creds_pid, &creds) >= 0, let creds {
                _ = sd_bus_creds_get_pid(creds, &pid)
                sd_bus_creds_unref(creds)
            }
        }
        guard pid > 0 else {
            throw BusError("org.freedesktop.DBus.Error.AccessDenied", "the caller's process cannot be identified")
        }
        let base: Caller
        do { base = try access.caller(tid: pid, identify: true) } catch {
            throw BusError("org.freedesktop.DBus.Error.AccessDenied", "the caller's process cannot be identified")
        }
        // Identified while the handle pinned the process: it must still be that process.
        if let handle, Self.pid(ofHandle: handle) != pid {
            throw BusError("org.freedesktop.DBus.Error.AccessDenied", "the caller's process ended")
        }
        // The client's caller in its scope: no prompt of the core's (the provider prompts), the
        // presence its prompts gave, and unless the bus pinned its process (or the provider
        // trusts pids) its identity unconfirmed until a prompt names its pid and executable.
        let pinned = trustBusPid || busIdentities.withLock({ $0.handles[call.sender] }) == true
        return (ledger.caller(base, scope: call.sender, pid: pid, pinned: pinned), pid)
    }

    /// The door for a client's call: its caller in its scope, each decision audited under the
    /// Secret Service's words (`update`: the method that changes, SetSecret or a property set).
    func session(_ caller: Caller, update: AuditOperation = .dbusSetSecret) -> KeychainSession {
        access.session(caller, via: "dbus", names: .secretService(update: update))
    }

    func audit(_ caller: Caller, _ item: Int64?, _ op: AuditOperation, _ allowed: Bool, _ why: String? = nil) {
        access.audit?.record(caller, item: item, op, allowed: allowed, why: why)
    }

    /// The child nodes introspection names.
    func children(of call: Call) throws -> [String] {
        switch call.object {
        case .service: return ["collection", "aliases"]
        case .directory:
            return call.path.hasSuffix("/aliases")
                ? ObjectPath.aliases : ObjectPath.CollectionName.allCases.map(\.rawValue)
        case .collection(.session):
            return sessionCollection.withLock { $0.search([:]) }.map(String.init)
        case .collection(.login):
            let caller = try self.caller(of: call)
            return try visibleItems(caller).map { "\($0.itemClass.rawValue)\($0.id)" }
        default: return []
        }
    }
}
