import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess

#if canImport(Glibc)
    import Glibc
#endif

/// How a one-shot command (the CLI's verbs, the credential helpers, `run`, `inject`) reaches
/// its vault (docs/service.md): through the keychain service that holds it when one runs (no
/// passphrase, no KDF, no integrity pass), else by opening it itself (`direct`), under a shared
/// `flock` on the vault file. The service holds an exclusive one on the same file, so a command
/// can never write behind a running service through another name of the vault (a hard link, a
/// symlink), and a service cannot start while a command has the vault open.
public enum Doors {
    /// The shared lock, held until this process exits.
    nonisolated(unsafe) private static var sharedLock: Int32 = -1

    public static func open(
        vault: String, directory: String = ServiceLocator.directory(), direct: () throws -> any KeychainDoor
    ) throws -> any KeychainDoor {
        do {
            if let client = try ServiceClient.connect(vault: vault, directory: directory) { return client }
            if let client = ServiceClient.activate(vault: vault, directory: directory) { return client }
        } catch let e as ServiceClient.Unusable {
            throw KeychainError(.io, "the keychain service of \(vault) cannot be used: \(e.description)")
        }
        let fd = Glibc.open(vault, O_RDONLY | O_CLOEXEC)
        // No vault there: opening it directly says so, in the core's words.
        guard fd >= 0 else { return try direct() }
        // A service that has just taken its lock binds its socket a moment later: wait for
        // either, up to 3 s (a mount that runs its own KDF takes longer: the message says so).
        let deadline = Date().addingTimeInterval(3)
        while flock(fd, LOCK_SH | LOCK_NB) != 0 {
            if let client = try? ServiceClient.connect(vault: vault, directory: directory) {
                close(fd)
                return client
            }
            guard Date() < deadline else {
                close(fd)
                throw KeychainError(
                    .io,
                    "the vault \(vault) is held by a keychainfs service whose API socket cannot be reached in \(directory) (is it starting, or was it started with another XDG_RUNTIME_DIR?); try again, or unmount it"
                )
            }
            usleep(20_000)
        }
        if sharedLock >= 0 { close(sharedLock) }
        sharedLock = fd
        return try direct()
    }

    /// Gives up the shared lock of a direct open, once the command is done with the vault
    /// (`run` before it starts its child, which may run for hours).
    public static func closeDirect() {
        if sharedLock >= 0 { close(sharedLock) }
        sharedLock = -1
    }

    /// For a command that opens the vault itself even while a service holds it (the verbs the
    /// API does not carry: import, access-group, dump-keychain, …): SQLite shares its write-ahead
    /// log between the two only when both open the file by the same name (symlinks resolved), so
    /// through another name (a hard link) the command is refused rather than allowed to commit
    /// into a log the service never reads.
    public static func checkDirectOpen(vault: String, directory: String = ServiceLocator.directory()) throws {
        guard let client = try? ServiceClient.connect(vault: vault, directory: directory),
            let (held, _) = try? client.status()
        else { return }
        guard let mine = realpath(vault, nil), let theirs = realpath(held, nil) else { return }
        defer {
            free(mine)
            free(theirs)
        }
        guard strcmp(mine, theirs) != 0 else { return }
        throw KeychainError(
            .io,
            "the vault \(vault) is the file the keychain service (pid \(client.servicePID)) holds as \(held); give --vault \(held) for this command, or stop the service first"
        )
    }
}
