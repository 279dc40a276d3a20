import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

// `passwd --rotate`: a new master key, new class keys, every item key and attribute box
// re-encrypted, in one transaction.

extension Keychain {
    /// Rotates the master key: a new random master key wrapped under `new` (the old
    /// passphrase's wrap is gone), new random class keys, every item key re-wrapped under its
    /// new class key, every attribute box re-sealed and every index re-made under the new
    /// subkeys, the access policy re-encrypted and re-signed, and a manifest under the new
    /// manifest keys — all in one SQLite transaction, so a crash (or kill -9) at any point
    /// leaves either the old vault or the new one. Secret data boxes are kept: each is
    /// protected by its item key, which is now reachable only through the new class keys.
    /// Someone holding an old copy of the file and the old passphrase can still read what that
    /// copy holds, but nothing written after the rotation.
    ///
    /// Needs this vault's device key (the ThisDeviceOnly class keys are re-made too). A daemon
    /// that has the vault mounted holds the old keys: unmount first, or unlock it again.
    public func rotateMasterKey(old: SecureBytes, new: SecureBytes, parameters: PasswordHashParameters? = nil) throws {
        var current = try refreshedHeader()
        let kek = try current.keyEncryptionKey(passphrase: old)
        let oldMaster = try current.openMaster(kek: kek)
        if let parameters, !(parameters.isAtLeastInteractive && parameters.isAtMostSensitive) {
            throw KeychainError(.param, "Argon2id parameters must lie between INTERACTIVE and SENSITIVE")
        }
        guard new.count > 0 else { throw KeychainError(.param, "the new passphrase is empty") }
        if current.format < VaultHeader.formatVersion {
            current = try migrate(
                master: oldMaster, kek: kek,
                metadataKey: try KeyDerivation.subkey(
                    of: oldMaster, id: Subkey.metadata.rawValue, context: Subkey.context))
        }
        let device = try DeviceKey.load(at: deviceKeyPath)
        guard let device, DeviceKey.identifier(of: device) == current.deviceKeyID else {
            throw KeychainError(
                .interactionNotAllowed,
                "rotating the master key needs this vault's device key (its ThisDeviceOnly class keys are re-made), and it is not on this machine"
            )
        }
        let oldKeys = try Self.keys(master: oldMaster, device: device)
        let newMaster = try SecureBytes.random()
        var newHeader = current
        if let parameters { newHeader.parameters = parameters }
        try VaultHeader.wrapMaster(newMaster, header: &newHeader, passphrase: new)
        var newClassKeys: [Accessibility: SecureBytes] = [:]
        for protection in Accessibility.allCases { newClassKeys[protection] = try SecureBytes.random() }
        let newKeys = try Self.keys(master: newMaster, device: device, classKeys: newClassKeys)

        let counter = try storeCall {
            try store.write { vault -> Int64 in
                let before = try AuthenticatedState.read(from: vault)
                let manifest = try before.verified(try vault.meta("manifest"), keys: oldKeys.manifest)
                let found = try Manifest.bucketTally(vault, key: oldKeys.manifest.entry).0
                let table = try Manifest.bucketTableMismatch(
                    vault, try ManifestBuckets.stored(vault), expected: manifest, key: oldKeys.manifest.entry)
                if let problem = Manifest.mismatch(found: found, expected: manifest) ?? table {
                    throw KeychainError(.decode, "vault integrity check failed: \(problem); nothing was rotated")
                }
                try refuseRollback(manifest.counter, accepting: false)
                let oldClassKeys = try Self.openClassKeys(before, master: oldMaster, device: device)
                try newHeader.write(to: vault)
                for (protection, classKey) in newClassKeys {
                    let wrapKey = try classWrapKey(master: newMaster, device: device, protection)!
                    let wrapped = try classKey.withUnsafeBytes {
                        try AEAD.seal(
                            $0, associatedData: classKeyAssociatedData(vaultID: current.vaultID, protection),
                            key: wrapKey)
                    }
                    try vault.setClassKey(protection.rawValue, wrapped: wrapped)
                }
                var rows: [StoredItem] = []
                try vault.forEachItem { rows.append($0) }
                for row in rows {
                    try vault.replace(try rekeyed(row, oldKeys: oldKeys, oldClassKeys: oldClassKeys, newKeys: newKeys))
                }
                if let blob = try vault.meta("access_policy") {
                    guard
                        let policy = openPolicy(blob, publicKey: oldKeys.policyPublicKey, metadataKey: oldKeys.metadata)
                    else { throw KeychainError(.decode, "the access policy does not verify: nothing was rotated") }
                    let signingKey = try Self.policyKeyPair(master: newMaster).1
                    try vault.setMeta(
                        "access_policy", try sealedPolicy(policy, metadataKey: newKeys.metadata, signingKey: signingKey)
                    )
                }
                // The name lists sealed under the new metadata key, then the buckets under the new
                // entry key (the name lists' with them), written anew.
                try NameLists(vaultID: current.vaultID, keys: newKeys.manifest).rebuild(in: vault)
                // The change log's boxes, sealed anew under the new metadata key with the same
                // numbers: a watcher resumes across a rotation (ChangeLog.swift).
                try ChangeLog.reseal(in: vault, vaultID: current.vaultID, from: oldKeys.metadata, to: newKeys.metadata)
                // The sync group's root key and the outbox's tombstones (Sync/SyncRotation.swift).
                try resealSync(
                    in: vault, wrapKey: (oldClassKeys[.whenUnlocked], newClassKeys[.whenUnlocked]),
                    metadata: (oldKeys.metadata, newKeys.metadata))
                var (next, buckets) = try Manifest.bucketTally(vault, key: newKeys.manifest.entry)
                try ManifestBuckets.write(buckets, to: vault)
                next.counter = manifest.counter + 1
                next.highestID = max(manifest.highestID, next.highestID)
                try vault.setMeta(
                    "manifest", try AuthenticatedState.read(from: vault).encode(next, keys: newKeys.manifest))
                return next.counter
            }
        }
        noteCounter(counter)
        state.withLock {
            $0.header = newHeader
            guard $0.keys != nil else { return }
            var keys = newKeys
            if case .locked = $0.lockState {
                for protection in Accessibility.allCases where !protection.readableWhileLocked {
                    keys.classKeys[protection] = nil
                }
            }
            $0.keys = keys
        }
    }

    /// One row under the new keys (a row that fails its own check stops the rotation: it
    /// would otherwise be lost).
    private func rekeyed(
        _ row: StoredItem, oldKeys: Keys, oldClassKeys: [Accessibility: SecureBytes], newKeys: Keys
    ) throws -> StoredItem {
        guard let itemClass = ItemClass(rawValue: row.itemClass),
            let attributes = try? openAttributes(row, itemClass: itemClass, keys: oldKeys)
        else {
            throw KeychainError(.decode, "item \(row.id) (\(row.itemClass)) is damaged: nothing was rotated")
        }
        let protection = Self.accessibility(of: attributes)
        guard let oldClassKey = oldClassKeys[protection], let newClassKey = newKeys.classKeys[protection] else {
            throw KeychainError(.decode, "vault is damaged: the \(protection.name) class key is missing")
        }
        do {
            return try rekeyed(
                row, itemClass: itemClass, attributes: attributes, oldClassKey: oldClassKey,
                newClassKey: newClassKey, newKeys: newKeys)
        } catch {
            throw KeychainError(.decode, "item \(row.id) (\(row.itemClass)) is damaged: nothing was rotated")
        }
    }

    /// Every key a master key yields, with the class keys given (none for the old keys: those
    /// are unwrapped inside the rotation's transaction).
    private static func keys(
        master: SecureBytes, device: SecureBytes, classKeys given: [Accessibility: SecureBytes]? = nil
    ) throws -> Keys {
        Keys(
            metadata: try KeyDerivation.subkey(of: master, id: Subkey.metadata.rawValue, context: Subkey.context),
            index: try KeyDerivation.subkey(of: master, id: Subkey.index.rawValue, context: Subkey.context),
            attributeIndex: try KeyDerivation.subkey(
                of: master, id: Subkey.attributeIndex.rawValue, context: Subkey.context),
            manifest: try ManifestKeys(master: master), classKeys: given ?? [:], deviceMismatch: false,
            policyPublicKey: try policyKeyPair(master: master).0)
    }
}
