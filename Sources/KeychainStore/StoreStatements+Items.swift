import FoundationEssentials
import Glibc
import CSQLite
import Synchronization

extension Statements {
    // MARK: Items

    static let columns = "id, class, pidx, sidx, version, data_gen, attrs, item_key, data, length(data)"
    /// Metadata reads skip the data column: listing a directory never loads secrets.
    static let metadataColumns = "id, class, pidx, sidx, version, data_gen, attrs, item_key, x'', length(data)"

    static func item(_ row: Connection.Row) -> StoredItem {
        var item = StoredItem(
            id: row.int(0), itemClass: row.text(1), primaryIndex: row.blob(2), secondaryIndex: row.blob(3),
            version: row.int(4), dataGeneration: row.int(5), sealedAttributes: row.blob(6),
            wrappedItemKey: row.blob(7), sealedData: row.blob(8))
        item.sealedDataLength = Int(row.int(9))
        return item
    }

    static func columns(withData: Bool) -> String { withData ? columns : metadataColumns }

    /// The by-id reads, spelled once: every open and stat reads one row, and building the SQL
    /// text for each was part of what that cost.
    static let itemByID = "SELECT \(columns) FROM items WHERE id = ?"
    static let itemMetadataByID = "SELECT \(metadataColumns) FROM items WHERE id = ?"

    func nextItemID() throws -> Int64 {
        var next: Int64 = 1
        try connection.run("SELECT seq FROM sqlite_sequence WHERE name = 'items'") { next = $0.int(0) + 1 }
        return next
    }

    /// Ids are never reused: AUTOINCREMENT.
    func insert(_ item: StoredItem, id: Int64) throws {
        try connection.run(
            """
            INSERT INTO items(id, class, pidx, sidx, version, data_gen, attrs, item_key, data)
            VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)
            """,
            [
                .integer(id), .text(item.itemClass), .blob(item.primaryIndex), .blob(item.secondaryIndex),
                .integer(item.version), .integer(item.dataGeneration), .blob(item.sealedAttributes),
                .blob(item.wrappedItemKey), .blob(item.sealedData),
            ])
        if let tags = item.attributeTags { try setAttributeTags(tags, itemID: id) }
    }

    func replace(_ item: StoredItem) throws {
        // Most replacements change neither the class nor either blind index (a secret
        // rewritten through the mount): leaving those columns out of the SET list lets SQLite
        // leave their three indexes alone, so such a commit writes the row's page and the
        // manifest's instead of five pages. Otherwise (a rename, a moved class), every column.
        try connection.run(
            """
            UPDATE items SET version = ?, data_gen = ?, attrs = ?, item_key = ?, data = ?
            WHERE id = ? AND class = ? AND pidx = ? AND sidx = ?
            """,
            [
                .integer(item.version), .integer(item.dataGeneration), .blob(item.sealedAttributes),
                .blob(item.wrappedItemKey), .blob(item.sealedData), .integer(item.id), .text(item.itemClass),
                .blob(item.primaryIndex), .blob(item.secondaryIndex),
            ])
        if connection.changes == 0 { try replaceEveryColumn(item) }
        if let tags = item.attributeTags { try setAttributeTags(tags, itemID: item.id) }
    }

    func replaceEveryColumn(_ item: StoredItem) throws {
        try connection.run(
            """
            UPDATE items SET class = ?, pidx = ?, sidx = ?, version = ?, data_gen = ?, attrs = ?, item_key = ?, data = ?
            WHERE id = ?
            """,
            [
                .text(item.itemClass), .blob(item.primaryIndex), .blob(item.secondaryIndex),
                .integer(item.version), .integer(item.dataGeneration), .blob(item.sealedAttributes),
                .blob(item.wrappedItemKey), .blob(item.sealedData), .integer(item.id),
            ])
    }

    func delete(id: Int64) throws {
        try connection.run("DELETE FROM items WHERE id = ?", [.integer(id)])
        if try hasAttributeIndex() { try setAttributeTags([], itemID: id) }
    }

    func item(id: Int64, withData: Bool) throws -> StoredItem? {
        var found: StoredItem?
        try connection.run(withData ? Self.itemByID : Self.itemMetadataByID, [.integer(id)]) {
            found = Self.item($0)
        }
        return found
    }

    func item(primaryIndex: [UInt8], withData: Bool) throws -> StoredItem? {
        var found: StoredItem?
        try connection.run(
            "SELECT \(Self.columns(withData: withData)) FROM items WHERE pidx = ?", [.blob(primaryIndex)]
        ) {
            found = Self.item($0)
        }
        return found
    }

    func items(secondaryIndex: [UInt8], withData: Bool) throws -> [StoredItem] {
        var found: [StoredItem] = []
        try connection.run(
            "SELECT \(Self.columns(withData: withData)) FROM items WHERE sidx = ? ORDER BY id", [.blob(secondaryIndex)]
        ) {
            found.append(Self.item($0))
        }
        return found
    }

    func exists(secondaryIndex: [UInt8]) throws -> Bool {
        var found = false
        try connection.run("SELECT 1 FROM items WHERE sidx = ? LIMIT 1", [.blob(secondaryIndex)]) { _ in found = true }
        return found
    }

    func items(itemClass: String, withData: Bool) throws -> [StoredItem] {
        var found: [StoredItem] = []
        try connection.run(
            "SELECT \(Self.columns(withData: withData)) FROM items WHERE class = ? ORDER BY id", [.text(itemClass)]
        ) {
            found.append(Self.item($0))
        }
        return found
    }

    func items(itemClass: String, afterID: Int64, limit: Int, withData: Bool) throws -> [StoredItem] {
        var found: [StoredItem] = []
        try connection.run(
            "SELECT \(Self.columns(withData: withData)) FROM items WHERE class = ? AND id > ? ORDER BY id LIMIT ?",
            [.text(itemClass), .integer(afterID), .integer(Int64(limit))]
        ) {
            found.append(Self.item($0))
        }
        return found
    }

    func forEachItem(_ body: (StoredItem) throws -> Void) throws {
        try connection.run("SELECT \(Self.columns) FROM items ORDER BY id") { try body(Self.item($0)) }
    }

    func itemCount() throws -> Int {
        var n = 0
        try connection.run("SELECT count(*) FROM items") { n = Int($0.int(0)) }
        return n
    }
}
