import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore
import Synchronization

/// Where the keychain is in its lock cycle.
public enum LockState: Equatable, Sendable {
    /// Opened without a passphrase: nothing is readable, not even attributes.
    case neverUnlocked
    case unlocked(since: Date)
    /// Locked again: WhenUnlocked data is unreadable; AfterFirstUnlock data and all
    /// attributes stay available, as on iOS.
    case locked(since: Date)
}

/// The keychain core: Apple's SecItem semantics (add, copyMatching, update, delete) over an
/// encrypted vault file. The only place keychain rules live; front ends translate to it.
/// Thread-safe: the daemon calls it from many FUSE threads at once. Its mutable state is one
/// `Mutex<State>`; the store serialises its own connection.
public final class Keychain: Sendable {
    /// Largest secret accepted (errSecDataTooLarge above it).
    public static let maxDataSize = 1 << 20
    /// Largest single attribute value (the xattr value limit).
    public static let maxAttributeSize = 64 << 10

    public let path: String
    /// The rows, behind the narrow protocol a sync backend could also implement.
    let store: any ItemStore
    let deviceKeyPath: String
    /// This device's highest commit counter seen for this vault.
    let rollbackMark: RollbackMark
    /// Never changes for the life of a vault; bound into every associated data.
    let vaultID: [UInt8]

    /// Keys held while the vault is (or was) unlocked. A value: a call works with the keys as
    /// they were when it began (see `CallContext`); `lock()` installs a copy without the
    /// WhenUnlocked class keys.
    struct Keys: Sendable {
        let metadata: SecureBytes
        let index: SecureBytes
        /// Keys the attribute index's tags (Keychain+AttributeIndex.swift), used for nothing else.
        let attributeIndex: SecureBytes
        let manifest: ManifestKeys
        var classKeys: [Accessibility: SecureBytes]
        /// ThisDeviceOnly class keys could not be opened because the device key differs.
        let deviceMismatch: Bool
        /// Verifies the access policy's signature (the signing half needs the passphrase).
        let policyPublicKey: [UInt8]
    }

    /// Everything that changes after open, guarded together.
    struct State {
        /// The header as last read or written; re-read at unlock so another process's
        /// passphrase change is seen.
        var header: VaultHeader
        var keys: Keys?
        var lockState: LockState = .neverUnlocked
        /// The highest commit counter this object has seen or committed: a vault file replaced
        /// by an older copy while it is open is refused at the next write.
        var highestCounterSeen: Int64 = 0
        /// Told about each row skipped because it fails its own check (see `onDamagedRow`).
        var damagedRowObserver: (@Sendable (DamagedRow) -> Void)?
        /// Told after each lock (see `onLock`).
        var lockObservers: [@Sendable () -> Void] = []
        /// Told after each unlock (see `onUnlock`).
        var unlockObservers: [@Sendable () -> Void] = []
        /// Told after each commit, with its changes (see `onCommit`).
        var commitObservers: [@Sendable ([ItemChange]) -> Void] = []
        var returnObservers: [@Sendable ([ItemChange]) -> Void] = []
        /// Told after each write another process made to the vault file (see `onOtherProcessWrite`).
        var otherWriteObservers: [@Sendable () -> Void] = []
        /// Which of the manifest's buckets this unlock has verified (Keychain+IncrementalCheck.swift).
        var integrity = IntegrityProgress()
    }

    let state: Mutex<State>
    /// Write transactions waiting to be committed together (group commit).
    let commitQueue = CommitQueue()
    /// Rows read less than a second ago, for reads that accept that (RecentRows.swift).
    let recentRows = RecentRows()
    /// The ssh agent's key listings by access groups, while the vault has not changed
    /// (Keychain+SSHIdentities.swift).
    let sshListings = SSHListings()
    /// The commits of other processes, once followed (ForeignCommits.swift).
    let foreignCommits = ForeignCommits()
    /// The sync group's keys, device id and clock, once unlocked (Sync/SyncContext.swift).
    let sync = SyncContext()

    init(path: String, store: any ItemStore, header: VaultHeader, deviceKeyPath: String) {
        self.vaultID = header.vaultID
        self.path = path
        self.store = store
        self.deviceKeyPath = deviceKeyPath
        self.rollbackMark = RollbackMark(deviceKeyPath: deviceKeyPath, vaultID: header.vaultID)
        self.state = Mutex(State(header: header))
    }

    deinit { foreignCommits.stopFollowing() }

    /// What one call works with, read in one lock grab: who is asking (the given caller or
    /// the default one) and the keys as they were at that moment. Calls that nest others
    /// (rename → update, identityBundle → identity → reads) pass theirs down, so no decision
    /// mixes state read at two different times.
    struct CallContext: Sendable {
        let caller: Caller
        private let keys: Keys?

        init(caller: Caller, keys: Keys?) {
            self.caller = caller
            self.keys = keys
        }

        /// The keys, or errSecInteractionNotAllowed before the first unlock.
        func unlockedKeys() throws -> Keys {
            guard let keys else {
                throw KeychainError(.interactionNotAllowed, "the keychain has not been unlocked since it was opened")
            }
            return keys
        }

        /// The same moment's keys, for another caller (one carrying presence grants).
        func with(caller: Caller) -> CallContext { CallContext(caller: caller, keys: keys) }
    }

    func callContext(_ callerArgument: Caller?) -> CallContext {
        state.withLock { CallContext(caller: callerArgument ?? .default, keys: $0.keys) }
    }

    func currentKeys() throws -> Keys {
        try callContext(nil).unlockedKeys()
    }

    func storeCall<R>(_ body: () throws -> R) throws -> R {
        do { return try body() } catch let e as KeychainError { throw e } catch {
            throw Self.mapStoreError(error, path: path)
        }
    }

    static func mapStoreError(_ error: any Error, path: String) -> KeychainError {
        switch error {
        case let e as KeychainError: return e
        case StoreError.noSuchFile(let p): return KeychainError(.noSuchKeychain, "no vault at \(p)")
        case StoreError.notAVault(let why): return KeychainError(.decode, "\(path) is not a keychainfs vault (\(why))")
        case StoreError.newerFormat(let found, let supported):
            return KeychainError(
                .unimplemented,
                "vault \(path) has schema version \(found), newer than this keychainfs supports (\(supported)); upgrade keychainfs"
            )
        case StoreError.busy:
            return KeychainError(.notAvailable, "vault \(path) is busy: another process held it for more than 30 s")
        case StoreError.duplicate: return KeychainError(.duplicateItem, "duplicate item")
        case StoreError.sqlite(let code, let message):
            return KeychainError(.io, "vault \(path): SQLite error \(code): \(message)")
        // Never the raw value: it could carry SQLite's or a library's internals.
        default: return KeychainError(.io, "vault \(path): internal failure (\(type(of: error)))")
        }
    }
}
