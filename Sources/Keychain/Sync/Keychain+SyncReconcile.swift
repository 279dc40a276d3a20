import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

extension Keychain {
    /// A full reconciliation's last step (a device that was offline longer than the server keeps
    /// tombstones, docs/sync.md "Tombstones"): `present` holds every record id the server has now,
    /// after the whole group was pulled again. A synchronizable item of this vault whose record
    /// this device has seen on the server (it is in `sync_record`) but the server no longer has
    /// was deleted elsewhere and its tombstone purged: it is deleted here too, not resurrected.
    /// An item never uploaded, or changed here since (in the outbox), is kept and uploaded.
    /// Returns how many items it deleted.
    @discardableResult
    public func reconcile(present: Set<[UInt8]>) throws -> Int {
        guard sync.keys?.canSeal == true else { return 0 }
        let keys = try currentKeys()
        return try writeTransaction(keys: keys.manifest, origin: syncOrigin) { vault in
            var gone: [(Int64, [UInt8])] = []
            try vault.forEachItem { row in
                guard let itemClass = ItemClass(rawValue: row.itemClass),
                    let attributes = try? openAttributes(row, itemClass: itemClass, keys: keys), Self.syncs(attributes),
                    let record = recordID(itemClass, attributes), !present.contains(record)
                else { return }
                gone.append((row.id, record))
            }
            var deleted = 0
            for (id, record) in gone {
                guard let known = try vault.syncRecord(record), !known.deleted, try vault.outboxEntry(record) == nil
                else { continue }
                try vault.delete(id: id)
                var tombstone = known
                tombstone.deleted = true
                try vault.setSyncRecord(tombstone)
                deleted += 1
            }
            return deleted
        }
    }
}
