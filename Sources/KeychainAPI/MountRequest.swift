import FoundationEssentials
import Glibc

/// `keychainfs mount` when a service already holds the vault (`keychainfs serve`, or one the
/// Secret Service's activation started): the service mounts it itself, beside the faces it
/// hosts, with the options that are about the mount alone (docs/service.md, "Joining a running
/// service"). Options about the service (auto-lock, the agent, the Secret Service, pinentry,
/// the audit log) are the running service's already and are refused by the CLI.
public struct MountRequest: Equatable, Sendable {
    /// Absolute.
    public var mountpoint: String
    public var allowOther = false
    public var defaultPermissions = false
    public var debug = false
    /// The kernel's cache lifetime of names and attributes, in milliseconds.
    public var cacheMilliseconds: Int64 = 1000

    public init(mountpoint: String) { self.mountpoint = mountpoint }
}

extension WireWriter {
    mutating func mountRequest(_ m: MountRequest) {
        string(m.mountpoint)
        byte(m.allowOther ? 1 : 0)
        byte(m.defaultPermissions ? 1 : 0)
        byte(m.debug ? 1 : 0)
        i64(m.cacheMilliseconds)
    }
}

extension WireReader {
    mutating func mountRequest() throws -> MountRequest {
        var m = MountRequest(mountpoint: try string())
        m.allowOther = try flag()
        m.defaultPermissions = try flag()
        m.debug = try flag()
        m.cacheMilliseconds = try i64()
        // An absolute path, and a cache lifetime the option table could have given (0 to a day).
        guard m.mountpoint.hasPrefix("/"), !m.mountpoint.contains("\u{0}"),
            (0...86_400_000).contains(m.cacheMilliseconds)
        else { throw Self.bad }
        return m
    }

}
