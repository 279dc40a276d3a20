import FoundationEssentials
import Glibc
import CSQLite
import Synchronization

/// The statements of one connection, handed to the body of a `lookup`, `read` or `write` while
/// the store's mutex is held; valid only there.
struct Statements: ItemStoreWriter {
    let connection: Connection

    func savepoint<R>(_ body: () throws -> R) throws -> R {
        try connection.run("SAVEPOINT member")
        do {
            let result = try body()
            try connection.run("RELEASE member")
            return result
        } catch {
            try? connection.execute("ROLLBACK TO member")
            try? connection.execute("RELEASE member")
            connection.tablesSeen = []
            throw error
        }
    }

    // MARK: Meta and class keys

    func meta(_ name: String) throws -> [UInt8]? {
        var value: [UInt8]?
        try connection.run("SELECT value FROM meta WHERE name = ?", [.text(name)]) { value = $0.blob(0) }
        return value
    }

    func meta(_ names: [String]) throws -> [String: [UInt8]] {
        var values: [String: [UInt8]] = [:]
        // One scan of the table (a page of a few small rows: the header's fields and the
        // manifest), keeping the names asked for. `name IN (?, …)` cost SQLite more than the
        // seven lookups it replaced (it builds an ephemeral index of the list on every run).
        try connection.run("SELECT name, value FROM meta") { row in
            let name = row.text(0)
            if names.contains(name) { values[name] = row.blob(1) }
        }
        return values
    }

    func setMeta(_ name: String, _ value: [UInt8]) throws {
        try connection.run(
            "INSERT INTO meta(name, value) VALUES(?, ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value",
            [.text(name), .blob(value)])
    }

    func classKeys() throws -> [String: [UInt8]] {
        var keys: [String: [UInt8]] = [:]
        try connection.run("SELECT protection, wrapped FROM class_keys") { keys[$0.text(0)] = $0.blob(1) }
        return keys
    }

    func setClassKey(_ protection: String, wrapped: [UInt8]) throws {
        try connection.run(
            "INSERT OR REPLACE INTO class_keys(protection, wrapped) VALUES(?, ?)",
            [.text(protection), .blob(wrapped)])
    }
}
