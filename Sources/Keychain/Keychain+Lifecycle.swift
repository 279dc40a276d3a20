import Foundation
import KeychainCrypto
import KeychainStore

// Creating and opening a vault, unlocking, locking, changing the passphrase.

extension Keychain {
    // MARK: Creating, opening, locking

    /// Creates a new vault at `path` (refusing to overwrite anything) and returns it unlocked.
    public static func create(
        at path: String, passphrase: SecureBytes, parameters: PasswordHashParameters = .moderate,
        deviceKeyPath: String = KeychainPaths.deviceKey()
    ) throws -> Keychain {
        guard parameters.isAtLeastInteractive else {
            throw KeychainError(.param, "Argon2id parameters below INTERACTIVE are not allowed")
        }
        guard passphrase.count > 0 else { throw KeychainError(.param, "the passphrase is empty") }
        if FileManager.default.fileExists(atPath: path) {
            throw KeychainError(.duplicateKeychain, "a file already exists at \(path); refusing to overwrite it")
        }
        let store: VaultStore
        do { store = try VaultStore.create(at: path) } catch { throw mapStoreError(error, path: path) }
        do {
            let device = try DeviceKey.loadOrCreate(at: deviceKeyPath)
            let master = try SecureBytes.random()
            var header = VaultHeader(
                format: VaultHeader.formatVersion, vaultID: Sodium.randomBytes(16),
                parameters: parameters, salt: [], wrappedMaster: [],
                deviceKeyID: DeviceKey.identifier(of: device))
            try VaultHeader.wrapMaster(master, header: &header, passphrase: passphrase)
            try store.write { vault in
                try header.write(to: vault)
                for protection in Accessibility.allCases {
                    let classKey = try SecureBytes.random()
                    let wrapKey = try classWrapKey(master: master, device: device, protection)!
                    let wrapped = try classKey.withUnsafeBytes {
                        try AEAD.seal(
                            $0, associatedData: classKeyAssociatedData(vaultID: header.vaultID, protection),
                            key: wrapKey)
                    }
                    try vault.setClassKey(protection.rawValue, wrapped: wrapped)
                }
                try vault.setMeta("manifest", Manifest.empty.encoded)
            }
            let keychain = Keychain(path: path, store: store, header: header, deviceKeyPath: deviceKeyPath)
            try keychain.unlock(master: master, header: header)
            return keychain
        } catch {
            for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) }
            throw error
        }
    }

    /// Opens an existing vault, locked. Checks that it is a vault of a version we read.
    public static func open(at path: String, deviceKeyPath: String = KeychainPaths.deviceKey()) throws -> Keychain {
        let store: VaultStore
        do { store = try VaultStore.open(at: path) } catch { throw mapStoreError(error, path: path) }
        let header: VaultHeader
        do { header = try store.read { try VaultHeader.read(from: $0) } } catch let e as KeychainError { throw e } catch
        {
            throw mapStoreError(error, path: path)
        }
        return Keychain(path: path, store: store, header: header, deviceKeyPath: deviceKeyPath)
    }

    /// Unlocks with the passphrase: unwraps the class keys and verifies the manifest.
    public func unlock(passphrase: SecureBytes) throws {
        let header = try refreshedHeader()
        try unlock(master: try header.unwrapMaster(passphrase: passphrase), header: header)
    }

    /// Reads the header from the file again (a passphrase change by another process
    /// rewrites it) and keeps it.
    func refreshedHeader() throws -> VaultHeader {
        let fresh = try storeCall { try store.read { try VaultHeader.read(from: $0) } }
        state.withLock { $0.header = fresh }
        return fresh
    }

    /// Unlocks with the master key unwrapped from `header` (the one just read or written).
    func unlock(master: SecureBytes, header: VaultHeader) throws {
        let device = try DeviceKey.load(at: deviceKeyPath)
        let deviceMatches = device.map { DeviceKey.identifier(of: $0) == header.deviceKeyID } ?? false
        let wrapped = try storeCall { try store.lookup { try $0.classKeys() } }
        var classKeys: [Accessibility: SecureBytes] = [:]
        for protection in Accessibility.allCases {
            if protection.isThisDeviceOnly && !deviceMatches { continue }
            guard let box = wrapped[protection.rawValue],
                let wrapKey = try classWrapKey(master: master, device: device, protection)
            else {
                throw KeychainError(.decode, "vault is damaged: the \(protection.name) class key is missing")
            }
            do {
                classKeys[protection] = try AEAD.openKey(
                    box, associatedData: classKeyAssociatedData(vaultID: header.vaultID, protection), key: wrapKey)
            } catch {
                throw KeychainError(.decode, "vault is damaged: the \(protection.name) class key does not authenticate")
            }
        }
        let newKeys = Keys(
            metadata: try KeyDerivation.subkey(of: master, id: Subkey.metadata.rawValue, context: Subkey.context),
            index: try KeyDerivation.subkey(of: master, id: Subkey.index.rawValue, context: Subkey.context),
            manifest: try KeyDerivation.subkey(of: master, id: Subkey.manifest.rawValue, context: Subkey.context),
            classKeys: classKeys, deviceMismatch: !deviceMatches,
            policyPublicKey: try Self.policyKeyPair(master: master).0)
        try verifyManifest(keys: newKeys)
        state.withLock {
            $0.keys = newKeys
            $0.lockState = .unlocked(since: Date())
        }
    }

    /// Locks: drops the class keys of WhenUnlocked-type classes. Attributes and
    /// AfterFirstUnlock data stay available (Apple's behaviour after first unlock).
    public func lock() {
        state.withLock {
            guard var keys = $0.keys, case .unlocked = $0.lockState else { return }
            for protection in Accessibility.allCases where !protection.readableWhileLocked {
                keys.classKeys[protection] = nil
            }
            $0.keys = keys
            $0.lockState = .locked(since: Date())
        }
    }

    public var lockState: LockState { state.withLock { $0.lockState } }

    /// Changes the passphrase (and optionally the KDF parameters). Only the master-key wrap
    /// changes: no item is re-encrypted.
    public func changePassphrase(old: SecureBytes, new: SecureBytes, parameters: PasswordHashParameters? = nil) throws {
        let current = try refreshedHeader()
        let master = try current.unwrapMaster(passphrase: old)
        var newHeader = current
        if let parameters {
            guard parameters.isAtLeastInteractive else {
                throw KeychainError(.param, "Argon2id parameters below INTERACTIVE are not allowed")
            }
            newHeader.parameters = parameters
        }
        guard new.count > 0 else { throw KeychainError(.param, "the new passphrase is empty") }
        try VaultHeader.wrapMaster(master, header: &newHeader, passphrase: new)
        try storeCall { try store.write { try newHeader.write(to: $0) } }
        state.withLock { $0.header = newHeader }
    }

    /// Checks a passphrase without changing anything (devicePasscode prompts).
    public func verifyPassphrase(_ passphrase: SecureBytes) throws {
        _ = try refreshedHeader().unwrapMaster(passphrase: passphrase)
    }

    public var kdfParameters: PasswordHashParameters { state.withLock { $0.header.parameters } }
}
