import Foundation

/// sd_notify(3) without libsystemd: one datagram to `$NOTIFY_SOCKET`, so that a `Type=notify`
/// unit running `keychainfs mount -f` is "started" only once the mount is live. No socket, no
/// message: outside systemd this does nothing.
enum SystemdNotify {
    /// Sends `state` (`READY=1`, `STOPPING=1`) and reports whether it was delivered.
    @discardableResult
    static func send(_ state: String) -> Bool {
        guard let path = ProcessInfo.processInfo.environment["NOTIFY_SOCKET"], !path.isEmpty,
            path.hasPrefix("/") || path.hasPrefix("@")
        else { return false }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        // An abstract socket ("@name") starts with a NUL byte instead of the '@'.
        var bytes = Array(path.utf8)
        if bytes.first == UInt8(ascii: "@") { bytes[0] = 0 }
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard bytes.count < capacity else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count)

        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        let message = Array(state.utf8)
        let sent = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sockaddrPointer in
                message.withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, 0, sockaddrPointer, length) }
            }
        }
        return sent == message.count
    }
}
