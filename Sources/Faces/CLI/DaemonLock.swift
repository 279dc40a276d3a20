import FoundationEssentials
import Glibc
import SystemPackage

#if canImport(Glibc)
    import Glibc
#endif

/// One daemon per vault *file*: an exclusive flock on the vault file itself, so a hard link,
/// a symlink or another spelling of the path reaches the same lock (a lock file named after
/// the path did not). SQLite locks with fcntl, which is independent of flock on Linux, so the
/// lock never interferes with the store. The lock goes with the daemon, even at kill -9.
struct DaemonLock {
    let descriptor: Int32

    /// Takes the lock, or says which daemon holds it (its pid, from /proc/locks).
    static func acquire(vault path: String) throws -> DaemonLock? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        // No vault there: opening the keychain reports that, in its own words.
        guard fd >= 0 else { return nil }
        // A command that opened the vault itself holds a shared lock for a moment: wait for it
        // (up to 3 s); a service holds its exclusive one for as long as it runs.
        let deadline = Date().addingTimeInterval(3)
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            guard Date() >= deadline else {
                usleep(20_000)
                continue
            }
            let holder = holderPID(of: fd).map(String.init) ?? "unknown"
            close(fd)
            throw CLIError.failure(
                "vault \(path) is already in use by pid \(holder): another keychainfs service (mount or serve), or a command using the vault"
            )
        }
        return DaemonLock(descriptor: fd)
    }

    func release() { close(descriptor) }

    /// The pid holding a flock on the file open at `fd`, from /proc/locks lines such as
    /// `1: FLOCK  ADVISORY  WRITE 4242 fd:01:131075 0 EOF` (device major:minor in hex).
    static func holderPID(of fd: Int32) -> Int32? {
        var st = stat()
        guard fstat(fd, &st) == 0, let table = try? String(contentsOfFile: "/proc/locks", encoding: .utf8) else {
            return nil
        }
        let dev = UInt64(st.st_dev)
        let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & ~UInt64(0xfff))
        let minor = (dev & 0xff) | ((dev >> 12) & ~UInt64(0xff))
        for line in table.split(separator: "\n") {
            let fields = line.split(separator: " ")
            // Blocked waiters carry a "->" field; only the holder's line has FLOCK second.
            guard fields.count >= 6, fields[1] == "FLOCK" else { continue }
            let id = fields[5].split(separator: ":")
            guard id.count == 3, UInt64(id[0], radix: 16) == major, UInt64(id[1], radix: 16) == minor,
                UInt64(id[2]) == UInt64(st.st_ino)
            else { continue }
            return Int32(fields[4])
        }
        return nil
    }
}
