import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

/// One record version as the server holds it (its columns and blob).
public struct SyncIncoming: Sendable, Equatable {
    public let recordID: [UInt8]
    public let version: Int64
    public let seq: Int64
    public let deleted: Bool
    public let blob: [UInt8]
    public init(recordID: [UInt8], version: Int64, seq: Int64, deleted: Bool, blob: [UInt8]) {
        self.recordID = recordID
        self.version = version
        self.seq = seq
        self.deleted = deleted
        self.blob = blob
    }
}

/// What applying a page of pulled records did.
public struct SyncPullReport: Sendable, Equatable {
    /// Records applied to the vault (added, changed or deleted items).
    public var applied = 0
    /// Versions that lost to another by the clock and were kept (`sync conflicts`).
    public var kept = 0
    /// Records refused, each with why (tampered, replayed, rolled back): never applied.
    public var refused: [String] = []
    public init() {}
}

extension Keychain {
    /// Applies records pulled from the server, in their order, and moves the cursor to
    /// `cursor`, all in one transaction (issue 31, point 5): a process killed in the middle
    /// applied nothing and pulls the same page again. Each record is opened under the group's
    /// keys with the header the server's columns give (SyncRecord.swift), so a blob moved,
    /// replayed or undeleted does not open; a version not above the one this device holds is a
    /// rollback and is refused. The rest of the page applies. A record whose item has a local
    /// change not yet uploaded is a conflict: the later clock wins, the loser is kept
    /// (SyncMerge in `merge`). Pulled changes reach every face as another face's (origin
    /// `sync`): the mount, the Secret Service's signals, the agent, watchers. Not durable
    /// (CommitQueue): the server keeps every record, so a page lost to a power cut, cursor and
    /// all, is pulled again; an fsync here cost every local change a second one (its own
    /// upload's echo moves the cursor).
    public func applyPulled(_ records: [SyncIncoming], cursor: Int64) throws -> SyncPullReport {
        guard let syncKeys = sync.keys, syncKeys.canSeal else {
            throw KeychainError(.interactionNotAllowed, "the vault is in no sync group, or not unlocked")
        }
        let keys = try currentKeys()
        return try writeTransaction(keys: keys.manifest, durable: false, origin: syncOrigin) { vault in
            var report = SyncPullReport()
            for record in records {
                do {
                    try apply(record, syncKeys: syncKeys, keys: keys, in: vault, report: &report)
                } catch let refusal as SyncRefusal {
                    report.refused.append(refusal.reason)
                }
            }
            try vault.setSyncValue(SyncStateName.cursor, Framing.int(cursor))
            try vault.setSyncValue(SyncStateName.lastPull, Framing.int(Int64(Date().timeIntervalSince1970)))
            try saveClock(vault)
            return report
        }
    }

    /// The server's sequence number this device has applied everything up to.
    public func syncCursor() throws -> Int64 {
        try storeCall { try store.read { Self.int64(try $0.syncValue(SyncStateName.cursor) ?? []) } }
    }

    private func apply(
        _ record: SyncIncoming, syncKeys: SyncKeys, keys: Keys, in vault: any ItemStoreWriter,
        report: inout SyncPullReport
    ) throws {
        let name = "record \(AttributeText.hex(Array(record.recordID.prefix(8)))) version \(record.version)"
        let hash = SyncRecord.hash(record.blob)
        let known = try vault.syncRecord(record.recordID)
        if let known, record.version <= known.version {
            // This device's own upload coming back, or a version it already applied.
            if record.version == known.version && Sodium.constantTimeEqual(hash, known.hash) { return }
            throw SyncRefusal(
                reason: record.version < known.version
                    ? "\(name) is older than version \(known.version), which this device holds: refused as a rollback"
                    : "\(name) differs from the version \(known.version) this device holds: refused")
        }
        guard let clock = try? SyncRecord.clock(of: record.blob) else {
            throw SyncRefusal(reason: "\(name) is malformed: refused")
        }
        let header = SyncRecordHeader(
            group: syncKeys.group, recordID: record.recordID, version: record.version, clock: clock,
            deleted: record.deleted)
        guard let (plain, protection) = try? SyncRecord.open(record.blob, header: header, keys: syncKeys) else {
            throw SyncRefusal(reason: "\(name) does not authenticate (altered, moved or replayed): refused")
        }
        var plainBytes = plain
        defer { Sodium.wipe(&plainBytes) }
        guard let payload = try? SyncPayload.decode(plainBytes),
            recordID(payload.itemClass, payload.attributes) == record.recordID,
            record.deleted
                || (Self.syncs(payload.attributes) && Self.accessibility(of: payload.attributes) == protection)
        else { throw SyncRefusal(reason: "\(name) holds an item that does not match its record: refused") }
        sync.observe(clock)
        let remote = StoredSyncRecord(
            recordID: record.recordID, version: record.version, clock: clock.encoded, deleted: record.deleted,
            hash: hash)
        if let pending = try vault.outboxEntry(record.recordID), let local = HybridTime(encoded: pending.clock) {
            if local == clock {
                // This device's own upload, whose mark was lost (`uploaded` commits without an
                // fsync: a power cut can undo it): the same change, not a conflict.
                try vault.removeOutbox(record.recordID, generation: pending.generation)
                try vault.setSyncRecord(remote)
                return
            }
            if local > clock {
                // The local change is later: it stays queued (on top of this version), and
                // this version is kept as history.
                if !record.deleted { try keep(record.blob, of: remote, side: "remote", in: vault) }
                try vault.setSyncRecord(remote)
                report.kept += record.deleted ? 0 : 1
                return
            }
            if !pending.deleted,
                let blob = try sealLocal(
                    payload.itemClass, payload.attributes, at: local, keys: keys, syncKeys: syncKeys, vault)
            {
                try keep(blob, of: remote, side: "local", in: vault)
                report.kept += 1
            }
            try vault.removeOutbox(record.recordID, generation: nil)
        }
        try store(payload, deleted: record.deleted, protection: protection, keys: keys, in: vault)
        try vault.setSyncRecord(remote)
        report.applied += 1
    }

    /// The item the payload holds written over this vault's item of the same primary key (or
    /// added), or that item deleted for a tombstone.
    private func store(
        _ payload: SyncPayload, deleted: Bool, protection: Accessibility, keys: Keys, in vault: any ItemStoreWriter
    ) throws {
        let existing = try vault.item(
            primaryIndex: primaryIndex(payload.itemClass, payload.attributes, keys: keys), withData: false)
        if deleted {
            if let existing { try vault.delete(id: existing.id) }
            return
        }
        let classKey = try self.classKey(
            protection, keys: keys, for: Self.describe(payload.itemClass, payload.attributes))
        if let existing {
            try vault.replace(
                try seal(
                    id: existing.id, itemClass: payload.itemClass, attributes: payload.attributes, data: payload.data,
                    version: existing.version + 1, keys: keys, classKey: classKey))
        } else {
            let id = try vault.nextItemID()
            try vault.insert(
                try seal(
                    id: id, itemClass: payload.itemClass, attributes: payload.attributes, data: payload.data,
                    version: 1, keys: keys, classKey: classKey), id: id)
        }
    }

    /// This device's current version of an item sealed as a record blob (version 0: never on
    /// the server), to keep it when a later version from the group replaces it.
    private func sealLocal(
        _ itemClass: ItemClass, _ key: Attributes, at time: HybridTime, keys: Keys, syncKeys: SyncKeys,
        _ vault: any ItemStoreWriter
    ) throws -> [UInt8]? {
        guard
            let row = try vault.item(primaryIndex: primaryIndex(itemClass, key, keys: keys), withData: true),
            let attributes = try? openAttributes(row, itemClass: itemClass, keys: keys)
        else { return nil }
        let protection = Self.accessibility(of: attributes)
        guard let classKey = keys.classKeys[protection], Self.syncs(attributes) else { return nil }
        var data = try openSeal(row, itemClass: itemClass, attributes: attributes, classKey: classKey)
        var payload = SyncPayload(itemClass: itemClass, attributes: attributes, data: data).encoded()
        defer {
            Sodium.wipe(&data)
            Sodium.wipe(&payload)
        }
        guard let record = recordID(itemClass, attributes) else { return nil }
        return try SyncRecord.seal(
            payload, protection: protection,
            header: SyncRecordHeader(group: syncKeys.group, recordID: record, version: 0, clock: time, deleted: false),
            keys: syncKeys)
    }

    private func keep(_ blob: [UInt8], of record: StoredSyncRecord, side: String, in vault: any ItemStoreWriter)
        throws
    {
        try vault.addConflict(
            StoredConflict(
                recordID: record.recordID, version: side == "local" ? 0 : record.version, deleted: false, blob: blob,
                keptAt: Int64(Date().timeIntervalSince1970), side: side))
    }
}

/// A pulled record that is not applied, and why (the page goes on without it).
struct SyncRefusal: Error {
    let reason: String
}
