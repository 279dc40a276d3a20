import FoundationEssentials
import Glibc

/// One row of the change log (vault format 7, the core's ChangeLog.swift): its sequence number,
/// the item's class and id, the operation's code, and the sealed names (never a name in clear).
public struct StoredChange: Sendable, Equatable {
    public var seq: Int64
    public var itemClass: String
    public var itemID: Int64
    public var operation: Int64
    public var sealed: [UInt8]
    public init(seq: Int64, itemClass: String, itemID: Int64, operation: Int64, sealed: [UInt8]) {
        self.seq = seq
        self.itemClass = itemClass
        self.itemID = itemID
        self.operation = operation
        self.sealed = sealed
    }
}

extension Statements {
    /// The change log (vault format 7): one row per committed item change, written in the
    /// transaction that makes the change, numbered by the vault's own counter (`seq`, one more
    /// than the last row's), the oldest pruned in the same transaction.
    static let changeLogTable = """
        CREATE TABLE IF NOT EXISTS change_log(
            seq INTEGER PRIMARY KEY, class TEXT NOT NULL, item_id INTEGER NOT NULL,
            op INTEGER NOT NULL, sealed BLOB NOT NULL);
        """

    func appendChange(_ change: StoredChange) throws {
        try connection.run(
            "INSERT INTO change_log(seq, class, item_id, op, sealed) VALUES(?, ?, ?, ?, ?)",
            [
                .integer(change.seq), .text(change.itemClass), .integer(change.itemID), .integer(change.operation),
                .blob(change.sealed),
            ])
    }

    func pruneChanges(through seq: Int64) throws {
        try connection.run("DELETE FROM change_log WHERE seq <= ?", [.integer(seq)])
    }

    /// Two probes of the primary key's ends: one `min(seq), max(seq)` statement scans the table
    /// (SQLite takes an end of the index only for a lone min or max), and every commit asks.
    func changeLogBounds() throws -> (first: Int64, last: Int64)? {
        guard try hasTable("change_log") else { return nil }
        var first: Int64?, last: Int64?
        try connection.run("SELECT seq FROM change_log ORDER BY seq LIMIT 1") { first = $0.int(0) }
        try connection.run("SELECT seq FROM change_log ORDER BY seq DESC LIMIT 1") { last = $0.int(0) }
        guard let first, let last else { return nil }
        return (first, last)
    }

    func loggedChanges(after seq: Int64, limit: Int) throws -> [StoredChange] {
        guard try hasTable("change_log") else { return [] }
        var out: [StoredChange] = []
        try connection.run(
            "SELECT seq, class, item_id, op, sealed FROM change_log WHERE seq > ? ORDER BY seq LIMIT ?",
            [.integer(seq), .integer(Int64(limit))]
        ) { row in
            out.append(
                StoredChange(
                    seq: row.int(0), itemClass: row.text(1), itemID: row.int(2), operation: row.int(3),
                    sealed: row.blob(4)))
        }
        return out
    }
}
