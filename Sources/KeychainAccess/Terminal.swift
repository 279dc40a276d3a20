import FoundationEssentials
import Glibc

#if canImport(Glibc)
    import Glibc
#endif

/// What every face that talks to a person shares (the CLI, the credential helpers): a line
/// typed on the controlling terminal with echo off, and whole writes to a descriptor.
public enum Terminal {
    /// A line typed on /dev/tty with echo off, without its newline, or nil when the process
    /// has no controlling terminal. `tooLong` when the line passed `limit` bytes (what was read
    /// is wiped, never cut silently).
    public static func promptWithoutEcho(_ text: String, limit: Int) -> (line: [UInt8], tooLong: Bool)? {
        let fd = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var old = termios()
        guard tcgetattr(fd, &old) == 0 else { return nil }
        var quiet = old
        quiet.c_lflag &= ~tcflag_t(ECHO)
        tcsetattr(fd, TCSAFLUSH, &quiet)
        defer {
            tcsetattr(fd, TCSAFLUSH, &old)
            _ = write(fd, "\n", 1)
        }
        _ = text.withCString { write(fd, $0, strlen($0)) }
        var line = [UInt8]()
        var byte: UInt8 = 0
        while read(fd, &byte, 1) == 1 {
            if byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\r") { break }
            line.append(byte)
            if line.count > limit {
                line.withUnsafeMutableBytes { p in if let base = p.baseAddress { memset(base, 0, p.count) } }
                return ([], true)
            }
        }
        return (line, false)
    }

    /// Writes all of `bytes` to `fd` unbuffered, retrying after EINTR (a process may `_exit`
    /// right after: nothing may sit in a buffer).
    public static func writeAll(_ fd: Int32, _ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return }
            offset += n
        }
    }
}
