import Foundation
import KeychainCrypto

/// The highest commit counter this device has seen for one vault: one file per vault id in
/// `rollback/` beside the device key (directory 0700, file 0600), holding the counter as 20
/// decimal digits and a newline. Raised after every commit and at every unlock; a vault whose
/// authenticated counter is lower has been rolled back to an older copy of itself.
///
/// The file is rewritten in place with one fixed-size `pwrite` under `flock`, so concurrent
/// writers (a daemon and a CLI) never lose a raise to a torn file, and a mark is only ever
/// raised after the commit that reached it is durable: the mark never runs ahead of the vault,
/// so it cannot refuse an honest vault. A mark lost in a crash is only lower (weaker), never
/// wrong. Not fsynced for the same reason.
struct RollbackMark: Sendable {
    let path: String

    init(deviceKeyPath: String, vaultID: [UInt8]) {
        let hex = vaultID.map { String(format: "%02x", $0) }.joined()
        path = KeychainPaths.parent(of: deviceKeyPath) + "/rollback/" + hex
    }

    private static let recordBytes = 21

    /// The mark, or nil when this device has none for the vault (a vault new to this
    /// machine) or it cannot be read (then nothing is refused: an attacker who can write the
    /// state directory can remove it anyway).
    func read() -> Int64? {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        flock(fd, LOCK_SH)
        return Self.value(fd)
    }

    /// Raises the mark to `counter` (never lowers it). Best effort: the commit it follows has
    /// happened whatever this does.
    func raise(to counter: Int64) {
        try? update { current in max(current ?? counter, counter) }
    }

    /// Sets the mark to `counter`, also lowering it: `--accept-rollback`.
    func reset(to counter: Int64) throws {
        try update { _ in counter }
    }

    private func update(_ next: (Int64?) -> Int64) throws {
        let dir = KeychainPaths.parent(of: path)
        if !FileManager.default.fileExists(atPath: dir) {
            try FileManager.default.createDirectory(
                atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        }
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            throw KeychainError(.io, "cannot open the rollback mark \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        flock(fd, LOCK_EX)
        let current = Self.value(fd)
        let value = next(current)
        if value == current { return }
        let record = Array(String(format: "%020lld\n", value).utf8)
        guard pwrite(fd, record, record.count, 0) == record.count else {
            throw KeychainError(.io, "cannot write the rollback mark \(path): \(String(cString: strerror(errno)))")
        }
    }

    private static func value(_ fd: Int32) -> Int64? {
        var buffer = [UInt8](repeating: 0, count: recordBytes)
        guard pread(fd, &buffer, recordBytes, 0) == recordBytes, buffer.last == 10 else { return nil }
        return Int64(String(decoding: buffer.dropLast(), as: UTF8.self))
    }
}
