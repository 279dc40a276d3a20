import FoundationEssentials
import Glibc
import KeychainCrypto

/// The Argon2id parameters this device last unlocked a vault with: `rollback/<vault id>.kdf`
/// beside the device's rollback mark, "opslimit memlimit\n". A vault header edited to the
/// highest parameters allowed made each unlock attempt cost 15 s and 1 GB before the passphrase
/// was even found wrong; with the mark, parameters that differ are refused before Argon2id runs,
/// unless the caller accepts the change (`--accept-kdf-change`). The parameters are recorded
/// only after they unwrapped the master key (so they are the ones the passphrase holder set) and
/// by `passwd` on this device. A vault new to this device has no mark and is opened as it says.
struct KDFMark: Sendable {
    let path: String

    init(rollbackMark: RollbackMark) { path = rollbackMark.path + ".kdf" }

    func read() -> PasswordHashParameters? {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        let fields = text.split(whereSeparator: \.isWhitespace).compactMap { UInt64($0) }
        guard fields.count == 2 else { return nil }
        return PasswordHashParameters(opsLimit: fields[0], memLimit: fields[1])
    }

    /// Refuses parameters that differ from the recorded ones, before any Argon2id.
    func check(_ parameters: PasswordHashParameters, vault: String, accepting: Bool) throws {
        guard !accepting, let known = read(), known != parameters else { return }
        throw KeychainError(
            .decode,
            "vault \(vault) asks for Argon2id parameters (opslimit \(parameters.opsLimit), memlimit \(parameters.memLimit)) other than those this device last unlocked it with (opslimit \(known.opsLimit), memlimit \(known.memLimit)): refused before deriving anything (an edited header makes every attempt slow). If they were changed on purpose on another device, open it once with --accept-kdf-change"
        )
    }

    /// Records the parameters (written whole to a temporary name, then renamed). Best effort: a
    /// mark that cannot be written only leaves the check off, as for a vault new to the device.
    func record(_ parameters: PasswordHashParameters) {
        if read() == parameters { return }
        let temporary = path + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { return }
        let line = Array("\(parameters.opsLimit) \(parameters.memLimit)\n".utf8)
        let written = write(fd, line, line.count) == line.count && fsync(fd) == 0
        close(fd)
        if !written || rename(temporary, path) != 0 { unlink(temporary) }
    }
}
