import FoundationEssentials
import Glibc
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
        guard parameters.isAtLeastInteractive && parameters.isAtMostSensitive else {
            throw KeychainError(.param, "Argon2id parameters must lie between INTERACTIVE and SENSITIVE")
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
            let manifestKeys = try ManifestKeys(master: master)
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
                try vault.setMeta(
                    "manifest", try AuthenticatedState.read(from: vault).encode(Manifest.empty, keys: manifestKeys))
            }
            let keychain = Keychain(path: path, store: store, header: header, deviceKeyPath: deviceKeyPath)
            try keychain.unlock(master: master, header: header)
            KDFMark(rollbackMark: keychain.rollbackMark).record(parameters)
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

    /// Unlocks with the passphrase: unwraps the class keys, verifies the manifest, and checks
    /// the commit counter against this device's rollback mark. A vault of an older format is
    /// migrated first, in one transaction. `acceptRollback`: a vault older than the mark is accepted
    /// (restored from a backup on purpose) and the mark reset to it. `incrementalCheck`: the rows
    /// are checked bucket by bucket after the unlock returns (Keychain+IncrementalCheck.swift)
    /// instead of all of them before; the mount's daemon asks for it.
    public func unlock(
        passphrase: SecureBytes, acceptRollback: Bool = false, acceptKDFChange: Bool = false,
        incrementalCheck: Bool = false
    ) throws {
        let master = try masterKey(
            passphrase: passphrase, acceptRollback: acceptRollback, acceptKDFChange: acceptKDFChange)
        try unlock(
            master: master, header: state.withLock { $0.header }, acceptRollback: acceptRollback,
            incremental: incrementalCheck)
    }

    /// Bytes of the master key `masterKey(passphrase:)` returns and `unlock(masterKey:)` takes.
    public static let masterKeyBytes = 32

    /// The one Argon2id of an unlock, on its own: derives the key-encryption key, unwraps the
    /// master key (a wrong passphrase is errSecAuthFailed, as `unlock` says it), and migrates a
    /// vault of an older format (which needs the KEK). Checks nothing else and keeps nothing:
    /// `mount` calls it in the CLI and hands the key to its daemon (`unlock(masterKey:)`), so
    /// the passphrase is stretched once per mount. The key is in guarded memory; the caller
    /// drops it as soon as it has handed it on.
    ///
    /// Parameters other than those this device last unlocked the vault with are refused before
    /// the Argon2id runs, unless `acceptKDFChange` (KDFMark.swift).
    public func masterKey(passphrase: SecureBytes, acceptRollback: Bool = false, acceptKDFChange: Bool = false)
        throws -> SecureBytes
    {
        let header = try refreshedHeader()
        let kdfMark = KDFMark(rollbackMark: rollbackMark)
        try kdfMark.check(header.parameters, vault: path, accepting: acceptKDFChange)
        let kek = try header.keyEncryptionKey(passphrase: passphrase)
        let master = try header.openMaster(kek: kek)
        // They unwrapped the master key: the passphrase holder set them.
        kdfMark.record(header.parameters)
        if header.format < VaultHeader.formatVersion {
            _ = try migrate(
                master: master, kek: kek,
                metadataKey: try KeyDerivation.subkey(
                    of: master, id: Subkey.metadata.rawValue, context: Subkey.context),
                acceptRollback: acceptRollback)
        }
        return master
    }

    /// Unlocks with a master key `masterKey(passphrase:)` returned (in this process or the
    /// mount's CLI): everything `unlock(passphrase:)` checks but the Argon2id. A key that is
    /// not this vault's fails the manifest's tag and is refused as the integrity check's
    /// failure; a vault of an older format is refused (the passphrase path migrates it first).
    public func unlock(masterKey: SecureBytes, acceptRollback: Bool = false, incrementalCheck: Bool = false) throws {
        guard masterKey.count == Self.masterKeyBytes else {
            throw KeychainError(.param, "a master key is \(Self.masterKeyBytes) bytes, not \(masterKey.count)")
        }
        let header = try refreshedHeader()
        guard header.format >= VaultHeader.formatVersion else {
            throw KeychainError(
                .decode, "vault \(path) is in format \(header.format): unlock it with the passphrase once to migrate it"
            )
        }
        try unlock(master: masterKey, header: header, acceptRollback: acceptRollback, incremental: incrementalCheck)
    }

    /// Reads the header from the file again (a passphrase change by another process
    /// rewrites it) and keeps it.
    func refreshedHeader() throws -> VaultHeader {
        let fresh = try storeCall { try store.read { try VaultHeader.read(from: $0) } }
        state.withLock { $0.header = fresh }
        return fresh
    }

    /// Unlocks with the master key unwrapped from the header. Everything is checked in one
    /// snapshot: the class keys first (so a damaged one is named), then the manifest's tag,
    /// which covers every header field, so an edited `device_key_id` reads as tampering and
    /// never as "another machine"; nothing is kept unless all of it verifies. `incremental`: the
    /// snapshot checks the bucket table, not the rows, and a background pass starts on the rows.
    func unlock(master: SecureBytes, header _: VaultHeader, acceptRollback: Bool = false, incremental: Bool = false)
        throws
    {
        let manifestKeys = try ManifestKeys(master: master)
        let metadata = try KeyDerivation.subkey(of: master, id: Subkey.metadata.rawValue, context: Subkey.context)
        let device = try DeviceKey.load(at: deviceKeyPath)
        // Before the snapshot is taken (see highestCounterSeen).
        let seen = highestCounterSeen()
        var classKeys: [Accessibility: SecureBytes] = [:]
        var deviceMatches = false
        // Brackets the snapshot (see readVerifyingTable): the unlock checked the bucket table in
        // it (and, the full check, the name lists' table), and the first bucket's check (or
        // listing) need not fold it again.
        let stampBefore = try? store.changeStamp()
        let (manifest, authenticated) = try verifyManifest(
            keys: manifestKeys, metadataKey: metadata, incremental: incremental
        ) { state in
            deviceMatches = device.map { DeviceKey.identifier(of: $0) == state.header.deviceKeyID } ?? false
            classKeys = try Self.openClassKeys(
                state, master: master, device: deviceMatches ? device : nil)
        }
        try refuseRollback(manifest.counter, seen: seen, accepting: acceptRollback)
        let header = authenticated.header
        let newKeys = Keys(
            metadata: metadata,
            index: try KeyDerivation.subkey(of: master, id: Subkey.index.rawValue, context: Subkey.context),
            attributeIndex: try KeyDerivation.subkey(
                of: master, id: Subkey.attributeIndex.rawValue, context: Subkey.context),
            manifest: manifestKeys, classKeys: classKeys, deviceMismatch: !deviceMatches,
            policyPublicKey: try Self.policyKeyPair(master: master).0)
        let unlockObservers = state.withLock {
            $0.header = header
            $0.keys = newKeys
            $0.lockState = .unlocked(since: Date())
            return $0.unlockObservers
        }
        defer { for observer in unlockObservers { observer() } }
        // The sync group's keys (Sync/): a root key that does not open leaves sync off and is
        // reported by `sync status`; the vault itself unlocks.
        sync.noteProblem(nil)
        do { try loadSync(keys: newKeys) } catch { sync.noteProblem("\(error)") }
        noteCounter(manifest.counter)
        // Durable at every unlock (RollbackMark): what this device has seen survives a power loss.
        rollbackMark.makeDurable()
        startIntegrityProgress(complete: !incremental)
        if let stampBefore, stampBefore == (try? store.changeStamp()) {
            state.withLock {
                $0.integrity.tableVerifiedAt = stampBefore
                if !incremental { $0.integrity.namesVerifiedAt = stampBefore }
            }
        }
    }

    /// Every class key of `state` that can be opened: all of them, less the ThisDeviceOnly ones
    /// when `device` is nil (another machine, or no device key). A missing or unauthentic one
    /// is named.
    static func openClassKeys(_ state: AuthenticatedState, master: SecureBytes, device: SecureBytes?) throws
        -> [Accessibility: SecureBytes]
    {
        var classKeys: [Accessibility: SecureBytes] = [:]
        for protection in Accessibility.allCases {
            if protection.isThisDeviceOnly && device == nil { continue }
            guard let box = state.classKeys[protection.rawValue],
                let wrapKey = try classWrapKey(master: master, device: device, protection)
            else {
                throw KeychainError(.decode, "vault is damaged: the \(protection.name) class key is missing")
            }
            do {
                classKeys[protection] = try AEAD.openKey(
                    box, associatedData: classKeyAssociatedData(vaultID: state.header.vaultID, protection),
                    key: wrapKey)
            } catch {
                throw KeychainError(.decode, "vault is damaged: the \(protection.name) class key does not authenticate")
            }
        }
        return classKeys
    }

    /// Locks: drops the class keys of WhenUnlocked-type classes. Attributes and
    /// AfterFirstUnlock data stay available (Apple's behaviour after first unlock).
    public func lock() {
        let observers = state.withLock { s -> [@Sendable () -> Void]? in
            guard var keys = s.keys, case .unlocked = s.lockState else { return nil }
            for protection in Accessibility.allCases where !protection.readableWhileLocked {
                keys.classKeys[protection] = nil
            }
            s.keys = keys
            s.lockState = .locked(since: Date())
            return s.lockObservers
        }
        guard let observers else { return }
        // The sync group's record keys go with the whenUnlocked class key (Sync/SyncContext.swift).
        sync.lockDown()
        for observer in observers { observer() }
    }

    /// `observer` is called (on the locking thread, after the class keys are gone) by every
    /// lock that found the vault unlocked: a face that holds decrypted secrets of its own (the
    /// mount's open handles) drops them there.
    public func onLock(_ observer: @escaping @Sendable () -> Void) {
        state.withLock { $0.lockObservers.append(observer) }
    }

    /// `observer` is called (on the unlocking thread, at the end of the unlock) by every unlock.
    public func onUnlock(_ observer: @escaping @Sendable () -> Void) {
        state.withLock { $0.unlockObservers.append(observer) }
    }

    /// Calls `observer` after every commit of this process that changed items, with the
    /// changes, on the committing thread, after the commit and before its writers return: so a
    /// face that shows the vault (the mount) has dropped what it showed before any writer's
    /// caller can look again. An observer must be quick and must not write to the vault. Once
    /// `followOtherProcesses()` was called, also after each commit of another process, on the
    /// vault watch's thread (ForeignCommits.swift).
    public func onCommit(_ observer: @escaping @Sendable ([ItemChange]) -> Void) {
        state.withLock { $0.commitObservers.append(observer) }
    }

    /// Calls `observer` on each writer's own thread, with the changes its own write made, after
    /// its commit and every `onCommit` observer of it, just before the write returns: where a
    /// face may wait (bounded) for what it does about a change to be done before the writer's
    /// caller is answered (the mount's replay to its watchers). Not called for a write that
    /// changed no item. The writer's thread holds no lock of the core there.
    public func beforeWriterReturns(_ observer: @escaping @Sendable ([ItemChange]) -> Void) {
        state.withLock { $0.returnObservers.append(observer) }
    }

    public var lockState: LockState { state.withLock { $0.lockState } }

    /// Changes the passphrase (and optionally the KDF parameters). Only the master-key wrap
    /// changes: no item is re-encrypted. One write transaction, so the manifest (whose tag
    /// covers the header) is re-tagged with it; a format-1 vault is migrated first.
    public func changePassphrase(old: SecureBytes, new: SecureBytes, parameters: PasswordHashParameters? = nil) throws {
        var current = try refreshedHeader()
        let kdfMark = KDFMark(rollbackMark: rollbackMark)
        try kdfMark.check(current.parameters, vault: path, accepting: false)
        let kek = try current.keyEncryptionKey(passphrase: old)
        let master = try current.openMaster(kek: kek)
        if let parameters {
            guard parameters.isAtLeastInteractive && parameters.isAtMostSensitive else {
                throw KeychainError(.param, "Argon2id parameters must lie between INTERACTIVE and SENSITIVE")
            }
        }
        guard new.count > 0 else { throw KeychainError(.param, "the new passphrase is empty") }
        if current.format < VaultHeader.formatVersion {
            current = try migrate(
                master: master, kek: kek,
                metadataKey: try KeyDerivation.subkey(of: master, id: Subkey.metadata.rawValue, context: Subkey.context)
            )
        }
        var newHeader = current
        if let parameters { newHeader.parameters = parameters }
        try VaultHeader.wrapMaster(master, header: &newHeader, passphrase: new)
        try writeTransaction(keys: try ManifestKeys(master: master)) { try newHeader.write(to: $0) }
        state.withLock { $0.header = newHeader }
        kdfMark.record(newHeader.parameters)
    }

    /// Checks a passphrase without changing anything (devicePasscode prompts).
    public func verifyPassphrase(_ passphrase: SecureBytes) throws {
        _ = try refreshedHeader().unwrapMaster(passphrase: passphrase)
    }

    public var kdfParameters: PasswordHashParameters { state.withLock { $0.header.parameters } }
}
