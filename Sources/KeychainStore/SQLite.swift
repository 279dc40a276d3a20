import CSQLite
import FoundationEssentials
import Glibc

/// Errors of the storage layer. Messages name SQLite's reason, never row contents.
public enum StoreError: Error, Equatable, Sendable {
    /// A UNIQUE constraint failed: an item with the same primary-key index exists.
    case duplicate
    /// The file does not exist.
    case noSuchFile(String)
    /// The file exists but is not a SQLite database, or not one of ours.
    case notAVault(String)
    /// The file's schema version is newer than this program understands.
    case newerFormat(found: Int, supported: Int)
    /// Another writer held the database longer than the busy timeout.
    case busy
    /// Any other SQLite failure: result code and SQLite's message.
    case sqlite(code: Int32, message: String)
}

/// One SQLite connection, used by one thread at a time (the owner serialises access).
/// Statements are prepared once and cached by their SQL text.
final class Connection: @unchecked Sendable {
    // @unchecked: a C handle and a statement cache, used only with VaultStore's mutex held.
    let handle: OpaquePointer
    private var cache: [String: OpaquePointer] = [:]
    /// Tables seen to exist through this connection. No table is ever dropped, so a table once
    /// seen stays, unless the transaction (or savepoint) that made it rolls back: every
    /// rollback on the connection clears this.
    var tablesSeen: Set<String> = []

    init(path: String, create: Bool) throws {
        var db: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            if let db { sqlite3_close_v2(db) }
            if rc == SQLITE_CANTOPEN && !FileManager.default.fileExists(atPath: path) {
                throw StoreError.noSuchFile(path)
            }
            throw StoreError.sqlite(code: rc, message: message)
        }
        handle = db
        sqlite3_extended_result_codes(db, 1)
        // Concurrent writers (two CLIs, a CLI and the daemon) wait for each other instead of failing.
        sqlite3_busy_timeout(db, 30_000)
    }

    deinit {
        for stmt in cache.values { sqlite3_finalize(stmt) }
        sqlite3_close_v2(handle)
    }

    func error(_ rc: Int32) -> StoreError {
        let primary = rc & 0xff
        if rc == kcfs_sqlite_constraint_unique || rc == kcfs_sqlite_constraint_primarykey { return .duplicate }
        if primary == SQLITE_BUSY || primary == SQLITE_LOCKED { return .busy }
        if primary == SQLITE_NOTADB { return .notAVault("not a SQLite database") }
        return .sqlite(code: rc, message: String(cString: sqlite3_errmsg(handle)))
    }

    /// Rows changed by the last INSERT, UPDATE or DELETE on this connection.
    var changes: Int32 { sqlite3_changes(handle) }

    func execute(_ sql: String) throws {
        let rc = sqlite3_exec(handle, sql, nil, nil, nil)
        guard rc == SQLITE_OK else { throw error(rc) }
    }

    /// Runs one cached statement with `bindings`, calling `row` for each result row.
    func run(_ sql: String, _ bindings: [Value] = [], row: (Row) throws -> Void = { _ in }) throws {
        let stmt = try prepared(sql)
        defer { sqlite3_reset(stmt); sqlite3_clear_bindings(stmt) }
        for (i, value) in bindings.enumerated() {
            let idx = Int32(i + 1)
            let rc: Int32
            switch value {
            case .integer(let v): rc = sqlite3_bind_int64(stmt, idx, v)
            case .text(let v): rc = kcfs_sqlite3_bind_text_copy(stmt, idx, v, -1)
            case .blob(let v):
                // A zero-length blob must still bind as a blob, not NULL.
                rc = v.withUnsafeBytes {
                    kcfs_sqlite3_bind_blob_copy(
                        stmt, idx, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32($0.count))
                }
            case .null: rc = sqlite3_bind_null(stmt, idx)
            }
            guard rc == SQLITE_OK else { throw error(rc) }
        }
        while true {
            let rc = sqlite3_step(stmt)
            if rc == SQLITE_DONE { return }
            guard rc == SQLITE_ROW else { throw error(rc) }
            try row(Row(stmt: stmt))
        }
    }

    private func prepared(_ sql: String) throws -> OpaquePointer {
        if let stmt = cache[sql] { return stmt }
        var stmt: OpaquePointer?
        let rc = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &stmt, nil)
        guard rc == SQLITE_OK, let stmt else { throw error(rc) }
        cache[sql] = stmt
        return stmt
    }

    enum Value {
        case integer(Int64)
        case text(String)
        case blob([UInt8])
        case null
    }

    struct Row {
        let stmt: OpaquePointer
        func int(_ i: Int32) -> Int64 { sqlite3_column_int64(stmt, i) }
        func text(_ i: Int32) -> String {
            guard let p = sqlite3_column_text(stmt, i) else { return "" }
            return String(cString: p)
        }
        func blob(_ i: Int32) -> [UInt8] {
            let n = Int(sqlite3_column_bytes(stmt, i))
            guard n > 0, let p = sqlite3_column_blob(stmt, i) else { return [] }
            return [UInt8](UnsafeRawBufferPointer(start: p, count: n))
        }
    }
}
