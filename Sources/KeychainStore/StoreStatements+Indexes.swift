import FoundationEssentials
import Glibc
import CSQLite
import Synchronization

extension Statements {
    // MARK: Attribute index

    func upgradeSchema() throws {
        try connection.execute(
            """
            CREATE TABLE IF NOT EXISTS attr_index(
                tag BLOB NOT NULL, item_id INTEGER NOT NULL, PRIMARY KEY(tag, item_id)) WITHOUT ROWID;
            CREATE INDEX IF NOT EXISTS attr_index_by_item ON attr_index(item_id);
            \(Self.bucketTable)
            \(Self.nameListTables)
            \(Self.changeLogTable)
            \(Self.syncTables)
            PRAGMA user_version = \(VaultStore.schemaVersion);
            """)
    }

    /// The manifest's buckets (vault format 4): one row per bucket of item ids that holds rows
    /// or index rows, its accumulator and row count (the core's ManifestBuckets.swift).
    static let bucketTable = """
        CREATE TABLE IF NOT EXISTS manifest_bucket(
            bucket INTEGER PRIMARY KEY, accumulator BLOB NOT NULL, count INTEGER NOT NULL);
        """

    /// The name lists (vault format 5, the core's NameLists.swift): each secondary-index value's
    /// list in sealed chunks of about one page, keyed by the lowest id a chunk holds, and one
    /// bucket per value (accumulator over its chunks, chunk count) that the manifest covers.
    static let nameListTables = """
        CREATE TABLE IF NOT EXISTS name_chunk(
            sidx BLOB NOT NULL, chunk INTEGER NOT NULL, sealed BLOB NOT NULL, PRIMARY KEY(sidx, chunk)) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS name_bucket(
            sidx BLOB PRIMARY KEY, accumulator BLOB NOT NULL, count INTEGER NOT NULL) WITHOUT ROWID;
        """

    /// Whether the file has a table yet (a vault not yet migrated may not): asked of
    /// `sqlite_master` until the answer is yes, then remembered by the connection (`tablesSeen`):
    /// without that, every rewrite of a secret asked it again.
    func hasTable(_ name: String) throws -> Bool {
        if connection.tablesSeen.contains(name) { return true }
        var found = false
        try connection.run("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", [.text(name)]) { _ in
            found = true
        }
        if found { connection.tablesSeen.insert(name) }
        return found
    }

    // MARK: Name lists

    func nameChunks(secondaryIndex: [UInt8]) throws -> [(chunk: Int64, sealed: [UInt8])] {
        guard try hasTable("name_chunk") else { return [] }
        var chunks: [(chunk: Int64, sealed: [UInt8])] = []
        try connection.run(
            "SELECT chunk, sealed FROM name_chunk WHERE sidx = ? ORDER BY chunk", [.blob(secondaryIndex)]
        ) { chunks.append(($0.int(0), $0.blob(1))) }
        return chunks
    }

    func nameChunk(secondaryIndex: [UInt8], holding id: Int64) throws -> (chunk: Int64, sealed: [UInt8])? {
        guard try hasTable("name_chunk") else { return nil }
        var found: (chunk: Int64, sealed: [UInt8])?
        try connection.run(
            "SELECT chunk, sealed FROM name_chunk WHERE sidx = ? AND chunk <= ? ORDER BY chunk DESC LIMIT 1",
            [.blob(secondaryIndex), .integer(id)]
        ) { found = ($0.int(0), $0.blob(1)) }
        if found != nil { return found }
        try connection.run(
            "SELECT chunk, sealed FROM name_chunk WHERE sidx = ? ORDER BY chunk LIMIT 1", [.blob(secondaryIndex)]
        ) { found = ($0.int(0), $0.blob(1)) }
        return found
    }

    func forEachNameChunk(_ body: ([UInt8], Int64, [UInt8]) throws -> Void) throws {
        guard try hasTable("name_chunk") else { return }
        try connection.run("SELECT sidx, chunk, sealed FROM name_chunk ORDER BY sidx, chunk") {
            try body($0.blob(0), $0.int(1), $0.blob(2))
        }
    }

    func nameBuckets() throws -> [[UInt8]: (accumulator: [UInt8], count: Int64)] {
        guard try hasTable("name_bucket") else { return [:] }
        var buckets: [[UInt8]: (accumulator: [UInt8], count: Int64)] = [:]
        try connection.run("SELECT sidx, accumulator, count FROM name_bucket") {
            buckets[$0.blob(0)] = ($0.blob(1), $0.int(2))
        }
        return buckets
    }

    func forEachNameBucket(_ body: ([UInt8], [UInt8], Int64) throws -> Void) throws {
        guard try hasTable("name_bucket") else { return }
        try connection.run("SELECT sidx, accumulator, count FROM name_bucket") {
            try body($0.blob(0), $0.blob(1), $0.int(2))
        }
    }

    func nameBucket(secondaryIndex: [UInt8]) throws -> (accumulator: [UInt8], count: Int64)? {
        guard try hasTable("name_bucket") else { return nil }
        var found: (accumulator: [UInt8], count: Int64)?
        try connection.run("SELECT accumulator, count FROM name_bucket WHERE sidx = ?", [.blob(secondaryIndex)]) {
            found = ($0.blob(0), $0.int(1))
        }
        return found
    }

    func setNameChunk(secondaryIndex: [UInt8], chunk: Int64, sealed: [UInt8]?) throws {
        guard let sealed else {
            try connection.run(
                "DELETE FROM name_chunk WHERE sidx = ? AND chunk = ?", [.blob(secondaryIndex), .integer(chunk)])
            return
        }
        try connection.run(
            "INSERT OR REPLACE INTO name_chunk(sidx, chunk, sealed) VALUES(?, ?, ?)",
            [.blob(secondaryIndex), .integer(chunk), .blob(sealed)])
    }

    func setNameBucket(secondaryIndex: [UInt8], _ value: (accumulator: [UInt8], count: Int64)?) throws {
        guard let value else {
            try connection.run("DELETE FROM name_bucket WHERE sidx = ?", [.blob(secondaryIndex)])
            return
        }
        try connection.run(
            "INSERT OR REPLACE INTO name_bucket(sidx, accumulator, count) VALUES(?, ?, ?)",
            [.blob(secondaryIndex), .blob(value.accumulator), .integer(value.count)])
    }

    func clearNameLists() throws {
        try connection.run("DELETE FROM name_chunk")
        try connection.run("DELETE FROM name_bucket")
    }

    /// Whether the file has the attribute index yet (a vault of schema 1 not yet migrated has not).
    func hasAttributeIndex() throws -> Bool { try hasTable("attr_index") }

    func setAttributeTags(_ tags: [[UInt8]], itemID: Int64) throws {
        try connection.run("DELETE FROM attr_index WHERE item_id = ?", [.integer(itemID)])
        for tag in tags {
            try connection.run(
                "INSERT OR IGNORE INTO attr_index(tag, item_id) VALUES(?, ?)", [.blob(tag), .integer(itemID)])
        }
    }

    func attributeTags(itemID: Int64) throws -> [[UInt8]] {
        guard try hasAttributeIndex() else { return [] }
        var tags: [[UInt8]] = []
        try connection.run("SELECT tag FROM attr_index WHERE item_id = ? ORDER BY tag", [.integer(itemID)]) {
            tags.append($0.blob(0))
        }
        return tags
    }

    func forEachAttributeTag(_ body: (Int64, [UInt8]) throws -> Void) throws {
        guard try hasAttributeIndex() else { return }
        try connection.run("SELECT item_id, tag FROM attr_index ORDER BY item_id, tag") {
            try body($0.int(0), $0.blob(1))
        }
    }

    func forEachItem(ids: ClosedRange<Int64>, _ body: (StoredItem) throws -> Void) throws {
        try connection.run(
            "SELECT \(Self.columns) FROM items WHERE id BETWEEN ? AND ? ORDER BY id",
            [.integer(ids.lowerBound), .integer(ids.upperBound)]
        ) { try body(Self.item($0)) }
    }

    func forEachAttributeTag(itemIDs ids: ClosedRange<Int64>, _ body: (Int64, [UInt8]) throws -> Void) throws {
        guard try hasAttributeIndex() else { return }
        try connection.run(
            "SELECT item_id, tag FROM attr_index WHERE item_id BETWEEN ? AND ? ORDER BY item_id, tag",
            [.integer(ids.lowerBound), .integer(ids.upperBound)]
        ) { try body($0.int(0), $0.blob(1)) }
    }

    func highestStoredID() throws -> Int64 {
        var highest: Int64 = 0
        try connection.run("SELECT max(id) FROM items") { highest = max(highest, $0.int(0)) }
        if try hasAttributeIndex() {
            try connection.run("SELECT max(item_id) FROM attr_index") { highest = max(highest, $0.int(0)) }
        }
        return highest
    }

    // MARK: Manifest buckets

    func hasBucketTable() throws -> Bool {
        var found = false
        try connection.run("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'manifest_bucket'") { _ in
            found = true
        }
        return found
    }

    func manifestBuckets() throws -> [Int64: (accumulator: [UInt8], count: Int64)] {
        guard try hasBucketTable() else { return [:] }
        var buckets: [Int64: (accumulator: [UInt8], count: Int64)] = [:]
        try connection.run("SELECT bucket, accumulator, count FROM manifest_bucket") {
            buckets[$0.int(0)] = ($0.blob(1), $0.int(2))
        }
        return buckets
    }

    func manifestBucket(_ bucket: Int64) throws -> (accumulator: [UInt8], count: Int64)? {
        var found: (accumulator: [UInt8], count: Int64)?
        try connection.run("SELECT accumulator, count FROM manifest_bucket WHERE bucket = ?", [.integer(bucket)]) {
            found = ($0.blob(0), $0.int(1))
        }
        return found
    }

    func setManifestBucket(_ bucket: Int64, _ value: (accumulator: [UInt8], count: Int64)?) throws {
        guard let value else {
            try connection.run("DELETE FROM manifest_bucket WHERE bucket = ?", [.integer(bucket)])
            return
        }
        try connection.run(
            "INSERT OR REPLACE INTO manifest_bucket(bucket, accumulator, count) VALUES(?, ?, ?)",
            [.integer(bucket), .blob(value.accumulator), .integer(value.count)])
    }

    func clearManifestBuckets() throws {
        try connection.run("DELETE FROM manifest_bucket")
    }

    /// One index range scan per tag, intersected by SQLite.
    func itemIDs(withAllAttributeTags tags: [[UInt8]]) throws -> [Int64] {
        guard !tags.isEmpty else { return [] }
        let sql =
            Array(repeating: "SELECT item_id FROM attr_index WHERE tag = ?", count: tags.count)
            .joined(separator: " INTERSECT ") + " ORDER BY 1"
        var ids: [Int64] = []
        try connection.run(sql, tags.map { .blob($0) }) { ids.append($0.int(0)) }
        return ids
    }
}
