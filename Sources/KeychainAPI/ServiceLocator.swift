import FoundationEssentials
import Glibc
import Keychain
import KeychainCrypto

#if canImport(Glibc)
    import Glibc
#endif

/// Where the keychain service of a vault listens (docs/service.md): one socket per vault
/// *file*, named by the file's device and inode, so that every spelling of the vault (a hard
/// link, a symlink, a relative path) finds the one service that holds it.
///
/// The directory is `$XDG_RUNTIME_DIR/keychainfs` when that is set (systemd's per-user runtime
/// directory, 0700), else `/tmp/keychainfs-<uid>`; either must be a directory of this user with
/// no access for others, or no socket in it is trusted.
public enum ServiceLocator {
    /// A vault file's identity.
    public struct VaultIdentity: Equatable, Sendable {
        public let device: UInt64
        public let inode: UInt64
    }

    public static func identity(ofVault path: String) -> VaultIdentity? {
        var st = stat()
        guard stat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        return VaultIdentity(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))
    }

    public static func identity(ofOpenFile fd: Int32) -> VaultIdentity? {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        return VaultIdentity(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))
    }

    public static func directory(
        environment: [String: String] = ProcessInfo.processInfo.environment, uid: uid_t = getuid()
    ) -> String {
        if let runtime = environment["XDG_RUNTIME_DIR"], runtime.hasPrefix("/") {
            let dir = runtime + "/keychainfs"
            // sun_path holds 108 bytes; the socket's name adds at most 50.
            if dir.utf8.count <= 50 { return dir }
        }
        return "/tmp/keychainfs-\(uid)"
    }

    public static func socketPath(for vault: VaultIdentity, directory: String = directory()) -> String {
        directory + "/vault-" + String(vault.device, radix: 16) + "-" + String(vault.inode) + ".sock"
    }

    /// Whether `dir` is a private directory of `uid` (not a symlink, no access for group or
    /// others): a socket in a directory someone else controls could be anyone's.
    public static func isPrivateDirectory(_ dir: String, uid: uid_t = getuid()) -> Bool {
        var st = stat()
        return lstat(dir, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR && st.st_uid == uid && st.st_mode & 0o077 == 0
    }

    /// Makes the directory (0700) if it is missing; fails if it exists and is not private.
    public static func prepareDirectory(_ dir: String, uid: uid_t = getuid()) throws {
        if mkdir(dir, 0o700) != 0 && errno != EEXIST {
            throw KeychainError(.io, "cannot create \(dir): \(String(cString: strerror(errno)))")
        }
        guard isPrivateDirectory(dir, uid: uid) else {
            throw KeychainError(.io, "\(dir) is not a private directory of uid \(uid) (mode 0700, not a symlink)")
        }
    }
}

/// A connected Unix stream socket's send and receive of whole frames (`APIWire`).
public enum Framing {
    /// Writes the whole frame: its length, then its bytes.
    public static func send(_ fd: Int32, _ body: [UInt8]) throws {
        var frame = [UInt8]()
        frame.reserveCapacity(4 + body.count)
        withUnsafeBytes(of: UInt32(body.count).littleEndian) { frame += $0 }
        frame += body
        defer { wipe(&frame) }
        var sent = 0
        while sent < frame.count {
            let n = frame.withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL))
            }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw KeychainError(.io, "the keychain service's socket closed") }
            sent += n
        }
    }

    /// Reads one frame; nil at a clean end of stream before it. `read` is the byte source
    /// (plain `read(2)`, or the server's read that notes each chunk's sender).
    public static func receive(limit: Int = APIWire.maxFrame, _ read: (UnsafeMutableRawBufferPointer) -> Int) throws
        -> [UInt8]?
    {
        var header = [UInt8](repeating: 0, count: 4)
        guard try fill(&header, read, atStart: true) else { return nil }
        let length = Int(header.reversed().reduce(UInt32(0)) { ($0 << 8) | UInt32($1) })
        guard length <= limit else { throw KeychainError(.dataTooLarge, "a message over \(limit) bytes was refused") }
        var body = [UInt8](repeating: 0, count: length)
        guard try fill(&body, read, atStart: false) else {
            throw KeychainError(.io, "the keychain service's socket closed mid-message")
        }
        return body
    }

    private static func fill(
        _ buffer: inout [UInt8], _ read: (UnsafeMutableRawBufferPointer) -> Int, atStart: Bool
    ) throws -> Bool {
        var got = 0
        while got < buffer.count {
            let n = buffer.withUnsafeMutableBytes { read(UnsafeMutableRawBufferPointer(rebasing: $0[got...])) }
            if n < 0 && errno == EINTR { continue }
            if n == 0 && got == 0 && atStart { return false }
            guard n > 0 else {
                if n == 0 { throw KeychainError(.io, "the keychain service's socket closed mid-message") }
                throw KeychainError(
                    .io, "cannot read the keychain service's socket: \(String(cString: strerror(errno)))")
            }
            got += n
        }
        return true
    }

    public static func wipe(_ bytes: inout [UInt8]) { Sodium.wipe(&bytes) }
}
