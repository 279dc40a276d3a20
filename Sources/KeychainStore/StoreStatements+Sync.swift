import FoundationEssentials
import Glibc

/// What this device knows of one sync record (vault format 8, the core's Sync/ files): the
/// highest version it applied or pushed, that version's clock, whether it is a tombstone, and
/// the hash of its blob (an echo of its own push is told from a new version by it). The record
/// id is a keyed hash: no name is stored in clear.
public struct StoredSyncRecord: Sendable, Equatable {
    public var recordID: [UInt8]
    public var version: Int64
    public var clock: [UInt8]
    public var deleted: Bool
    public var hash: [UInt8]
    public init(recordID: [UInt8], version: Int64, clock: [UInt8], deleted: Bool, hash: [UInt8]) {
        self.recordID = recordID
        self.version = version
        self.clock = clock
        self.deleted = deleted
        self.hash = hash
    }
}

/// A local change not yet uploaded (the outbox), one row per record: the newest change wins
/// the row, so an item edited ten times offline uploads once. Written in the SQLite transaction
/// of the change itself. `tomb`: a tombstone's primary key, sealed (the item is gone).
public struct StoredOutboxEntry: Sendable, Equatable {
    public var recordID: [UInt8]
    public var itemClass: String
    public var itemID: Int64
    public var deleted: Bool
    public var clock: [UInt8]
    public var tomb: [UInt8]
    /// Bumped at each rewrite of the row: an upload removes the row only if it is unchanged.
    public var generation: Int64
    public init(
        recordID: [UInt8], itemClass: String, itemID: Int64, deleted: Bool, clock: [UInt8], tomb: [UInt8],
        generation: Int64 = 0
    ) {
        self.recordID = recordID
        self.itemClass = itemClass
        self.itemID = itemID
        self.deleted = deleted
        self.clock = clock
        self.tomb = tomb
        self.generation = generation
    }
}

/// A version that lost a conflict, kept as local history (`keychainfs sync conflicts`): the
/// record blob as the group seals it (the server's, or this device's own sealed for keeping),
/// with the header fields its associated data binds.
public struct StoredConflict: Sendable, Equatable {
    public var id: Int64
    public var recordID: [UInt8]
    public var version: Int64
    public var deleted: Bool
    public var blob: [UInt8]
    /// Seconds since 1970 when it was kept.
    public var keptAt: Int64
    /// The side that lost: "local" or "remote".
    public var side: String
    public init(
        id: Int64 = 0, recordID: [UInt8], version: Int64, deleted: Bool, blob: [UInt8], keptAt: Int64,
        side: String
    ) {
        self.id = id
        self.recordID = recordID
        self.version = version
        self.deleted = deleted
        self.blob = blob
        self.keptAt = keptAt
        self.side = side
    }
}

extension Statements {
    /// The sync tables (vault format 8, store schema 6). `sync_state`: the group's settings and
    /// progress by name (the wrapped root key, the device id, the server, the cursor, the
    /// clock); `sync_record`, `sync_outbox`, `sync_conflict`: see the types above.
    static let syncTables = """
        CREATE TABLE IF NOT EXISTS sync_state(name TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS sync_record(
            record_id BLOB PRIMARY KEY, version INTEGER NOT NULL, clock BLOB NOT NULL,
            deleted INTEGER NOT NULL, hash BLOB NOT NULL) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS sync_outbox(
            record_id BLOB PRIMARY KEY, class TEXT NOT NULL, item_id INTEGER NOT NULL, deleted INTEGER NOT NULL,
            clock BLOB NOT NULL, tomb BLOB NOT NULL, gen INTEGER NOT NULL) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS sync_conflict(
            id INTEGER PRIMARY KEY AUTOINCREMENT, record_id BLOB NOT NULL, version INTEGER NOT NULL,
            deleted INTEGER NOT NULL, blob BLOB NOT NULL, kept_at INTEGER NOT NULL, side TEXT NOT NULL);
        """

    func syncValue(_ name: String) throws -> [UInt8]? {
        guard try hasTable("sync_state") else { return nil }
        var value: [UInt8]?
        try connection.run("SELECT value FROM sync_state WHERE name = ?", [.text(name)]) { value = $0.blob(0) }
        return value
    }

    func setSyncValue(_ name: String, _ value: [UInt8]?) throws {
        if let value {
            try connection.run(
                "INSERT INTO sync_state(name, value) VALUES(?, ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                [.text(name), .blob(value)])
        } else {
            try connection.run("DELETE FROM sync_state WHERE name = ?", [.text(name)])
        }
    }

    func syncRecord(_ recordID: [UInt8]) throws -> StoredSyncRecord? {
        guard try hasTable("sync_record") else { return nil }
        var found: StoredSyncRecord?
        try connection.run(
            "SELECT version, clock, deleted, hash FROM sync_record WHERE record_id = ?", [.blob(recordID)]
        ) { row in
            found = StoredSyncRecord(
                recordID: recordID, version: row.int(0), clock: row.blob(1), deleted: row.int(2) != 0,
                hash: row.blob(3))
        }
        return found
    }

    func forEachSyncRecord(_ body: (StoredSyncRecord) throws -> Void) throws {
        guard try hasTable("sync_record") else { return }
        try connection.run("SELECT record_id, version, clock, deleted, hash FROM sync_record") { row in
            try body(
                StoredSyncRecord(
                    recordID: row.blob(0), version: row.int(1), clock: row.blob(2), deleted: row.int(3) != 0,
                    hash: row.blob(4)))
        }
    }

    func setSyncRecord(_ record: StoredSyncRecord) throws {
        try connection.run(
            """
            INSERT INTO sync_record(record_id, version, clock, deleted, hash) VALUES(?, ?, ?, ?, ?)
            ON CONFLICT(record_id) DO UPDATE SET version = excluded.version, clock = excluded.clock,
                deleted = excluded.deleted, hash = excluded.hash
            """,
            [
                .blob(record.recordID), .integer(record.version), .blob(record.clock),
                .integer(record.deleted ? 1 : 0), .blob(record.hash),
            ])
    }

    private static let outboxColumns = "record_id, class, item_id, deleted, clock, tomb, gen"

    private static func outboxEntry(_ row: Connection.Row) -> StoredOutboxEntry {
        StoredOutboxEntry(
            recordID: row.blob(0), itemClass: row.text(1), itemID: row.int(2), deleted: row.int(3) != 0,
            clock: row.blob(4), tomb: row.blob(5), generation: row.int(6))
    }

    func outbox(limit: Int) throws -> [StoredOutboxEntry] {
        guard try hasTable("sync_outbox") else { return [] }
        var out: [StoredOutboxEntry] = []
        try connection.run(
            "SELECT \(Self.outboxColumns) FROM sync_outbox ORDER BY clock LIMIT ?", [.integer(Int64(limit))]
        ) { out.append(Self.outboxEntry($0)) }
        return out
    }

    func outboxEntry(_ recordID: [UInt8]) throws -> StoredOutboxEntry? {
        guard try hasTable("sync_outbox") else { return nil }
        var found: StoredOutboxEntry?
        try connection.run(
            "SELECT \(Self.outboxColumns) FROM sync_outbox WHERE record_id = ?", [.blob(recordID)]
        ) { found = Self.outboxEntry($0) }
        return found
    }

    func highestSyncClock() throws -> [UInt8]? {
        guard try hasTable("sync_outbox") else { return nil }
        var highest: [UInt8]?
        try connection.run(
            "SELECT max(c) FROM (SELECT max(clock) AS c FROM sync_outbox UNION ALL SELECT max(clock) FROM sync_record)"
        ) { highest = $0.blob(0) }
        return highest
    }

    func outboxCount() throws -> Int {
        guard try hasTable("sync_outbox") else { return 0 }
        var count: Int64 = 0
        try connection.run("SELECT count(*) FROM sync_outbox") { count = $0.int(0) }
        return Int(count)
    }

    /// Writes the record's row, its generation one more than the row it replaces.
    func putOutbox(_ entry: StoredOutboxEntry) throws {
        try connection.run(
            """
            INSERT INTO sync_outbox(\(Self.outboxColumns)) VALUES(?, ?, ?, ?, ?, ?, 1)
            ON CONFLICT(record_id) DO UPDATE SET class = excluded.class, item_id = excluded.item_id,
                deleted = excluded.deleted, clock = excluded.clock, tomb = excluded.tomb, gen = sync_outbox.gen + 1
            """,
            [
                .blob(entry.recordID), .text(entry.itemClass), .integer(entry.itemID),
                .integer(entry.deleted ? 1 : 0), .blob(entry.clock), .blob(entry.tomb),
            ])
    }

    /// Removes the record's row if it is still at `generation` (nil: whatever it is).
    func removeOutbox(_ recordID: [UInt8], generation: Int64?) throws {
        if let generation {
            try connection.run(
                "DELETE FROM sync_outbox WHERE record_id = ? AND gen = ?", [.blob(recordID), .integer(generation)])
        } else {
            try connection.run("DELETE FROM sync_outbox WHERE record_id = ?", [.blob(recordID)])
        }
    }

    func conflicts() throws -> [StoredConflict] {
        guard try hasTable("sync_conflict") else { return [] }
        var out: [StoredConflict] = []
        try connection.run(
            "SELECT id, record_id, version, deleted, blob, kept_at, side FROM sync_conflict ORDER BY id"
        ) { row in
            out.append(
                StoredConflict(
                    id: row.int(0), recordID: row.blob(1), version: row.int(2), deleted: row.int(3) != 0,
                    blob: row.blob(4), keptAt: row.int(5), side: row.text(6)))
        }
        return out
    }

    func addConflict(_ conflict: StoredConflict) throws {
        try connection.run(
            "INSERT INTO sync_conflict(record_id, version, deleted, blob, kept_at, side) VALUES(?, ?, ?, ?, ?, ?)",
            [
                .blob(conflict.recordID), .integer(conflict.version), .integer(conflict.deleted ? 1 : 0),
                .blob(conflict.blob), .integer(conflict.keptAt), .text(conflict.side),
            ])
    }

    func removeConflict(id: Int64) throws {
        try connection.run("DELETE FROM sync_conflict WHERE id = ?", [.integer(id)])
    }

    /// Leaving the group: every sync table emptied (the items stay).
    func clearSync() throws {
        try connection.execute(
            "DELETE FROM sync_state; DELETE FROM sync_record; DELETE FROM sync_outbox; DELETE FROM sync_conflict;")
    }
}
