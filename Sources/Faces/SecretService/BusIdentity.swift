import CSystemd
import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess

// Who sent a message, as far as the bus can say (issue 27, point 2). A bus that gives the
// sender's process handle (`ProcessFD` in GetConnectionCredentials: dbus-broker, dbus ≥ 1.15.?)
// pins the process: its pid cannot be reused while the provider holds the handle. dbus-daemon
// 1.14 gives a pid only: a process that exec'd an allowed program after connecting, or whose pid
// an allowed program took, would be judged as that program. There, unless the provider trusts
// the pid (`trustBusPid`), what rests on the executable's identity — items of an access group
// other than the default, and remembered "Always allow" decisions — is Locked to the client
// until a prompt naming its pid and executable is answered (Unlock, then Prompt), for that
// client (its unique bus name), that pid and executable, and this unlock of the keychain.

/// What the provider knows of each client's identity: whether GetConnectionCredentials gave a
/// ProcessFD for it. What a prompt confirmed is the door owner's `ScopeLedger`.
struct BusIdentities {
    var handles: [String: Bool] = [:]
}

extension SecretServiceProvider {
    /// The sender's process handle from the bus (a pidfd the caller closes), or nil when the bus
    /// gives none. Asked once per client.
    func processHandle(of call: Call) -> Int32? {
        let sender = call.sender
        if busIdentities.withLock({ $0.handles[sender] }) == false { return nil }
        guard let bus = bus.withLock({ $0?.pointer }) else { return nil }
        var request: OpaquePointer?
        guard
            sd_bus_message_new_method_call(
                bus, &request, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                "GetConnectionCredentials") >= 0, let request
        else { return nil }
        defer { sd_bus_message_unref(request) }
        guard (try? MessageWriter(message: request).string(sender)) != nil else { return nil }
        var reply: OpaquePointer?
        var error = sd_bus_error()
        defer { sd_bus_error_free(&error) }
        guard sd_bus_call(bus, request, 5_000_000, &error, &reply) >= 0, let reply else { return nil }
        defer { sd_bus_message_unref(reply) }
        let r = MessageReader(message: reply)
        var handle: Int32?
        if (try? r.enter("a", "{sv}")) == true {
            while (try? r.enter("e", "sv")) == true {
                if (try? r.string()) == "ProcessFD", (try? r.variantSignature()) == "h" {
                    var fd: Int32 = -1
                    if (try? r.variant("h") { () throws(BusError) in fd = try r.descriptor() }) != nil, fd >= 0 {
                        handle = fcntl(fd, F_DUPFD_CLOEXEC, 3)
                    }
                } else {
                    try? r.skip("v")
                }
                try? r.exit()
            }
        }
        busIdentities.withLock { $0.handles[sender] = handle != nil }
        return handle
    }

    /// The pid a pidfd refers to (`Pid:` in its fdinfo), or nil when the process is gone.
    static func pid(ofHandle fd: Int32) -> pid_t? {
        guard let text = try? String(contentsOfFile: "/proc/self/fdinfo/\(fd)", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("Pid:") {
            if let pid = pid_t(line.dropFirst(4).trimmingWhitespace()), pid > 0 { return pid }
        }
        return nil
    }

    /// Whether `item` is out of reach of `caller` until its identity is confirmed: an item of an
    /// access group other than the default, to a caller whose identity rests on a bare pid.
    func needsIdentity(_ item: KeychainItem, _ caller: Caller) -> Bool {
        guard caller.identityUnconfirmed else { return false }
        let group = item.string(Schema.accessGroup) ?? Caller.defaultAccessGroup
        return group != Caller.defaultAccessGroup
    }

    /// The Secret Service's Locked for an item: the core's rule (keys, presence), or an identity
    /// not yet confirmed.
    func isLocked(_ item: KeychainItem, for caller: Caller) -> Bool {
        session(caller).isLocked(item) || needsIdentity(item, caller)
    }

    /// Refuses a use of `item` (its secret, a change) by a caller whose identity it needs
    /// confirmed: IsLocked, saying how to unlock it.
    func requireIdentity(_ item: KeychainItem, _ caller: Caller) throws {
        guard needsIdentity(item, caller) else { return }
        audit(caller, item.id, .dbusLookup, false, "the bus gives no process handle; identity not confirmed")
        throw BusError(
            "org.freedesktop.Secret.Error.IsLocked",
            "the bus names the caller by pid only: Unlock the item and confirm \(caller.processDescription) at the prompt"
        )
    }
}
