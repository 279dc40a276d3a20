/// The store as the keychain core sees it: opaque rows (`StoredItem`), a few named blobs
/// (`meta`), the wrapped class keys, and transactions. Nothing here is plaintext: rows carry
/// ciphertext and keyed-hash indexes, so a store never needs a key.
///
/// `VaultStore` (one SQLite file) is the only implementation today. A sync backend would
/// implement the same three protocols over its own storage, and feed rows it receives from
/// elsewhere through `write`:
/// - reads by id, by primary index (unique), by secondary index, by class, by attribute-index
///   tags (item ids carrying every tag asked), and walks over every row and every tag for the
///   unlock-time manifest check;
/// - `insert` under an id from `nextItemID` (ids are never reused; a row's id is bound into its
///   ciphertext, so a synced row keeps the id it was sealed with), `replace`, `delete`, and
///   `StoreError.duplicate` when a primary index is taken;
/// - `meta` blobs (header fields, `manifest`, `access_policy`) and class keys, written in the
///   same transaction as the rows they describe: the manifest must change atomically with
///   the rows it covers, or the next unlock refuses the vault;
/// - `changeStamp`, which must change whenever any row or meta blob changes (including
///   changes that arrived from elsewhere), because faces cache listings on it.
/// Rows received from another device are only acceptable if they were sealed under this
/// vault's keys (same vault id and master key); the store cannot check that — the core does,
/// when it opens them.
public protocol ItemStore: Sendable {
    /// Runs `body` with statements against the current state; each statement sees its own
    /// snapshot (no transaction round trip: the cheapest way to do one point lookup).
    func lookup<R>(_ body: (any ItemStoreReader) throws -> R) throws -> R
    /// Runs `body` against one consistent snapshot of the whole store.
    func read<R>(_ body: (any ItemStoreReader) throws -> R) throws -> R
    /// Runs `body` in one write transaction: everything it does is committed together, or,
    /// if it throws, nothing is. Transactions do not nest: work that is part of a larger write
    /// takes the outer transaction's writer as a parameter.
    func write<R>(_ body: (any ItemStoreWriter) throws -> R) throws -> R
    /// `write`, with the commit durable (fsynced before it returns, `synchronous=FULL`) or not
    /// (`synchronous=NORMAL`: visible to every reader at once; its WAL frames are made durable
    /// by the fsync of the next durable commit of the file, since the WAL is one file written
    /// in order, or by a checkpoint, which syncs the WAL first. A power loss before that loses
    /// it, and nothing committed before it).
    func write<R>(durable: Bool, _ body: (any ItemStoreWriter) throws -> R) throws -> R
    /// Makes every commit made so far (through any connection, by any process) durable: what
    /// `write(durable: false)` followed by this call commits is durable when it returns, as
    /// `write(durable: true)` would have made it, except that readers saw it from its commit on
    /// and other writers committed meanwhile (the group commit, CommitQueue.swift).
    func syncLog() throws
    /// One row with its data, as `lookup { $0.item(id: id, withData: true) }` would read it
    /// now. A store may answer from a row it read earlier when it can tell that nothing has
    /// committed since (VaultStore: RowSnapshots.swift).
    func currentItem(id: Int64) throws -> StoredItem?
    /// Changes whenever anything in the store changes, here or through any other writer.
    func changeStamp() throws -> [Int64]
    /// How many write transactions this store object has committed: no store access, for
    /// caches that must drop what this process's own writes changed.
    var localCommitCount: Int64 { get }
}

/// Reads, valid only inside the `lookup`, `read` or `write` that handed them out.
public protocol ItemStoreReader {
    func item(id: Int64, withData: Bool) throws -> StoredItem?
    func item(primaryIndex: [UInt8], withData: Bool) throws -> StoredItem?
    func items(secondaryIndex: [UInt8], withData: Bool) throws -> [StoredItem]
    /// Whether any row has this secondary index, without reading rows.
    func exists(secondaryIndex: [UInt8]) throws -> Bool
    func items(itemClass: String, withData: Bool) throws -> [StoredItem]
    /// At most `limit` rows of a class with ids above `afterID`, in id order: a walk over a
    /// large class a page at a time, so no caller holds every row at once.
    func items(itemClass: String, afterID: Int64, limit: Int, withData: Bool) throws -> [StoredItem]
    /// Visits every row with its full contents, in id order.
    func forEachItem(_ body: (StoredItem) throws -> Void) throws
    func itemCount() throws -> Int
    func meta(_ name: String) throws -> [UInt8]?
    /// The values of several meta rows read by one statement, by name (an absent name is not
    /// in the result): the vault header's seven fields, read at every commit's check.
    func meta(_ names: [String]) throws -> [String: [UInt8]]
    /// Wrapped class keys by protection class code.
    func classKeys() throws -> [String: [UInt8]]
    /// The attribute-index tags of one item (none when it has none, or the store has no index yet).
    func attributeTags(itemID: Int64) throws -> [[UInt8]]
    /// Visits every attribute-index row (item id, tag) in (item id, tag) order; none when the
    /// store's schema has no attribute index yet (a vault not migrated).
    func forEachAttributeTag(_ body: (Int64, [UInt8]) throws -> Void) throws
    /// The ids of the items that carry every one of `tags` (at least one), in id order.
    func itemIDs(withAllAttributeTags tags: [[UInt8]]) throws -> [Int64]
    /// Visits the rows whose ids lie in `ids` (one range scan of the primary key), in id order.
    func forEachItem(ids: ClosedRange<Int64>, _ body: (StoredItem) throws -> Void) throws
    /// Visits the attribute-index rows of the items whose ids lie in `ids` (one range scan of
    /// the index by item id); none when the store has no attribute index yet.
    func forEachAttributeTag(itemIDs ids: ClosedRange<Int64>, _ body: (Int64, [UInt8]) throws -> Void) throws
    /// The highest item id in the item table or the attribute index (0 when both are empty).
    func highestStoredID() throws -> Int64
    /// Every stored manifest bucket (vault format 4): bucket number → (accumulator, count).
    /// None when the store's schema has no bucket table yet.
    func manifestBuckets() throws -> [Int64: (accumulator: [UInt8], count: Int64)]
    /// One stored manifest bucket, or nil when it has none.
    func manifestBucket(_ bucket: Int64) throws -> (accumulator: [UInt8], count: Int64)?
    /// The sealed chunks of one secondary-index value's name list (vault format 5), in chunk
    /// order; none when it has none or the store's schema has no name lists yet.
    func nameChunks(secondaryIndex: [UInt8]) throws -> [(chunk: Int64, sealed: [UInt8])]
    /// The one chunk of a list where `id` belongs: the last whose key is at most `id`, else the
    /// first (an id below every chunk's); nil when the list has none. One index probe, where
    /// `nameChunks` reads the whole list (a 100,000-entry directory's is megabytes).
    func nameChunk(secondaryIndex: [UInt8], holding id: Int64) throws -> (chunk: Int64, sealed: [UInt8])?
    /// Visits every name-list chunk (secondary index, chunk, sealed) in (index, chunk) order.
    func forEachNameChunk(_ body: ([UInt8], Int64, [UInt8]) throws -> Void) throws
    /// Every stored name-list bucket: secondary index → (accumulator, chunk count).
    func nameBuckets() throws -> [[UInt8]: (accumulator: [UInt8], count: Int64)]
    /// Every stored list bucket in turn (sidx, accumulator, count), with no table built: the
    /// unlock's fold of 100,000 lists spent most of its time making the dictionary.
    func forEachNameBucket(_ body: ([UInt8], [UInt8], Int64) throws -> Void) throws
    /// One secondary-index value's stored name-list bucket, or nil when it has none.
    func nameBucket(secondaryIndex: [UInt8]) throws -> (accumulator: [UInt8], count: Int64)?
    /// The change log's first and last sequence numbers (vault format 7); nil when it is empty
    /// or the store's schema has no log yet.
    func changeLogBounds() throws -> (first: Int64, last: Int64)?
    /// At most `limit` change-log rows after `seq`, in sequence order.
    func loggedChanges(after seq: Int64, limit: Int) throws -> [StoredChange]
    /// Sync (vault format 8, StoreStatements+Sync.swift): one setting of the group by name.
    func syncValue(_ name: String) throws -> [UInt8]?
    /// What this device knows of a record; nil when it has never applied or pushed one.
    func syncRecord(_ recordID: [UInt8]) throws -> StoredSyncRecord?
    func forEachSyncRecord(_ body: (StoredSyncRecord) throws -> Void) throws
    /// At most `limit` outbox rows, oldest change first.
    func outbox(limit: Int) throws -> [StoredOutboxEntry]
    func outboxEntry(_ recordID: [UInt8]) throws -> StoredOutboxEntry?
    func outboxCount() throws -> Int
    /// The highest clock stamp of the outbox and the record table (encoded big-endian, so the
    /// bytes compare as the clocks do): every stamp this device issued or observed and kept.
    func highestSyncClock() throws -> [UInt8]?
    /// The versions kept from conflicts, oldest first.
    func conflicts() throws -> [StoredConflict]
}

/// Writes, valid only inside the `write` that handed them out.
public protocol ItemStoreWriter: ItemStoreReader {
    /// The id the next insert will get, so a row can be sealed with its own id in its
    /// associated data before it is written.
    func nextItemID() throws -> Int64
    /// Inserts a row under an id obtained from `nextItemID()` in the same transaction.
    /// Throws `StoreError.duplicate` when a row with the same primary index exists.
    func insert(_ item: StoredItem, id: Int64) throws
    /// Replaces every column of the row with `item.id`. Throws `.duplicate` on an index clash.
    func replace(_ item: StoredItem) throws
    func delete(id: Int64) throws
    func setMeta(_ name: String, _ value: [UInt8]) throws
    func setClassKey(_ protection: String, wrapped: [UInt8]) throws
    /// Brings the file's tables to this build's schema (idempotent), inside the caller's write:
    /// the one-time migration at first unlock calls it before it fills the new tables.
    func upgradeSchema() throws
    /// Replaces the attribute-index tags of one item (`insert` and `replace` call it for a row
    /// whose `attributeTags` are set; `delete` removes them).
    func setAttributeTags(_ tags: [[UInt8]], itemID: Int64) throws
    /// Writes one manifest bucket; `nil` removes it (an empty bucket is not stored).
    func setManifestBucket(_ bucket: Int64, _ value: (accumulator: [UInt8], count: Int64)?) throws
    /// Removes every manifest bucket (before a migration or a rotation writes them all anew).
    func clearManifestBuckets() throws
    /// Writes one name-list chunk; `nil` removes it.
    func setNameChunk(secondaryIndex: [UInt8], chunk: Int64, sealed: [UInt8]?) throws
    /// Writes one name-list bucket; `nil` removes it (an empty list has none).
    func setNameBucket(secondaryIndex: [UInt8], _ value: (accumulator: [UInt8], count: Int64)?) throws
    /// Removes every name-list chunk and bucket (before a migration or a rotation builds them anew).
    func clearNameLists() throws
    /// Appends one change-log row (vault format 7), in the transaction that makes the change.
    func appendChange(_ change: StoredChange) throws
    /// Removes the change-log rows up to and including `seq` (the log's retention).
    func pruneChanges(through seq: Int64) throws
    /// Sync (vault format 8): a setting written or (nil) removed.
    func setSyncValue(_ name: String, _ value: [UInt8]?) throws
    func setSyncRecord(_ record: StoredSyncRecord) throws
    /// The record's outbox row written, its generation one more than the row it replaces.
    func putOutbox(_ entry: StoredOutboxEntry) throws
    /// The record's outbox row removed if still at `generation` (nil: whatever it is).
    func removeOutbox(_ recordID: [UInt8], generation: Int64?) throws
    func addConflict(_ conflict: StoredConflict) throws
    func removeConflict(id: Int64) throws
    /// Every sync table emptied (leaving the group; the items stay).
    func clearSync() throws
    /// Runs `body` under a savepoint of the current transaction: if it throws, its changes are
    /// undone and the transaction goes on without them (one member of a group commit failing
    /// leaves the others' changes in).
    func savepoint<R>(_ body: () throws -> R) throws -> R
}

extension ItemStore {
    public func write<R>(_ body: (any ItemStoreWriter) throws -> R) throws -> R { try write(durable: true, body) }
}
