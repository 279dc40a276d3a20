import FoundationEssentials
import Glibc
import CSQLite
import Synchronization

/// The vault file: one SQLite database in WAL mode with `synchronous=FULL` (every commit is
/// durable when it returns) and `secure_delete=ON` (freed pages are zeroed, so deleted
/// ciphertext does not linger). Two connections, each held in a mutex: writes (and the
/// maintenance calls) on one, in `BEGIN IMMEDIATE` transactions so concurrent processes
/// serialise instead of deadlocking on a lock upgrade; reads on the other, so that a read does
/// not wait for a commit's fsync (WAL readers see the last committed state, never a write in
/// progress, and see a commit as soon as it has returned).
public final class VaultStore: ItemStore {
    /// Used only inside `state.withLock` (it is opened SQLITE_OPEN_NOMUTEX): the mutex is what
    /// serialises it. Held outside the mutex's value because the bodies of `lookup`, `read`
    /// and `write` are the caller's closures, and they must be handed the connection.
    private let connection: Connection
    /// The reading connection, used only inside `reading.withLock`.
    private let readerConnection: Connection
    /// The reading connection's read transaction, when one is held between reads
    /// (`withCurrentReadTransaction`); only inside `reading.withLock`.
    private let reading = Mutex(ReadingState())
    /// How long an unused read transaction is held: while one is, a checkpoint cannot move the
    /// WAL past it, and the WAL cannot start over.
    static let heldReadIdle = 0.05
    /// Where SQLite maps the reading connection's wal-index (its first region), as an address;
    /// 0 until the connection has opened it. Stays valid while the connection is open.
    private let walIndex = Atomic<Int>(0)
    /// Rows read while nothing committed since (`currentItem(id:)`).
    private let snapshots = RowSnapshots()
    /// The last change stamp read, with the wal-index header read before it.
    private let lastStamp = Mutex<(header: WalIndexHeader, stamp: [Int64])?>(nil)
    /// Write transactions the writing connection committed (part of `changeStamp`; an atomic,
    /// so reading it never waits for a commit in progress).
    private let localCommits = Atomic<Int64>(0)

    /// Serialises every use of `connection`: each statement runs inside `withLock`.
    private let state = Mutex(())
    public let path: String
    /// The WAL held open for `syncLog` (WalSync.swift).
    let wal: WalSync

    /// `PRAGMA application_id` of a keychainfs vault: 'KCFS'. Identifies the file as ours.
    public static let applicationID: Int32 = 0x4B43_4653
    /// The SQL schema version this build reads and writes. 1: meta, class_keys, items; 2: and
    /// attr_index; 3: and manifest_bucket (vault format 4); 4: and name_chunk, name_bucket (5);
    /// 5: and change_log (7); 6: and the sync tables (8). An older file gets the new tables at
    /// first unlock (`upgradeSchema`); older code refuses a newer file (`user_version`).
    public static let schemaVersion = 6

    private init(path: String, connection: Connection) throws {
        self.path = path
        self.connection = connection
        wal = WalSync(vaultPath: path)
        readerConnection = try Connection(path: path, create: false)
        try Self.configure(readerConnection)
        OpenStores.register(self)
    }

    /// Creates a new vault file (mode 0600; its directory 0700 if it has to be made).
    /// Fails if the file already exists: an existing vault is never overwritten.
    public static func create(at path: String) throws -> VaultStore {
        let dir = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? ""
        if !dir.isEmpty && !FileManager.default.fileExists(atPath: dir) {
            try FileManager.default.createDirectory(
                atPath: dir, withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
        }
        let fd = Glibc.open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            let e = errno
            throw StoreError.sqlite(code: SQLITE_CANTOPEN, message: String(cString: strerror(e)))
        }
        close(fd)
        do {
            let connection = try Connection(path: path, create: false)
            try configure(connection)
            try connection.execute(
                """
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
                CREATE TABLE attr_index(
                    tag BLOB NOT NULL, item_id INTEGER NOT NULL, PRIMARY KEY(tag, item_id)) WITHOUT ROWID;
                CREATE INDEX attr_index_by_item ON attr_index(item_id);
                \(Statements.bucketTable)
                \(Statements.nameListTables)
                \(Statements.changeLogTable)
                \(Statements.syncTables)
                COMMIT;
                """)
            return try VaultStore(path: path, connection: connection)
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
        return try VaultStore(path: path, connection: connection)
    }

    private static func configure(_ connection: Connection) throws {
        try connection.run("PRAGMA journal_mode = WAL")
        try connection.execute(
            """
            PRAGMA synchronous = FULL;
            PRAGMA secure_delete = ON;
            PRAGMA foreign_keys = ON;
            PRAGMA trusted_schema = OFF;
            """)
    }

    // MARK: Transactions

    public func lookup<R>(_ body: (any ItemStoreReader) throws -> R) throws -> R {
        try withCurrentReadTransaction { try body(Statements(connection: readerConnection)) }
    }

    /// A read transaction on the reading connection, kept open after a read while nothing
    /// commits, so that the next read (a stat, a getxattr, a listing's check) does not begin and
    /// end one: a read transaction's begin and end were two `fcntl` locks and their releases, more
    /// than the row it read.
    struct HeldRead {
        /// The wal-index header read before the transaction began.
        let header: WalIndexHeader
        var lastUse: UInt64
    }

    struct ReadingState {
        var held: HeldRead?
        /// Whether a check for an unused held transaction is due (one at a time, whatever the
        /// number of transactions begun and ended meanwhile: at most 20 wake-ups a second).
        var releaseDue = false

        /// Ends the held transaction on `connection` (the reading one), if there is one.
        mutating func endHeld(on connection: Connection) {
            guard held != nil else { return }
            try? connection.run("COMMIT")
            held = nil
        }
    }

    /// Runs `body` on the reading connection in a read transaction of the current state: the one
    /// held since an earlier read if the wal-index header is still the one read before it began,
    /// else a new one. Why that is the current state: the header was read whole before the
    /// transaction's snapshot was taken (at its first read), so the snapshot is of that state or
    /// a later one; an equal header now means no transaction has committed since it was read, by
    /// any connection of any process, so there is no later state, and the snapshot is now's (the
    /// same test as `RowSnapshots`, and SQLite's own readers trust their page cache on it). A
    /// header that cannot be read whole (a writer changing it) ends the held transaction and holds
    /// no new one. An unused transaction ends after `heldReadIdle` seconds, so an idle daemon
    /// never keeps the WAL from being checkpointed and restarted.
    private func withCurrentReadTransaction<R>(_ body: () throws -> R) throws -> R {
        let header = walIndexHeader()
        return try reading.withLock { r in
            if let current = r.held, header == nil || current.header != header { r.endHeld(on: readerConnection) }
            if r.held == nil {
                try readerConnection.run("BEGIN")
                if let header { r.held = HeldRead(header: header, lastUse: 0) }
            }
            let result: R
            do {
                result = try body()
            } catch {
                try? readerConnection.run("ROLLBACK")
                r.held = nil
                throw error
            }
            noteWalIndex()
            if r.held == nil {
                try? readerConnection.run("COMMIT")
            } else {
                r.held!.lastUse = SerialWorker.now()
                if !r.releaseDue {
                    r.releaseDue = true
                    scheduleHeldReadRelease()
                }
            }
            return result
        }
    }

    /// Folds the WAL into the vault file without waiting for anyone (OpenStores, at exit): a
    /// plain copy of the file is then whole. Another process reading an older snapshot keeps
    /// the frames it needs; SQLite's last close does the rest.
    func checkpointWithoutWaiting() {
        endHeldRead()
        state.withLock { _ in
            sqlite3_busy_timeout(connection.handle, 0)
            try? connection.run("PRAGMA wal_checkpoint(TRUNCATE)")
            sqlite3_busy_timeout(connection.handle, 30_000)
        }
    }

    /// Ends the held read transaction, if there is one.
    private func endHeldRead() {
        reading.withLock { $0.endHeld(on: readerConnection) }
    }

    /// Ends the held read transaction `heldReadIdle` after its last use (looked at again then if
    /// it was used meanwhile), on `SerialWorker.deferred`: a DispatchQueue wakes a daemon 1/s.
    private func scheduleHeldReadRelease(in delay: Double = VaultStore.heldReadIdle) {
        SerialWorker.deferred.after(seconds: delay) { [weak self] in
            guard let self else { return }
            let remaining = reading.withLock { r -> Double? in
                if let current = r.held {
                    let idle = Double(SerialWorker.now() &- current.lastUse) / 1e9
                    if idle < Self.heldReadIdle { return Self.heldReadIdle - idle }
                    r.endHeld(on: readerConnection)
                }
                r.releaseDue = false
                return nil
            }
            if let remaining { scheduleHeldReadRelease(in: remaining) }
        }
    }

    /// Learns where SQLite mapped the reading connection's wal-index, once it has (after its
    /// first read). Called with `reading` held: the VFS call must not race the connection.
    private func noteWalIndex() {
        guard walIndex.load(ordering: .acquiring) == 0, let region = kcfs_sqlite3_wal_index(readerConnection.handle)
        else { return }
        walIndex.store(Int(bitPattern: region), ordering: .releasing)
    }

    /// The wal-index header now; nil before the reading connection opened the wal-index, or
    /// while a writer is changing the header.
    private func walIndexHeader() -> WalIndexHeader? {
        guard let region = UnsafeRawPointer(bitPattern: walIndex.load(ordering: .acquiring)) else { return nil }
        return WalIndexHeader.read(region)
    }

    public func currentItem(id: Int64) throws -> StoredItem? {
        // Read before the row: a commit in between leaves the kept row behind the header.
        let header = walIndexHeader()
        if let header, let kept = snapshots.row(id, unchangedSince: header) { return kept }
        let row = try lookup { try $0.item(id: id, withData: true) }
        if let header, let row { snapshots.keep(row, readAfter: header) }
        return row
    }

    public func read<R>(_ body: (any ItemStoreReader) throws -> R) throws -> R {
        try withCurrentReadTransaction { try body(Statements(connection: readerConnection)) }
    }

    /// On any thrown error the whole transaction rolls back: nothing half-written is ever
    /// committed.
    public func write<R>(durable: Bool, _ body: (any ItemStoreWriter) throws -> R) throws -> R {
        // A read transaction held across this commit would keep the commit's checkpoint from
        // reaching the WAL's end, and a WAL never checkpointed to its end is never started over:
        // it would grow for as long as writes go on, each commit's fsync growing the file.
        endHeldRead()
        return try state.withLock { _ in
            // Cached statements: sqlite3_exec parsed these (and the savepoint's) at every commit.
            if !durable { try connection.run("PRAGMA synchronous = NORMAL") }
            defer { if !durable { try? connection.run("PRAGMA synchronous = FULL") } }
            try connection.run("BEGIN IMMEDIATE")
            let result: R
            do {
                result = try body(Statements(connection: connection))
                try connection.run("COMMIT")
            } catch {
                try? connection.execute("ROLLBACK")
                connection.tablesSeen = []
                throw error
            }
            localCommits.add(1, ordering: .sequentiallyConsistent)
            return result
        }
    }

    /// Changes whenever the vault changes, through this store's writing connection or any
    /// other process's: (the reading connection's PRAGMA data_version, which counts the commits
    /// of every other connection, the writing one included; this store's commits). Read on the
    /// reading connection, so it never waits for a commit in progress. For caches of derived views.
    public var localCommitCount: Int64 { localCommits.load(ordering: .sequentiallyConsistent) }

    public func changeStamp() throws -> [Int64] {
        let local = localCommits.load(ordering: .sequentiallyConsistent)
        // As for a kept row (RowSnapshots.swift): a header read whole before the stamp, and
        // equal now, means no commit since, so the stamp would read the same. Listings check
        // the stamp at every lookup of a name in them.
        let header = walIndexHeader()
        if let header, let stamp = lastStamp.withLock({ $0?.header == header ? $0?.stamp : nil }), stamp[1] == local {
            return stamp
        }
        let stamp = try withCurrentReadTransaction {
            var version: Int64 = 0
            try readerConnection.run("PRAGMA data_version") { version = $0.int(0) }
            return [version, local]
        }
        if let header { lastStamp.withLock { $0 = (header, stamp) } }
        return stamp
    }

    /// One row by id, outside any transaction (tools and benchmarks).
    public func item(id: Int64, withData: Bool = true) throws -> StoredItem? {
        try lookup { try $0.item(id: id, withData: withData) }
    }

    /// Writes a consistent copy of the whole database into `path` (a new, empty file the
    /// caller created with the mode it wants) with `VACUUM INTO`: one read transaction, so
    /// commits still in the WAL are included and writers in other processes go on.
    public func copy(into path: String) throws {
        try state.withLock { _ in try connection.run("VACUUM INTO ?", [.text(path)]) }
    }

    /// `PRAGMA integrity_check`: nil when SQLite finds the file sound, else its first complaint.
    public func integrityComplaint() throws -> String? {
        var complaint: String?
        try state.withLock { _ in
            try connection.run("PRAGMA integrity_check(1)") { row in
                let text = row.text(0)
                if text != "ok" { complaint = text }
            }
        }
        return complaint
    }

    /// Moves WAL contents into the main file (used before copying a vault, and by tests).
    public func checkpoint() throws {
        try state.withLock { _ in try connection.run("PRAGMA wal_checkpoint(TRUNCATE)") }
    }
}
