import KeychainStore

// The sync tables (vault format 8) as they are: not covered by the manifest (docs/security.md,
// "Sync": what they hold is sealed or a keyed hash, and a vault file put back whole is the
// rollback mark's to catch), written in the same transaction as the rows they follow.
extension ManifestedWriter {
    func syncValue(_ name: String) throws -> [UInt8]? { try inner.syncValue(name) }
    func syncRecord(_ recordID: [UInt8]) throws -> StoredSyncRecord? { try inner.syncRecord(recordID) }
    func forEachSyncRecord(_ body: (StoredSyncRecord) throws -> Void) throws { try inner.forEachSyncRecord(body) }
    func outbox(limit: Int) throws -> [StoredOutboxEntry] { try inner.outbox(limit: limit) }
    func outboxEntry(_ recordID: [UInt8]) throws -> StoredOutboxEntry? { try inner.outboxEntry(recordID) }
    func outboxCount() throws -> Int { try inner.outboxCount() }
    func highestSyncClock() throws -> [UInt8]? { try inner.highestSyncClock() }
    func conflicts() throws -> [StoredConflict] { try inner.conflicts() }
    func setSyncValue(_ name: String, _ value: [UInt8]?) throws { try inner.setSyncValue(name, value) }
    func setSyncRecord(_ record: StoredSyncRecord) throws { try inner.setSyncRecord(record) }
    func putOutbox(_ entry: StoredOutboxEntry) throws { try inner.putOutbox(entry) }
    func removeOutbox(_ recordID: [UInt8], generation: Int64?) throws {
        try inner.removeOutbox(recordID, generation: generation)
    }
    func addConflict(_ conflict: StoredConflict) throws { try inner.addConflict(conflict) }
    func removeConflict(id: Int64) throws { try inner.removeConflict(id: id) }
    func clearSync() throws { try inner.clearSync() }
}
