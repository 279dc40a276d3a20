import FoundationEssentials
import Glibc
import Keychain
import KeychainCrypto

/// How `mount` hands the vault's master key from the CLI, which ran the Argon2id, to the
/// daemon it starts: over the private pipe on the daemon's fd 3, exactly
/// `Keychain.masterKeyBytes` bytes then EOF. The key goes from guarded memory to the pipe and
/// from the pipe to guarded memory, never through a Swift array; the daemon closes its end
/// once it has read it, so no child of the daemon inherits it. docs/security.md ("Mounting")
/// says why the pipe is as private as the passphrase that travelled on it before.
enum MasterKeyPipe {
    /// Writes the key whole (a pipe holds 64 KiB, so 32 bytes never block). A short write is
    /// left for the daemon to refuse as an incomplete key.
    static func send(_ key: SecureBytes, fd: Int32) {
        key.withUnsafeBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                let n = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { return }
                offset += n
            }
        }
    }

    /// Reads the key from `fd` and closes it. Anything but exactly the key's length, then EOF,
    /// is refused: a daemon started by hand with this option is not a way in.
    static func receive(fd: Int32) throws -> SecureBytes {
        defer { close(fd) }
        let key = try SecureBytes(count: Keychain.masterKeyBytes) { buffer in
            var offset = 0
            while offset < buffer.count {
                let n = read(fd, buffer.baseAddress! + offset, buffer.count - offset)
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else {
                    buffer.initializeMemory(as: UInt8.self, repeating: 0)
                    throw CLIError.failure("the master key on descriptor \(fd) is incomplete (\(offset) bytes)")
                }
                offset += n
            }
        }
        var extra: UInt8 = 0
        guard read(fd, &extra, 1) == 0 else {
            throw CLIError.failure("descriptor \(fd) holds more than a master key")
        }
        return key
    }
}
