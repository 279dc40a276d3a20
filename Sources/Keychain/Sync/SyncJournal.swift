import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

// The outbox (issue 31, point 5): every local change of a synchronizable item writes its
// outbox row in the SQLite transaction of the change itself, so a change committed is a change
// that will be uploaded, whatever happens to the process after. One row per record: the
// newest change of an item replaces the row (an item edited ten times offline uploads once),
// stamped with this device's hybrid logical clock, which decides conflicts (SyncMerge.swift).
// Changes the engine applies from the group (origin `sync`) are not journaled: they came from
// there.

extension Keychain {
    /// The commit's changes journaled (CommitQueue, after the change log, in the commit's
    /// transaction). When the vault is in no group: one point read of `sync_state`.
    func journalSyncChanges(_ writer: ManifestedWriter) throws {
        guard writer.changes.contains(where: { $0.origin != syncOrigin }) else { return }
        // The group as this transaction sees it, not as this process last loaded it: another
        // process may have joined, left or rotated it since (the CLI beside the service), and a
        // change journaled under the keys of a group the vault has left is lost to the new one.
        // One point read of a tiny table per commit.
        let stored = try writer.syncValue(SyncStateName.group)
        var stale = stored != sync.keys?.group.bytes
        if !stale, stored != nil { stale = try writer.syncValue(SyncStateName.device) != sync.device }
        if stale {
            // Locked, the new group's key cannot be opened: nothing is journaled under the old.
            sync.install(keys: nil, device: [], clock: nil)
            if stored != nil, let keys = state.withLock({ $0.keys }), keys.classKeys[.whenUnlocked] != nil {
                try? loadSync(keys: keys, from: writer)
            }
        }
        guard sync.keys != nil, let metadata = state.withLock({ $0.keys?.metadata }) else { return }
        for change in writer.changes where change.origin != syncOrigin {
            func open(_ row: StoredItem?) -> Attributes? {
                guard let row, row.itemClass == change.itemClass.rawValue else { return nil }
                return try? Self.openAttributes(
                    row, itemClass: change.itemClass, vaultID: vaultID, metadataKey: metadata)
            }
            let after = change.kind == .removed ? nil : open(change.rows?.after)
            let before = change.kind == .changed ? nil : open(change.rows?.before)
            // A rename, a group change or synchronizable cleared: the old record is a tombstone
            // (the item leaves the other devices, not this one).
            if let before, Self.syncs(before),
                after.map({ !Self.syncs($0) || recordID(change.itemClass, $0) != recordID(change.itemClass, before) })
                    ?? true
            {
                try journal(tombstoneOf: change.itemClass, before, in: writer)
            }
            if let after, Self.syncs(after) {
                try journal(live: change.id, change.itemClass, after, in: writer)
            }
        }
        // The stamps are in the outbox rows just written: `loadSync` recovers the clock from them
        // (`highestSyncClock`), so a commit writes no row of its own for it.
    }

    func recordID(_ itemClass: ItemClass, _ attributes: Attributes) -> [UInt8]? {
        sync.keys?.recordID(itemClass: itemClass, primaryKey: Self.primaryKeyMessage(itemClass, attributes))
    }

    func journal(live id: Int64, _ itemClass: ItemClass, _ attributes: Attributes, in vault: any ItemStoreWriter)
        throws
    {
        guard let record = recordID(itemClass, attributes), let time = sync.tick() else { return }
        try vault.putOutbox(
            StoredOutboxEntry(
                recordID: record, itemClass: itemClass.rawValue, itemID: id, deleted: false, clock: time.encoded,
                tomb: []))
    }

    func journal(tombstoneOf itemClass: ItemClass, _ attributes: Attributes, in vault: any ItemStoreWriter) throws {
        guard let record = recordID(itemClass, attributes), let time = sync.tick() else { return }
        let metadata = try currentKeys().metadata
        let key = SyncPayload(itemClass: itemClass, attributes: SyncPayload.primaryKey(itemClass, attributes), data: [])
        let tomb = try AEAD.seal(key.encoded(), associatedData: tombAD(record), key: metadata)
        try vault.putOutbox(
            StoredOutboxEntry(
                recordID: record, itemClass: itemClass.rawValue, itemID: 0, deleted: true, clock: time.encoded,
                tomb: tomb))
    }

    /// A tombstone's primary key, sealed under the metadata key until it is uploaded. AD: the
    /// domain, the vault id and the record id, so a tomb cannot be moved to another record.
    func tombAD(_ record: [UInt8]) -> [UInt8] {
        Framing.frame([Framing.text("kcfs/sync-tomb/v1"), vaultID, record])
    }

    /// The clock's last time, kept so a restarted process never stamps a time it used before.
    func saveClock(_ vault: any ItemStoreWriter) throws {
        if let last = sync.lastTime { try vault.setSyncValue(SyncStateName.clock, last.encoded) }
    }
}
