import Foundation
import KeychainCrypto
import KeychainStore

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
/// Thread-safe: the daemon calls it from many FUSE threads at once.
public final class Keychain: @unchecked Sendable {
    // @unchecked: mutable state (`keys`, `state`) is only touched with `stateLock` held;
    // the store serialises its own connection.

    /// Largest secret accepted (errSecDataTooLarge above it).
    public static let maxDataSize = 1 << 20
    /// Largest single attribute value (the xattr value limit).
    public static let maxAttributeSize = 64 << 10

    public let path: String
    let store: VaultStore
    /// The header as last read or written; re-read at unlock so another process's
    /// passphrase change is seen. Guarded by `stateLock`.
    var header: VaultHeader
    let deviceKeyPath: String

    /// Keys held while the vault is (or was) unlocked.
    final class Keys: @unchecked Sendable {
        let metadata: SecureBytes
        let index: SecureBytes
        let manifest: SecureBytes
        var classKeys: [Accessibility: SecureBytes]
        /// ThisDeviceOnly class keys could not be opened because the device key differs.
        let deviceMismatch: Bool
        /// Verifies the access policy's signature (the signing half needs the passphrase).
        let policyPublicKey: [UInt8]
        init(metadata: SecureBytes, index: SecureBytes, manifest: SecureBytes,
             classKeys: [Accessibility: SecureBytes], deviceMismatch: Bool, policyPublicKey: [UInt8]) {
            self.metadata = metadata; self.index = index; self.manifest = manifest
            self.classKeys = classKeys; self.deviceMismatch = deviceMismatch; self.policyPublicKey = policyPublicKey
        }
    }

    let stateLock = NSLock()
    var keys: Keys?
    private var defaultCallerValue = Caller.default

    /// The caller assumed when a call names none: `default` unless the front end says
    /// otherwise (the CLI, holding the passphrase, acts in every group of the policy).
    public var defaultCaller: Caller {
        get { stateLock.withLock { defaultCallerValue } }
        set { stateLock.withLock { defaultCallerValue = newValue } }
    }
    var state: LockState = .neverUnlocked

    /// Never changes for the life of a vault; bound into every associated data.
    let vaultID: [UInt8]

    init(path: String, store: VaultStore, header: VaultHeader, deviceKeyPath: String) {
        self.vaultID = header.vaultID
        self.path = path
        self.store = store
        self.header = header
        self.deviceKeyPath = deviceKeyPath
    }

    func currentKeys() throws -> Keys {
        try stateLock.withLock {
            guard let keys else {
                throw KeychainError(.interactionNotAllowed, "the keychain has not been unlocked since it was opened")
            }
            return keys
        }
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
            return KeychainError(.unimplemented, "vault \(path) has schema version \(found), newer than this keychainfs supports (\(supported)); upgrade keychainfs")
        case StoreError.busy: return KeychainError(.notAvailable, "vault \(path) is busy: another process held it for more than 30 s")
        case StoreError.duplicate: return KeychainError(.duplicateItem, "duplicate item")
        case StoreError.sqlite(let code, let message): return KeychainError(.io, "vault \(path): SQLite error \(code): \(message)")
        default: return KeychainError(.io, "vault \(path): \(error)")
        }
    }
}
