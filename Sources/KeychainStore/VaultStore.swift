import Foundation
import CSQLite

/// One item row as stored: opaque ciphertext plus keyed-hash indexes. The store never sees
/// attribute values or secrets; `itemClass` (genp, inet, …) is the only plaintext field.
public struct StoredItem: Sendable, Equatable {
    public var id: Int64
    public var itemClass: String
    /// Keyed hash of the full primary key: unique, used for point lookups and duplicates.
    public var primaryIndex: [UInt8]
    /// Keyed hash of the first path component (service, server, label): for directory listings.
    public var secondaryIndex: [UInt8]
    /// Bumped on every change; the manifest covers it, so an old row replayed is detected.
    public var version: Int64
    /// The version at which the data and item key were last sealed (their AD binds it).
    public var dataGeneration: Int64
    public var sealedAttributes: [UInt8]
    public var wrappedItemKey: [UInt8]
    public var sealedData: [UInt8]
    /// Length of the sealed data column, known even when the data itself was not loaded.
    public var sealedDataLength: Int

    public init(id: Int64 = 0, itemClass: String, primaryIndex: [UInt8], secondaryIndex: [UInt8],
                version: Int64, dataGeneration: Int64, sealedAttributes: [UInt8],
                wrappedItemKey: [UInt8], sealedData: [UInt8]) {
        self.id = id
        self.itemClass = itemClass
        self.primaryIndex = primaryIndex
        self.secondaryIndex = secondaryIndex
        self.version = version
        self.dataGeneration = dataGeneration
        self.sealedAttributes = sealedAttributes
        self.wrappedItemKey = wrappedItemKey
        self.sealedData = sealedData
        self.sealedDataLength = sealedData.count
    }
}

/// The vault file: one SQLite database in WAL mode with `synchronous=FULL` (every commit is
/// durable when it returns) and `secure_delete=ON` (freed pages are zeroed, so deleted
/// ciphertext does not linger). All access goes through one connection under a lock; writes
/// run in `BEGIN IMMEDIATE` transactions so concurrent processes serialise instead of
/// deadlocking on a lock upgrade.
public final class VaultStore: @unchecked Sendable {
    // @unchecked: every use of `connection` happens with `lock` held.
    private let connection: Connection
    private let lock = NSRecursiveLock()
    private var transactionDepth = 0
    /// Write transactions this connection committed (PRAGMA data_version counts only the
    /// commits of *other* connections).
    private var localCommits: Int64 = 0
    public let path: String

    /// `PRAGMA application_id` of a keychainfs vault: 'KCFS'. Identifies the file as ours.
    public static let applicationID: Int32 = 0x4B43_4653
    /// The SQL schema version this build reads and writes.
    public static let schemaVersion = 1

    private init(path: String, connection: Connection) {
        self.path = path
        self.connection = connection
    }

    /// Creates a new vault file (mode 0600; its directory 0700 if it has to be made).
    /// Fails if the file already exists: an existing vault is never overwritten.
    public static func create(at path: String) throws -> VaultStore {
        // Not NSString.deletingLastPathComponent: it crashes on a one-character relative path.
        let dir = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? ""
        if !dir.isEmpty && !FileManager.default.fileExists(atPath: dir) {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
        }
        let fd = Foundation.open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            let e = errno
            throw StoreError.sqlite(code: SQLITE_CANTOPEN, message: String(cString: strerror(e)))
        }
        close(fd)
        do {
            let connection = try Connection(path: path, create: false)
            try configure(connection)
            try connection.execute("""
                PRAGMA application_id = \(applicationID);
                PRAGMA user_version = \(schemaVersion);
                BEGIN IMMEDIATE;
                CREATE TABLE meta(name TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
                CREATE TABLE class_keys(protection TEXT PRIMARY KEY, wrapped BLOB NOT NULL) WITHOUT ROWID;
                CREATE TABLE items(
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    class TEXT NOT NULL,
                    pidx BLOB NOT NULL UNIQUE,
                    sidx BLOB NOT NULL,
                    version INTEGER NOT NULL,
                    data_gen INTEGER NOT NULL,
                    attrs BLOB NOT NULL,
                    item_key BLOB NOT NULL,
                    data BLOB NOT NULL);
                CREATE INDEX items_by_sidx ON items(sidx);
                CREATE INDEX items_by_class ON items(class, id);
                COMMIT;
                """)
            return VaultStore(path: path, connection: connection)
        } catch {
            // Leave nothing half-made behind.
            for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) }
            throw error
        }
    }

    /// Opens an existing vault, checking that it is a keychainfs vault of a known version.
    public static func open(at path: String) throws -> VaultStore {
        var st = stat()
        guard stat(path, &st) == 0 else { throw StoreError.noSuchFile(path) }
        guard (st.st_mode & S_IFMT) == S_IFREG else { throw StoreError.notAVault("not a regular file") }
        let connection = try Connection(path: path, create: false)
        var appID: Int64 = 0, version: Int64 = 0
        do {
            try connection.run("PRAGMA application_id") { appID = $0.int(0) }
            try connection.run("PRAGMA user_version") { version = $0.int(0) }
        } catch StoreError.notAVault(let why) {
            throw StoreError.notAVault(why)
        } catch StoreError.sqlite(let code, _) where code & 0xff == SQLITE_CORRUPT {
            throw StoreError.notAVault("database disk image is malformed")
        }
        guard appID == Int64(applicationID) else {
            throw StoreError.notAVault(st.st_size == 0 ? "empty file" : "SQLite file of another application")
        }
        guard version <= schemaVersion else {
            throw StoreError.newerFormat(found: Int(version), supported: schemaVersion)
        }
        try configure(connection)
        return VaultStore(path: path, connection: connection)
    }

    private static func configure(_ connection: Connection) throws {
        try connection.run("PRAGMA journal_mode = WAL")
        try connection.execute("""
            PRAGMA synchronous = FULL;
            PRAGMA secure_delete = ON;
            PRAGMA foreign_keys = ON;
            PRAGMA trusted_schema = OFF;
            """)
    }

    // MARK: Transactions

    /// Runs `body` in one write transaction (nested calls join the outer one). On any
    /// thrown error the whole transaction rolls back: nothing half-written is ever committed.
    public func write<R>(_ body: () throws -> R) throws -> R {
        lock.lock(); defer { lock.unlock() }
        if transactionDepth > 0 { return try body() }
        try connection.execute("BEGIN IMMEDIATE")
        transactionDepth += 1
        do {
            let result = try body()
            transactionDepth -= 1
            do { try connection.execute("COMMIT") } catch {
                try? connection.execute("ROLLBACK")
                throw error
            }
            localCommits += 1
            return result
        } catch {
            if transactionDepth > 0 {
                transactionDepth -= 1
                try? connection.execute("ROLLBACK")
            }
            throw error
        }
    }

    /// Runs `body` against one consistent snapshot (a deferred read transaction).
    public func read<R>(_ body: () throws -> R) throws -> R {
        lock.lock(); defer { lock.unlock() }
        if transactionDepth > 0 { return try body() }
        try connection.execute("BEGIN")
        transactionDepth += 1
        defer {
            transactionDepth -= 1
            try? connection.execute("COMMIT")
        }
        return try body()
    }

    /// One statement under the connection lock. A single statement is its own snapshot in
    /// autocommit mode (or joins the caller's transaction): no BEGIN/COMMIT round trip, which
    /// was a third of a point lookup.
    private func query<R>(_ body: () throws -> R) throws -> R {
        lock.lock(); defer { lock.unlock() }
        return try body()
    }

    // MARK: Meta and class keys

    public func meta(_ name: String) throws -> [UInt8]? {
        try query {
            var value: [UInt8]?
            try connection.run("SELECT value FROM meta WHERE name = ?", [.text(name)]) { value = $0.blob(0) }
            return value
        }
    }

    public func setMeta(_ name: String, _ value: [UInt8]) throws {
        try write {
            try connection.run("INSERT INTO meta(name, value) VALUES(?, ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                               [.text(name), .blob(value)])
        }
    }

    public func classKeys() throws -> [String: [UInt8]] {
        try query {
            var keys: [String: [UInt8]] = [:]
            try connection.run("SELECT protection, wrapped FROM class_keys") { keys[$0.text(0)] = $0.blob(1) }
            return keys
        }
    }

    public func setClassKey(_ protection: String, wrapped: [UInt8]) throws {
        try write {
            try connection.run("INSERT OR REPLACE INTO class_keys(protection, wrapped) VALUES(?, ?)",
                               [.text(protection), .blob(wrapped)])
        }
    }

    // MARK: Items

    private static let columns = "id, class, pidx, sidx, version, data_gen, attrs, item_key, data, length(data)"
    /// Metadata reads skip the data column: listing a directory never loads secrets.
    private static let metadataColumns = "id, class, pidx, sidx, version, data_gen, attrs, item_key, x'', length(data)"

    private static func item(_ row: Connection.Row) -> StoredItem {
        var item = StoredItem(id: row.int(0), itemClass: row.text(1), primaryIndex: row.blob(2), secondaryIndex: row.blob(3),
                              version: row.int(4), dataGeneration: row.int(5), sealedAttributes: row.blob(6),
                              wrappedItemKey: row.blob(7), sealedData: row.blob(8))
        item.sealedDataLength = Int(row.int(9))
        return item
    }

    /// Reserves the id the next insert will get, so a row can be sealed with its own id in
    /// its associated data before it is written. Must run inside `write`.
    public func nextItemID() throws -> Int64 {
        var next: Int64 = 1
        try connection.run("SELECT seq FROM sqlite_sequence WHERE name = 'items'") { next = $0.int(0) + 1 }
        return next
    }

    /// Inserts a row under an id obtained from `nextItemID()` in the same transaction (ids are
    /// never reused: AUTOINCREMENT). Throws `.duplicate` when an item with the same primary
    /// index exists.
    public func insert(_ item: StoredItem, id: Int64) throws {
        try write {
            try connection.run("""
                INSERT INTO items(id, class, pidx, sidx, version, data_gen, attrs, item_key, data)
                VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, [.integer(id), .text(item.itemClass), .blob(item.primaryIndex), .blob(item.secondaryIndex),
                      .integer(item.version), .integer(item.dataGeneration), .blob(item.sealedAttributes),
                      .blob(item.wrappedItemKey), .blob(item.sealedData)])
        }
    }

    /// Replaces every column of the row with `item.id`. Throws `.duplicate` on an index clash.
    public func replace(_ item: StoredItem) throws {
        try write {
            try connection.run("""
                UPDATE items SET class = ?, pidx = ?, sidx = ?, version = ?, data_gen = ?, attrs = ?, item_key = ?, data = ?
                WHERE id = ?
                """, [.text(item.itemClass), .blob(item.primaryIndex), .blob(item.secondaryIndex),
                      .integer(item.version), .integer(item.dataGeneration), .blob(item.sealedAttributes),
                      .blob(item.wrappedItemKey), .blob(item.sealedData), .integer(item.id)])
        }
    }

    public func delete(id: Int64) throws {
        try write { try connection.run("DELETE FROM items WHERE id = ?", [.integer(id)]) }
    }

    public func item(id: Int64, withData: Bool = true) throws -> StoredItem? {
        try query {
            var found: StoredItem?
            try connection.run("SELECT \(withData ? Self.columns : Self.metadataColumns) FROM items WHERE id = ?", [.integer(id)]) {
                found = Self.item($0)
            }
            return found
        }
    }

    public func item(primaryIndex: [UInt8], withData: Bool = true) throws -> StoredItem? {
        try query {
            var found: StoredItem?
            try connection.run("SELECT \(withData ? Self.columns : Self.metadataColumns) FROM items WHERE pidx = ?", [.blob(primaryIndex)]) {
                found = Self.item($0)
            }
            return found
        }
    }

    public func items(secondaryIndex: [UInt8], withData: Bool = false) throws -> [StoredItem] {
        try query {
            var found: [StoredItem] = []
            try connection.run("SELECT \(withData ? Self.columns : Self.metadataColumns) FROM items WHERE sidx = ? ORDER BY id", [.blob(secondaryIndex)]) {
                found.append(Self.item($0))
            }
            return found
        }
    }

    /// Whether any row has this secondary index (a directory exists), without reading rows.
    public func exists(secondaryIndex: [UInt8]) throws -> Bool {
        try query {
            var found = false
            try connection.run("SELECT 1 FROM items WHERE sidx = ? LIMIT 1", [.blob(secondaryIndex)]) { _ in found = true }
            return found
        }
    }

    public func items(itemClass: String, withData: Bool = false) throws -> [StoredItem] {
        try query {
            var found: [StoredItem] = []
            try connection.run("SELECT \(withData ? Self.columns : Self.metadataColumns) FROM items WHERE class = ? ORDER BY id", [.text(itemClass)]) {
                found.append(Self.item($0))
            }
            return found
        }
    }

    /// Visits every row with its full contents (used by the unlock-time manifest check).
    public func forEachItem(_ body: (StoredItem) throws -> Void) throws {
        try query {
            try connection.run("SELECT \(Self.columns) FROM items ORDER BY id") { try body(Self.item($0)) }
        }
    }

    public func itemCount() throws -> Int {
        try query {
            var n = 0
            try connection.run("SELECT count(*) FROM items") { n = Int($0.int(0)) }
            return n
        }
    }

    /// Changes whenever the vault changes, through this connection or any other process's:
    /// (PRAGMA data_version, this connection's commits). For caches of derived views.
    public func changeStamp() throws -> [Int64] {
        try query {
            var version: Int64 = 0
            try connection.run("PRAGMA data_version") { version = $0.int(0) }
            return [version, localCommits]
        }
    }

    /// Moves WAL contents into the main file (used before copying a vault, and by tests).
    public func checkpoint() throws {
        lock.lock(); defer { lock.unlock() }
        try connection.run("PRAGMA wal_checkpoint(TRUNCATE)")
    }
}
