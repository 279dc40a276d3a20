import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import KeychainCrypto
import SystemPackage

/// `export -f pkcs12`: one identity (certificate and private key) as a PKCS#12 file, made by the
/// system's `openssl pkcs12 -export`, as `import` reads one. Nothing secret is on openssl's argv:
/// the PEM goes on its stdin and the file's passphrase on descriptor 3 (`-passout fd:3`).
enum PKCS12Export {
    static let openssl = "/usr/bin/openssl"

    /// The passphrase that protects the file: from `file`, else typed twice on the terminal.
    /// Empty is refused: the file holds a private key.
    static func passphrase(file: String?) throws -> [UInt8] {
        var bytes: [UInt8]
        if let file {
            bytes = try readInputFile(file)
            SecretInput.chomp(&bytes)
        } else {
            guard let first = try SecretInput.prompt("passphrase for the PKCS#12 file: ") else {
                throw CLIError.failure(
                    "no passphrase for the PKCS#12 file: there is no terminal to prompt on; use --p12-passphrase-file")
            }
            var again = try SecretInput.prompt("retype the passphrase for the PKCS#12 file: ") ?? []
            defer { Sodium.wipe(&again) }
            guard first == again else { throw CLIError.failure("the passphrases do not match") }
            bytes = first
        }
        if bytes.isEmpty {
            throw CLIError.failure("the PKCS#12 passphrase is empty; the file would hold the private key in the clear")
        }
        return bytes
    }

    /// The PKCS#12 bytes of a certificate (PEM) and its private key, named `label`. openssl
    /// reads its `-in` twice when the key is in it too, which a pipe cannot give, so the key has
    /// a pipe of its own (descriptor 4).
    static func make(certificate: [UInt8], key: [UInt8], label: String, passphrase: [UInt8]) throws -> [UInt8] {
        var pipes: [[Int32]] = []
        for _ in 0..<4 {
            var ends: [Int32] = [0, 0]
            guard pipe(&ends) == 0 else {
                pipes.joined().forEach { close($0) }
                throw CLIError.system("pipe", Errno(rawValue: errno))
            }
            // Close-on-exec: the child holds only the ends dup2'ed below, so it sees EOF.
            for fd in ends { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
            pipes.append(ends)
        }
        let (certificateIn, output, password, keyIn) = (pipes[0], pipes[1], pipes[2], pipes[3])
        let pid: pid_t
        do {
            pid = try ChildProcess.spawn(
                openssl,
                arguments: [
                    "openssl", "pkcs12", "-export", "-in", "/dev/fd/0", "-inkey", "/dev/fd/4", "-passout", "fd:3",
                    "-name", label,
                ],
                descriptors: [
                    (0, .duplicate(certificateIn[0])), (1, .duplicate(output[1])), (2, .appending("/dev/null")),
                    (3, .duplicate(password[0])), (4, .duplicate(keyIn[0])),
                ])
        } catch {
            pipes.joined().forEach { close($0) }
            throw CLIError.system("cannot run \(openssl)", error)
        }
        for fd in [certificateIn[0], output[1], password[0], keyIn[0]] { close(fd) }
        // An openssl that exits early must make our writes fail (EPIPE), not kill us.
        let previous = signal(SIGPIPE, SIG_IGN)
        defer { signal(SIGPIPE, previous) }
        // The passphrase and the key first (a few kilobytes: they fit their pipes, whatever
        // openssl reads first), then the certificate: openssl reads all of its input before it
        // writes, so no write waits on our read of its output.
        writeAll(password[1], passphrase)
        writeAll(password[1], [10])
        close(password[1])
        writeAll(keyIn[1], key)
        close(keyIn[1])
        writeAll(certificateIn[1], certificate)
        close(certificateIn[1])
        let p12 = try SecretInput.readAll(fd: output[0], limit: Keychain.maxDataSize, what: "openssl's output")
        close(output[0])
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        guard status == 0, !p12.isEmpty else {
            throw CLIError.failure(
                "openssl could not make a PKCS#12 file from \"\(label)\" (a key in OpenSSH format cannot be exported this way)"
            )
        }
        return p12
    }

    private static func writeAll(_ fd: Int32, _ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return }
            offset += n
        }
    }
}
