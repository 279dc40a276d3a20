import CSystemd
import FoundationEssentials
import Glibc
import KeychainAccess

#if canImport(Glibc)
    import Glibc
#endif

/// The listening sockets systemd (or `systemd-socket-activate`) passed to this process
/// (`sd_listen_fds_with_names`), by the name their `.socket` unit gives them in
/// `FileDescriptorName=` (docs/service.md, "Started by systemd"):
/// - `api`: the keychain service's API socket for the default vault (`keychainfs.socket`,
///   `%t/keychainfs/default.sock`), where a one-shot command that finds no running service of
///   the default vault connects, and so starts it;
/// - `ssh-agent`: the ssh agent's socket (`keychainfs-ssh-agent.socket`), which makes the service
///   host the agent on it.
/// Taken once, at start-up: the environment variables are cleared so no child (a pinentry, a
/// `run` child) believes they are its own.
public struct ActivatedSockets: Sendable {
    public var api: Int32?
    public var sshAgent: Int32?

    public init(api: Int32? = nil, sshAgent: Int32? = nil) {
        self.api = api
        self.sshAgent = sshAgent
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// The sockets passed to this process, if any. A descriptor that is not a listening Unix
    /// stream socket, or a name this service does not know, fails the start: a unit that
    /// passes something else is misconfigured and is told so rather than half served.
    public static func take() throws(Failure) -> ActivatedSockets {
        var names: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
        let count = sd_listen_fds_with_names(1, &names)
        guard count > 0 else { return ActivatedSockets() }
        defer {
            if let names {
                for i in 0..<Int(count) { free(names[i]) }
                free(names)
            }
        }
        var sockets = ActivatedSockets()
        for i in 0..<Int(count) {
            let fd = SD_LISTEN_FDS_START + Int32(i)
            let name = names?[i].map { String(cString: $0) } ?? "unknown"
            guard sd_is_socket_unix(fd, Int32(SOCK_STREAM.rawValue), 1, nil, 0) > 0 else {
                throw Failure(
                    description: "socket activation: descriptor \(fd) (\(name)) is not a listening Unix stream socket")
            }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            switch name {
            case "api": sockets.api = fd
            case "ssh-agent": sockets.sshAgent = fd
            default:
                throw Failure(
                    description:
                        "socket activation: a socket named \"\(name)\"; keychainfs takes \"api\" and \"ssh-agent\" (FileDescriptorName= in the .socket unit)"
                )
            }
        }
        return sockets
    }

    /// The path a listening Unix socket is bound to (for log lines and the agent's variable).
    public static func boundPath(_ fd: Int32) -> String? {
        var address = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        let ok = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) == 0 }
        }
        guard ok, length > socklen_t(MemoryLayout<sa_family_t>.size) else { return nil }
        return withUnsafeBytes(of: &address.sun_path) { raw in
            let bytes = raw.prefix(Int(length) - MemoryLayout<sa_family_t>.size).prefix { $0 != 0 }
            return String(decoding: bytes, as: UTF8.self)
        }
    }
}
