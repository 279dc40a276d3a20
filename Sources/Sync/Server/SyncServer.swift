import FoundationEssentials
import Glibc
import Keychain

/// The sync server as the sync engine sees it: groups of opaque records in PostgreSQL (schema
/// `kcfs_sync`), each write numbered by its group's gap-free sequence, a pull after a cursor,
/// wake-ups by LISTEN/NOTIFY, devices' cursors, and pairing rendezvous. The server stores bytes
/// only: what the engine sealed, under ids it derived.
///
/// One `SyncServer` is one connection: use it from one thread at a time (it is not Sendable);
/// after `.postgres(.connectionLost)`, make a new one. The channel a `listen` joined belongs to
/// this connection, so a waiting thread usually holds a `SyncServer` of its own.
public final class SyncServer {
    public let connection: PGConnection

    /// The kcfs_sync schema version this program reads and writes.
    public static let schemaVersion: Int = SyncServerSchema.version

    /// What a server's administrator runs once, as a superuser, for a multi-user server: the
    /// schema, its tables and row-level security, and the role `kcfs_sync_device` with the least
    /// privileges a device needs (docs/sync.md, "For the server's administrator"). Idempotent;
    /// refused untouched on a database whose schema is newer.
    public static let adminSQL =
        "BEGIN;\n" + SyncServerSchema.schemaSQL + SyncServerSchema.grantsSQL + "COMMIT;\n"

    /// Connects with a libpq conninfo (`host=… port=… user=… password=… dbname=…` or a URI).
    public init(conninfo: String, connectTimeout: Int = 10) throws(SyncServerError) {
        do { connection = try PGConnection(conninfo: conninfo, connectTimeout: connectTimeout) } catch {
            throw .postgres(error)
        }
    }

    /// Maps what a body threw onto `SyncServerError`, including the schema's own SQLSTATEs.
    @discardableResult
    func run<R>(_ body: () throws -> R) throws(SyncServerError) -> R {
        do {
            return try body()
        } catch let error as SyncServerError {
            throw error
        } catch let error as PGError {
            if case .server(let state, _) = error {
                if state == "KC001" { throw .unknownGroup }
                // The schema SQL's own refusal (a newer schema installed while this ran): its
                // message names the version found.
                if state == "KC002" {
                    let found = error.description.firstMatch(of: /version ([0-9]+),/).flatMap { Int($0.output.1) }
                    throw .newerSchema(found: found ?? Self.schemaVersion + 1, supported: Self.schemaVersion)
                }
            }
            throw .postgres(error)
        } catch {
            throw .postgres(.decode("\(error)"))
        }
    }

    // MARK: Schema

    /// The schema version the database holds; nil when it has no kcfs_sync schema.
    private func installedVersion() throws -> Int? {
        let meta = try connection.execute("SELECT to_regclass('kcfs_sync.meta') IS NOT NULL")
        guard try meta.bool(0, 0) else { return nil }
        let row = try connection.execute("SELECT value FROM kcfs_sync.meta WHERE key = 'schema_version'")
        return row.rowCount == 0 ? 0 : Int(try row.int64(0, 0))
    }

    /// Creates the kcfs_sync schema when absent (the connecting role needs CREATE on the
    /// database; it then owns the tables: the single-user setup), with the device role's grants
    /// when this role may make roles. A database whose schema is newer is refused by
    /// `.newerSchema` and left as it was; one at this version is left as it is.
    public func ensureSchema() throws(SyncServerError) {
        try run {
            try connection.transaction {
                // Two devices starting at once on an empty database: one creates, one waits.
                try connection.execute("SELECT pg_advisory_xact_lock(7306585613047125041)")
                if let found = try installedVersion() {
                    if found > Self.schemaVersion {
                        throw SyncServerError.newerSchema(found: found, supported: Self.schemaVersion)
                    }
                    if found == Self.schemaVersion { return }
                }
                try connection.executeScript(SyncServerSchema.schemaSQL)
                let mayGrant = try connection.execute(
                    "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user")
                if mayGrant.rowCount == 1, try mayGrant.bool(0, 0) {
                    try connection.executeScript(SyncServerSchema.grantsSQL)
                }
            }
        }
    }

    /// Checks, without changing anything, that the database holds this program's schema version.
    public func checkSchema() throws(SyncServerError) {
        try run {
            guard let found = try installedVersion(), found > 0 else { throw SyncServerError.schemaMissing }
            if found > Self.schemaVersion {
                throw SyncServerError.newerSchema(found: found, supported: Self.schemaVersion)
            }
            if found < Self.schemaVersion {
                throw SyncServerError.olderSchema(found: found, supported: Self.schemaVersion)
            }
        }
    }

    // MARK: Groups

    static func require(_ bytes: [UInt8], count: Int, _ what: String) throws(SyncServerError) {
        guard bytes.count == count else { throw .invalidArgument("\(what) must be \(count) bytes, not \(bytes.count)") }
    }

    /// The NOTIFY channel of a group: a name of 37 characters, within PostgreSQL's 63.
    static func channel(group: [UInt8]) -> String { "kcfs_" + hex(group) }

    static func hex(_ bytes: [UInt8]) -> String { AttributeText.hex(bytes) }

    /// Creates a group (16 bytes) owned by the connecting role; nothing when it exists. A group
    /// id another role owns is `.unknownGroup` (its row stays invisible).
    public func createGroup(_ groupID: [UInt8]) throws(SyncServerError) {
        try Self.require(groupID, count: 16, "a group id")
        try run {
            try connection.execute(
                "INSERT INTO kcfs_sync.groups (group_id) VALUES ($1) ON CONFLICT (group_id) DO NOTHING",
                [.bytes(groupID)])
        }
        guard try groupExists(groupID) else { throw .unknownGroup }
    }

    public func groupExists(_ groupID: [UInt8]) throws(SyncServerError) -> Bool {
        try run {
            try connection.execute("SELECT 1 FROM kcfs_sync.groups WHERE group_id = $1", [.bytes(groupID)]).rowCount
                == 1
        }
    }

    /// Deletes a group with its records and devices.
    public func deleteGroup(_ groupID: [UInt8]) throws(SyncServerError) {
        try run {
            try connection.execute("DELETE FROM kcfs_sync.groups WHERE group_id = $1", [.bytes(groupID)])
        }
    }

    // MARK: Records

    /// Writes a batch in one transaction, in order, each request by the rules of
    /// `kcfs_sync.push_one`: the same version and bytes again is `.alreadyStored`; a server
    /// version other than `expectedVersion` is `.conflict` (nothing written for it); otherwise
    /// the group's counter is bumped and the record stored at that seq. The group's row stays
    /// locked until commit, so the group's pushes serialize and commit in seq order; one NOTIFY
    /// on the group's channel follows a batch that stored anything (delivered at commit).
    ///
    /// With `device`, the same transaction records that device as seen (`touchDevice`), its
    /// cursor moved past the batch's own writes when they follow `device.cursor` with nothing
    /// between (`PushOutcome.contiguousEnd`): one server commit for a round that uploads.
    /// The NOTIFY's payload is the highest seq stored, so a device that hears its own push can
    /// tell it brings nothing new (`waitForNotice`).
    public func push(
        group: [UInt8], _ requests: [PushRequest], device: (id: [UInt8], cursor: Int64)? = nil
    ) throws(SyncServerError) -> [PushOutcome] {
        try Self.require(group, count: 16, "a group id")
        if let device, !(1...64).contains(device.id.count) {
            throw .invalidArgument("a device id must be 1 to 64 bytes")
        }
        for request in requests {
            try Self.require(request.recordID, count: 32, "a record id")
            // Versions only grow: two contents under one version would make a repeated upload
            // (same version, same bytes) impossible to tell from a different write.
            guard request.version > request.expectedVersion else {
                throw .invalidArgument("a record's new version must be above the version it replaces")
            }
        }
        return try run {
            try connection.transaction {
                let locked = try connection.execute(
                    "SELECT seq FROM kcfs_sync.groups WHERE group_id = $1 FOR UPDATE", [.bytes(group)])
                guard locked.rowCount == 1 else { throw SyncServerError.unknownGroup }
                // The whole batch in one statement (one round trip, not one per record): each
                // request through push_one, in the batch's order.
                let rows = try connection.execute(
                    """
                    SELECT o.outcome, o.out_seq, o.current_version
                    FROM unnest($2::bytea[], $3::bigint[], $4::bigint[], $5::boolean[], $6::bytea[])
                        WITH ORDINALITY AS r(record_id, expected, version, deleted, blob, n)
                    CROSS JOIN LATERAL kcfs_sync.push_one($1, r.record_id, r.expected, r.version, r.deleted, r.blob) o
                    ORDER BY r.n
                    """,
                    [
                        .bytes(group), .byteaArray(requests.map(\.recordID)),
                        .intArray(requests.map(\.expectedVersion)),
                        .intArray(requests.map(\.version)), .boolArray(requests.map(\.deleted)),
                        .byteaArray(requests.map(\.blob)),
                    ])
                guard rows.rowCount == requests.count else {
                    throw PGError.decode("push answered \(rows.rowCount) rows for \(requests.count) records")
                }
                var outcomes: [PushOutcome] = []
                outcomes.reserveCapacity(requests.count)
                for i in 0..<rows.rowCount {
                    switch try rows.int64(i, 0) {
                    case 0: outcomes.append(.stored(seq: try rows.int64(i, 1)))
                    case 1: outcomes.append(.alreadyStored(seq: try rows.int64(i, 1)))
                    default: outcomes.append(.conflict(currentVersion: try rows.int64(i, 2)))
                    }
                }
                let stored = outcomes.compactMap { if case .stored(let seq) = $0 { seq } else { nil } }
                if let highest = stored.max() {
                    try connection.execute(
                        "SELECT pg_notify($1, $2)", [.text(Self.channel(group: group)), .text(String(highest))])
                }
                if let device {
                    let cursor = PushOutcome.contiguousEnd(after: device.cursor, outcomes) ?? device.cursor
                    try upsertDevice(group: group, device: device.id, cursor: cursor)
                }
                return outcomes
            }
        }
    }

    /// The group's records written after `seq`, in seq order, at most `limit`: a reader that
    /// follows its cursor sees every write exactly once (tombstones too, until purged).
    public func pull(group: [UInt8], after seq: Int64, limit: Int) throws(SyncServerError) -> [ServerRecord] {
        try run {
            let rows = try connection.execute(
                """
                SELECT record_id, version, seq, deleted, blob FROM kcfs_sync.records
                WHERE group_id = $1 AND seq > $2 ORDER BY seq LIMIT $3
                """, [.bytes(group), .int(seq), .int(Int64(max(0, limit)))])
            var records: [ServerRecord] = []
            records.reserveCapacity(rows.rowCount)
            for i in 0..<rows.rowCount {
                records.append(
                    ServerRecord(
                        recordID: try rows.bytes(i, 0), version: try rows.int64(i, 1), seq: try rows.int64(i, 2),
                        deleted: try rows.bool(i, 3), blob: try rows.bytes(i, 4)))
            }
            return records
        }
    }

    /// The group's last seq (0 before its first write) and the seq its tombstones were purged
    /// up to (0 when none: a device whose cursor is below it may have missed a deletion and
    /// must compare its whole state), in one query.
    public func groupState(group: [UInt8]) throws(SyncServerError) -> (lastSeq: Int64, purgedThrough: Int64) {
        try run {
            let row = try connection.execute(
                "SELECT seq, purged_through FROM kcfs_sync.groups WHERE group_id = $1", [.bytes(group)])
            guard row.rowCount == 1 else { throw SyncServerError.unknownGroup }
            return (try row.int64(0, 0), try row.int64(0, 1))
        }
    }

    /// The group's last seq (0 before its first write).
    public func lastSeq(group: [UInt8]) throws(SyncServerError) -> Int64 { try groupState(group: group).lastSeq }

    /// Tombstones were purged up to this seq (`groupState`).
    public func purgedThrough(group: [UInt8]) throws(SyncServerError) -> Int64 {
        try groupState(group: group).purgedThrough
    }

    /// Deletes the group's tombstones last written more than `olderThan` ago and raises
    /// `purgedThrough` to the highest seq deleted, under the group's lock (a push waits).
    public func purgeTombstones(group: [UInt8], olderThan: Duration) throws(SyncServerError) {
        let (seconds, attoseconds) = olderThan.components
        let microseconds = seconds * 1_000_000 + attoseconds / 1_000_000_000_000
        try run {
            try connection.transaction {
                let locked = try connection.execute(
                    "SELECT 1 FROM kcfs_sync.groups WHERE group_id = $1 FOR UPDATE", [.bytes(group)])
                guard locked.rowCount == 1 else { throw SyncServerError.unknownGroup }
                try connection.execute(
                    """
                    WITH gone AS (
                        DELETE FROM kcfs_sync.records
                        WHERE group_id = $1 AND deleted AND updated < now() - $2::bigint * interval '1 microsecond'
                        RETURNING seq)
                    UPDATE kcfs_sync.groups SET purged_through = greatest(purged_through, (SELECT max(seq) FROM gone))
                    WHERE group_id = $1
                    """, [.bytes(group), .int(microseconds)])
            }
        }
    }

    // MARK: Changes

    /// LISTENs on the group's channel: `waitForChange` then wakes after its pushes commit, this
    /// connection's own included (PostgreSQL delivers a NOTIFY to its sender's LISTEN too).
    public func listen(group: [UInt8]) throws(SyncServerError) {
        try Self.require(group, count: 16, "a group id")
        try run { try connection.listen(Self.channel(group: group)) }
    }

    /// Waits for a NOTIFY on a channel this connection listens to: true when one came; false
    /// when `timeout` passed or `wakeFD` became readable (the caller drains it).
    public func waitForChange(timeout: Duration?, wakeFD: Int32? = nil) throws(SyncServerError) -> Bool {
        try run { !(try connection.waitForNotifications(timeout: timeout, wakeFD: wakeFD)).isEmpty }
    }

    /// As `waitForChange`, with what the NOTIFYs said: the highest seq the pushes heard stored
    /// (nil when one came without a number, as an older program's does), or nil when none came.
    public func waitForNotice(timeout: Duration?, wakeFD: Int32? = nil) throws(SyncServerError) -> ChangeNotice? {
        try run {
            let heard = try connection.waitForNotifications(timeout: timeout, wakeFD: wakeFD)
            if heard.isEmpty { return nil }
            let seqs = heard.map { Int64($0.payload) }
            return ChangeNotice(highestSeq: seqs.contains(nil) ? nil : seqs.compactMap { $0 }.max())
        }
    }

    // MARK: Devices

    /// Records that `device` (1…64 bytes) was seen now with its pull cursor at `cursor`.
    public func touchDevice(group: [UInt8], device: [UInt8], cursor: Int64) throws(SyncServerError) {
        guard (1...64).contains(device.count) else { throw .invalidArgument("a device id must be 1 to 64 bytes") }
        try run { try upsertDevice(group: group, device: device, cursor: cursor) }
    }

    private func upsertDevice(group: [UInt8], device: [UInt8], cursor: Int64) throws {
        let done = try connection.execute(
            """
            INSERT INTO kcfs_sync.devices (group_id, device, last_seen, cursor_seq)
            SELECT $1, $2, now(), $3 WHERE EXISTS (SELECT 1 FROM kcfs_sync.groups WHERE group_id = $1)
            ON CONFLICT (group_id, device) DO UPDATE SET last_seen = now(), cursor_seq = EXCLUDED.cursor_seq
            """, [.bytes(group), .bytes(device), .int(cursor)])
        guard done.affectedRows == 1 else { throw SyncServerError.unknownGroup }
    }

    /// The group's devices, by id.
    public func devices(group: [UInt8]) throws(SyncServerError) -> [(device: [UInt8], lastSeen: Date, cursor: Int64)] {
        try run {
            let rows = try connection.execute(
                """
                SELECT device, extract(epoch FROM last_seen)::float8, cursor_seq FROM kcfs_sync.devices
                WHERE group_id = $1 ORDER BY device
                """, [.bytes(group)])
            return try (0..<rows.rowCount).map { i in
                (
                    device: try rows.bytes(i, 0), lastSeen: Date(timeIntervalSince1970: try rows.double(i, 1)),
                    cursor: try rows.int64(i, 2)
                )
            }
        }
    }
}
