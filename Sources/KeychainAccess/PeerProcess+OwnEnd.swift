import CPlatform
import FoundationEssentials
import Glibc

// The ssh agent's answer to "send, then exec at once" (docs/security.md, "The service's
// callers"). The agent protocol has no greeting: a process can connect, write a request and
// `execve` an allowed program before the agent accepts the connection, and the pin then reads the
// allowed program as the connecting process. What the exec cannot hide is the descriptor: a
// descriptor survives `execve` only without close-on-exec, so a descriptor that has it in the
// exec'd program was made (or marked) by that program's own code after the exec. The connecting
// program is believed only when it holds its end of the connection itself, and only at
// descriptors marked close-on-exec (OpenSSH, Go, Python and Rust clients all make their agent
// socket so); anything else lessens the connection to the default group.

extension PeerProcess {
    /// Why the pinned process may not be the program that connected and wrote (nil: it holds the
    /// other end of `socket`, every descriptor of it close-on-exec). `directory`: its pinned
    /// `/proc/<pid>`.
    static func ownEnd(of socket: Int32, in directory: Int32) -> String? {
        let peer = kcfs_unix_peer_inode(socket)
        guard peer != 0 else { return "its end of the connection cannot be found (the kernel has no unix_diag)" }
        let target = Array("socket:[\(peer)]".utf8)
        let fdDirectory = openat(directory, "fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fdDirectory >= 0 else { return "its descriptors cannot be read" }
        guard let listing = fdopendir(fdDirectory) else {
            close(fdDirectory)
            return "its descriptors cannot be read"
        }
        defer { closedir(listing) }
        var holding: [String] = []
        var link = [UInt8](repeating: 0, count: 64)
        while let entry = readdir(listing) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            guard name.first?.isNumber == true else { continue }
            let n = link.withUnsafeMutableBufferPointer {
                readlinkat(
                    fdDirectory, name, UnsafeMutableRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self),
                    $0.count)
            }
            if n == target.count, link[0..<n].elementsEqual(target) { holding.append(name) }
        }
        guard !holding.isEmpty else {
            return "it does not hold its end of the connection (the program that connected may have exec'd)"
        }
        for fd in holding {
            let flags = ProcessIdentity.readSmall(Array("fdinfo/\(fd)".utf8CString), relativeTo: directory) {
                Self.field("flags:", in: $0, radix: 8)
            }
            guard let flags else { return "its descriptor \(fd) cannot be read" }
            if flags & 0o2_000_000 == 0 {
                return "it holds its end of the connection without close-on-exec (inherited across an exec?)"
            }
        }
        return nil
    }

    /// The number after `name` on its line of a `/proc` file of `name:\tvalue` lines (`status`,
    /// `fdinfo/N`), read from the bytes: nil when the line or the number is missing.
    static func field(_ name: StaticString, in bytes: UnsafeBufferPointer<UInt8>, radix: Int = 10) -> Int? {
        let key = UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount)
        var lineStart = 0
        while lineStart < bytes.count {
            let lineEnd = bytes[lineStart...].firstIndex(of: UInt8(ascii: "\n")) ?? bytes.count
            if lineEnd - lineStart > key.count, bytes[lineStart..<(lineStart + key.count)].elementsEqual(key) {
                var value = 0
                var digits = 0
                for byte in bytes[(lineStart + key.count)..<lineEnd] {
                    if byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") {
                        if digits == 0 { continue } else { break }
                    }
                    let digit = Int(byte) - Int(UInt8(ascii: "0"))
                    guard digit >= 0, digit < radix, value < Int.max / 16 else { return nil }
                    value = value * radix + digit
                    digits += 1
                }
                return digits > 0 ? value : nil
            }
            lineStart = lineEnd + 1
        }
        return nil
    }
}
