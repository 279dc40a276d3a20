import FoundationEssentials
import Glibc
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Every vault this process opened, so that none of its commits is left only in the WAL when
/// the process ends by `exit` (the CLI, the credential helpers, the service): a plain copy of a
/// closed vault file, the most common backup, is then whole, where before it lacked the last
/// commits and opened as a rollback. `exit` runs no deinitializer, so SQLite's own checkpoint
/// at the last close never ran; an `atexit` handler, installed with the first vault, checkpoints
/// each one still open without waiting for other processes' readers.
public enum OpenStores {
    private final class Entry: Sendable {
        weak let store: VaultStore?
        init(_ store: VaultStore) { self.store = store }
    }
    private static let entries = Mutex<(list: [Entry], handlerInstalled: Bool)>(([], false))

    static func register(_ store: VaultStore) {
        let install = entries.withLock { state -> Bool in
            state.list.removeAll { $0.store == nil }
            state.list.append(Entry(store))
            defer { state.handlerInstalled = true }
            return !state.handlerInstalled
        }
        if install { atexit { OpenStores.checkpointAll() } }
    }

    /// Checkpoints every vault still open (also what the exit handler runs).
    public static func checkpointAll() {
        let stores = entries.withLock { $0.list.compactMap(\.store) }
        for store in stores { store.checkpointWithoutWaiting() }
    }
}
