import CPlatform
import FoundationEssentials
import Glibc
import SystemPackage

/// Unix stream sockets as every face's socket uses them (the control socket, the API socket,
/// the API's client): the address of a path, a listener private to its user from the moment it
/// exists, and a connection; each one close-on-exec, each failure as the errno.
public enum UnixSocket {
    /// The address of `path`; ENAMETOOLONG past `sun_path`'s 108 bytes.
    public static func address(_ path: String) throws(Errno) -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { throw Errno.fileNameTooLong }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in for (i, b) in bytes.enumerated() { raw[i] = b } }
        return address
    }

    /// A socket listening at `path`, mode 0600 from its creation (bound under umask 077).
    /// `passCredentials`: every accepted socket carries each message's sender (SO_PASSCRED) from
    /// its client's first byte.
    public static func listen(at path: String, backlog: Int32, passCredentials: Bool = false) throws(Errno) -> Int32 {
        var address = try address(path)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Errno(rawValue: errno) }
        if passCredentials { _ = kcfs_set_passcred(fd) }
        let old = umask(0o077)
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        umask(old)
        guard rc == 0, Glibc.listen(fd, backlog) == 0 else {
            let e = errno
            close(fd)
            throw Errno(rawValue: e)
        }
        return fd
    }

    /// A socket connected to `path`.
    public static func connect(to path: String) throws(Errno) -> Int32 {
        var address = try address(path)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Errno(rawValue: errno) }
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard rc == 0 else {
            let e = errno
            close(fd)
            throw Errno(rawValue: e)
        }
        return fd
    }
}
