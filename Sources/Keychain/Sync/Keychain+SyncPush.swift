import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

/// One record version to upload: what the server's push takes, and what marks it done.
public struct SyncUpload: Sendable, Equatable {
    public let recordID: [UInt8]
    /// The version the server must hold for this to be stored (0: none yet).
    public let expectedVersion: Int64
    public let version: Int64
    public let deleted: Bool
    public let blob: [UInt8]
    /// The outbox row's generation when it was read: a row rewritten since stays queued.
    let generation: Int64
    let clock: [UInt8]
}

extension Keychain {
    /// Up to `limit` outbox rows sealed as the next version of their records (SyncRecord.swift),
    /// oldest change first. An item whose class key is not held (the vault locked) waits;
    /// one whose row changed name since it was journaled is left to the newer row.
    public func pendingUploads(limit: Int = 500) throws -> [SyncUpload] {
        guard let syncKeys = sync.keys, syncKeys.canSeal else { return [] }
        let keys = try currentKeys()
        let rows = try storeCall {
            try store.read { vault -> [(StoredOutboxEntry, StoredSyncRecord?, StoredItem?)] in
                try vault.outbox(limit: limit).map { entry in
                    (
                        entry, try vault.syncRecord(entry.recordID),
                        entry.deleted ? nil : try vault.item(id: entry.itemID, withData: true)
                    )
                }
            }
        }
        var uploads: [SyncUpload] = []
        for (entry, known, row) in rows {
            guard let time = HybridTime(encoded: entry.clock), let itemClass = ItemClass(rawValue: entry.itemClass)
            else { continue }
            var payload: [UInt8]
            var protection = Accessibility.whenUnlocked
            if entry.deleted {
                guard
                    let plain = try? AEAD.open(entry.tomb, associatedData: tombAD(entry.recordID), key: keys.metadata)
                else { continue }
                payload = plain
            } else {
                guard let row, let attributes = try? openAttributes(row, itemClass: itemClass, keys: keys),
                    Self.syncs(attributes), recordID(itemClass, attributes) == entry.recordID
                else { continue }
                protection = Self.accessibility(of: attributes)
                guard let classKey = keys.classKeys[protection] else { continue }
                var data = try openSeal(row, itemClass: itemClass, attributes: attributes, classKey: classKey)
                payload = SyncPayload(itemClass: itemClass, attributes: attributes, data: data).encoded()
                Sodium.wipe(&data)
            }
            defer { Sodium.wipe(&payload) }
            let expected = known?.version ?? 0
            let header = SyncRecordHeader(
                group: syncKeys.group, recordID: entry.recordID, version: expected + 1, clock: time,
                deleted: entry.deleted)
            let blob = try SyncRecord.seal(payload, protection: protection, header: header, keys: syncKeys)
            uploads.append(
                SyncUpload(
                    recordID: entry.recordID, expectedVersion: expected, version: expected + 1, deleted: entry.deleted,
                    blob: blob, generation: entry.generation, clock: entry.clock))
        }
        return uploads
    }

    /// After the server stored `stored` (or already held them): each becomes this device's
    /// known version of its record, and its outbox row goes unless it was rewritten since. One
    /// transaction; nothing else changes. Not durable (CommitQueue): lost to a power cut, it
    /// leaves the vault as a push whose answer never came does, which the next round settles
    /// (the server holds the version); an fsync here cost every local change a second one.
    ///
    /// `cursor`: when the server numbered these versions right after the cursor, with nothing
    /// between (`from` the cursor the round read, `through` the last of them), the cursor moves
    /// past them in the same transaction: they are this device's own, so the round their NOTIFY
    /// starts pulls nothing and writes nothing.
    public func uploaded(_ stored: [SyncUpload], cursor: (from: Int64, through: Int64)? = nil) throws {
        guard !stored.isEmpty else { return }
        let keys = try currentKeys()
        try writeTransaction(keys: keys.manifest, durable: false, origin: syncOrigin) { vault in
            if let cursor, Self.int64(try vault.syncValue(SyncStateName.cursor) ?? []) == cursor.from {
                try vault.setSyncValue(SyncStateName.cursor, Framing.int(cursor.through))
            }
            for upload in stored {
                try vault.setSyncRecord(
                    StoredSyncRecord(
                        recordID: upload.recordID, version: upload.version, clock: upload.clock,
                        deleted: upload.deleted, hash: SyncRecord.hash(upload.blob)))
                try vault.removeOutbox(upload.recordID, generation: upload.generation)
            }
            try vault.setSyncValue(SyncStateName.lastPush, Framing.int(Int64(Date().timeIntervalSince1970)))
        }
    }

    /// How many local changes wait for upload.
    public func syncOutboxCount() throws -> Int { try storeCall { try store.read { try $0.outboxCount() } } }
}
