import KeychainCrypto
import KeychainStore

extension Keychain {
    /// A master-key rotation's part for sync, in its transaction: the group's root key wrapped
    /// again under the new whenUnlocked class key, and each outbox tombstone sealed again under the new
    /// metadata key (their record ids and clocks kept). A box that does not open stops the
    /// rotation, as any other damaged row does.
    func resealSync(
        in vault: any ItemStoreWriter, wrapKey: (old: SecureBytes?, new: SecureBytes?),
        metadata: (old: SecureBytes, new: SecureBytes)
    ) throws {
        guard let groupBytes = try vault.syncValue(SyncStateName.group),
            let group = SyncGroupID(bytes: groupBytes), let box = try vault.syncValue(SyncStateName.root)
        else { return }
        guard let old = wrapKey.old, let new = wrapKey.new,
            let root = try? SyncKeys.unwrapRoot(box, group: group, vaultID: vaultID, under: old)
        else { throw KeychainError(.decode, "the sync group's root key does not open: nothing was rotated") }
        try vault.setSyncValue(
            SyncStateName.root, try SyncKeys.wrapRoot(root, group: group, vaultID: vaultID, under: new))
        for var entry in try vault.outbox(limit: Int.max) where entry.deleted {
            guard let plain = try? AEAD.open(entry.tomb, associatedData: tombAD(entry.recordID), key: metadata.old)
            else { throw KeychainError(.decode, "a sync outbox row is damaged: nothing was rotated") }
            entry.tomb = try AEAD.seal(plain, associatedData: tombAD(entry.recordID), key: metadata.new)
            try vault.putOutbox(entry)
        }
    }
}
