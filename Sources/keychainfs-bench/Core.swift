import CSQLite
import Foundation
import Keychain
import KeychainCrypto
import KeychainStore

// MARK: Crypto baseline

/// Per-call costs of the primitives the core is built from, measured in this run.
struct CryptoBaseline {
    var seal12: Double = .nan  // XChaCha20-Poly1305 seal of a 12-byte secret
    var open12: Double = .nan  // … open
    var keyedHash: Double = .nan  // keyed BLAKE2b-256 of 64 bytes (a blind index)
    var argon2Interactive: Double = .nan  // crypto_pwhash at INTERACTIVE (median of 3)
    var guardedKey: Double = .nan  // SecureBytes of 32 bytes: sodium_malloc + mprotect + sodium_free

    static func measure() throws -> CryptoBaseline {
        var b = CryptoBaseline()
        let key = try SecureBytes.random()
        let ad = [UInt8](repeating: 7, count: 60)
        let plain = Layout.secret(42)
        let n = 20_000
        var box: [UInt8] = []
        for _ in 0..<1000 { box = try AEAD.seal(plain, associatedData: ad, key: key) }  // warm up
        b.seal12 =
            try Clock.time { for _ in 0..<n { box = try AEAD.seal(plain, associatedData: ad, key: key) } } / Double(n)
        var opened: [UInt8] = []
        b.open12 =
            try Clock.time { for _ in 0..<n { opened = try AEAD.open(box, associatedData: ad, key: key) } } / Double(n)
        guard opened == plain else { throw BenchError("AEAD round trip failed") }
        let message = [UInt8](repeating: 1, count: 64)
        var h: [UInt8] = []
        b.keyedHash = Clock.time { for _ in 0..<n { h = KeyedHash.hash(message, key: key) } } / Double(n)
        precondition(h.count == 32)
        let m = 5_000
        b.guardedKey =
            try Clock.time {
                for _ in 0..<m { _ = try SecureBytes(count: 32) { $0.initializeMemory(as: UInt8.self, repeating: 1) } }
            } / Double(m)
        let pass = try BenchVault.passphrase()
        var kdf = Samples()
        for _ in 0..<3 {
            let salt = Sodium.randomBytes(PasswordHashParameters.saltBytes)
            kdf.add(
                try Clock.time {
                    _ = try KeyDerivation.passwordKey(passphrase: pass, salt: salt, parameters: .interactive)
                })
        }
        b.argon2Interactive = kdf.p50
        return b
    }
}

// MARK: Raw SQLite baseline

/// The same table, indexes and pragmas as the vault (WAL, synchronous=FULL, secure_delete),
/// rows of the same byte lengths, driven through the SQLite C API with prepared statements
/// and autocommit: what one durable insert / point select / durable update costs with no
/// keychain around it.
final class RawSQLite {
    struct RowShape {
        var attrs = 300, itemKey = 72, data = 52
    }

    private var db: OpaquePointer?
    let path: String
    let shape: RowShape
    private var count = 0
    private var insertStmt: OpaquePointer?, selectStmt: OpaquePointer?, updateStmt: OpaquePointer?
    private var beginStmt: OpaquePointer?, commitStmt: OpaquePointer?

    init(path: String, shape: RowShape) throws {
        self.path = path
        self.shape = shape
        guard
            sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nil)
                == SQLITE_OK
        else {
            throw BenchError("sqlite3_open_v2 \(path) failed")
        }
        try exec(
            """
            PRAGMA journal_mode = WAL;
            PRAGMA synchronous = FULL;
            PRAGMA secure_delete = ON;
            CREATE TABLE items(
                id INTEGER PRIMARY KEY AUTOINCREMENT, class TEXT NOT NULL, pidx BLOB NOT NULL UNIQUE,
                sidx BLOB NOT NULL, version INTEGER NOT NULL, data_gen INTEGER NOT NULL,
                attrs BLOB NOT NULL, item_key BLOB NOT NULL, data BLOB NOT NULL);
            CREATE INDEX items_by_sidx ON items(sidx);
            CREATE INDEX items_by_class ON items(class, id);
            """)
        insertStmt = try prepare(
            "INSERT INTO items(class, pidx, sidx, version, data_gen, attrs, item_key, data) VALUES('genp', ?, ?, 1, 1, ?, ?, ?)"
        )
        selectStmt = try prepare(
            "SELECT id, class, pidx, sidx, version, data_gen, attrs, item_key, data, length(data) FROM items WHERE pidx = ?"
        )
        updateStmt = try prepare(
            "UPDATE items SET version = version + 1, data_gen = data_gen + 1, attrs = ?, item_key = ?, data = ? WHERE id = ?"
        )
        beginStmt = try prepare("BEGIN IMMEDIATE")
        commitStmt = try prepare("COMMIT")
    }

    deinit {
        for s in [insertStmt, selectStmt, updateStmt, beginStmt, commitStmt] { sqlite3_finalize(s) }
        sqlite3_close_v2(db)
        for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) }
    }

    private func exec(_ sql: String) throws {
        guard sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK else {
            throw BenchError("sqlite: \(String(cString: sqlite3_errmsg(db)))")
        }
    }

    private func prepare(_ sql: String) throws -> OpaquePointer? {
        var s: OpaquePointer?
        guard sqlite3_prepare_v3(db, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &s, nil) == SQLITE_OK else {
            throw BenchError("sqlite prepare: \(String(cString: sqlite3_errmsg(db)))")
        }
        return s
    }

    static func pidx(_ i: Int) -> [UInt8] { KeyedHash.digest([Array("p\(i)".utf8)]) }
    static func sidx(_ i: Int) -> [UInt8] { KeyedHash.digest([Array(Layout.service(i).utf8)]) }

    private func bind(_ s: OpaquePointer?, _ i: Int32, _ bytes: [UInt8]) {
        _ = bytes.withUnsafeBytes { kcfs_sqlite3_bind_blob_copy(s, i, $0.baseAddress, Int32($0.count)) }
    }

    private func step(_ s: OpaquePointer?) throws {
        defer { sqlite3_reset(s) }
        let rc = sqlite3_step(s)
        guard rc == SQLITE_DONE || rc == SQLITE_ROW else {
            throw BenchError("sqlite step: \(String(cString: sqlite3_errmsg(db)))")
        }
    }

    private func insert(_ i: Int, filler: [UInt8]) throws {
        bind(insertStmt, 1, Self.pidx(i))
        bind(insertStmt, 2, Self.sidx(i))
        bind(insertStmt, 3, Array(filler.prefix(shape.attrs)))
        bind(insertStmt, 4, Array(filler.prefix(shape.itemKey)))
        bind(insertStmt, 5, Array(filler.prefix(shape.data)))
        try step(insertStmt)
    }

    /// Rows 0..<n in one transaction (fixture only, not measured).
    func fill(_ n: Int) throws {
        let filler = Sodium.randomBytes(max(shape.attrs, shape.itemKey, shape.data))
        try exec("BEGIN")
        for i in count..<(count + n) { try insert(i, filler: filler) }
        try exec("COMMIT")
        count += n
    }

    /// `n` durable autocommit inserts.
    func timedInserts(_ n: Int) throws -> Samples {
        let filler = Sodium.randomBytes(max(shape.attrs, shape.itemKey, shape.data))
        var s = Samples()
        for i in count..<(count + n) { s.add(try Clock.time { try insert(i, filler: filler) }) }
        count += n
        return s
    }

    /// `n` point selects by the unique blob index, every column copied out.
    func timedSelects(_ n: Int, rng: inout SeededRandom) throws -> Samples {
        let keys = (0..<n).map { _ in Self.pidx(Int.random(in: 0..<count, using: &rng)) }
        var s = Samples()
        var total = 0
        for key in keys {
            s.add(
                try Clock.time {
                    bind(selectStmt, 1, key)
                    defer { sqlite3_reset(selectStmt) }
                    guard sqlite3_step(selectStmt) == SQLITE_ROW else { throw BenchError("raw select found nothing") }
                    for col: Int32 in [2, 3, 6, 7, 8] {
                        let len = Int(sqlite3_column_bytes(selectStmt, col))
                        if let p = sqlite3_column_blob(selectStmt, col) {
                            total += [UInt8](UnsafeRawBufferPointer(start: p, count: len)).count
                        }
                    }
                })
        }
        precondition(total > 0)
        return s
    }

    /// `n` durable autocommit updates of the data columns by id.
    func timedUpdates(_ n: Int, rng: inout SeededRandom) throws -> Samples {
        let filler = Sodium.randomBytes(max(shape.attrs, shape.itemKey, shape.data))
        var s = Samples()
        for _ in 0..<n {
            let id = Int64.random(in: 1...Int64(count), using: &rng)
            s.add(try Clock.time { try update(id, filler: filler) })
        }
        return s
    }

    /// The rows `ids` updated as `timedUpdates` updates one, in one durable commit: an
    /// autocommit update alone, or one transaction for several (the durable floor's group
    /// commit, `FloorCommits`).
    func commitUpdates(_ ids: [Int64], filler: [UInt8]) throws {
        guard ids.count > 1 else {
            if let id = ids.first { try update(id, filler: filler) }
            return
        }
        try step(beginStmt)
        do {
            for id in ids { try update(id, filler: filler) }
            try step(commitStmt)
        } catch {
            try? exec("ROLLBACK")
            throw error
        }
    }

    /// Rows this table holds (ids 1...rowCount).
    var rowCount: Int { count }

    private func update(_ id: Int64, filler: [UInt8]) throws {
        bind(updateStmt, 1, Array(filler.prefix(shape.attrs)))
        bind(updateStmt, 2, Array(filler.prefix(shape.itemKey)))
        bind(updateStmt, 3, Array(filler.prefix(shape.data)))
        sqlite3_bind_int64(updateStmt, 4, id)
        try step(updateStmt)
    }
}

/// Raw SQLite figures at one table size.
struct RawFigures {
    var shape = RawSQLite.RowShape()
    var insert = Samples(), select = Samples(), update = Samples()
}

// MARK: Core figures

struct CoreFigures {
    var size = 0
    var createSeconds = 0.0
    var populateSeconds = 0.0  // the untimed bulk population (items 0 ..< size - 1,000)
    var populateCount = 0
    var add = Samples()  // the last 1,000 adds (ending at `size` items)
    var find = Samples()
    var update = Samples()
    var open = Samples()  // Keychain.open
    var unlock = Samples()  // unlock(passphrase:): Argon2id + class keys + manifest check
    var kdf = Samples()  // Argon2id alone, interleaved with the unlocks
    var manifest = Samples()  // verifyIntegrity(): the manifest check alone
    var vaultBytes = 0.0, walBytes = 0.0
    var shape = RawSQLite.RowShape()
    var raw = RawFigures()

    var bytesPerItem: Double { (vaultBytes + walBytes) / Double(size) }
    /// Bytes of the stored columns of one row (blobs + two 32-byte indexes + class + 2 ints).
    var rowPayload: Double { Double(shape.attrs + shape.itemKey + shape.data + 32 + 32 + 4 + 16) }
}

enum CoreBench {
    /// Creates a vault of `size` items and measures it. The keychain and raw SQLite run in
    /// alternating blocks (keychain, raw, raw, keychain, …), so a disk or CPU that slows
    /// down mid-run (this machine is shared) hits both sides of a ratio alike.
    static func measure(size: Int, directory: String) throws -> (CoreFigures, BenchVault) {
        var f = CoreFigures()
        f.size = size
        let vault = try BenchVault.create(size: size, directory: directory)
        f.createSeconds = vault.createSeconds
        let window = min(1_000, size)
        try vault.populate(upTo: size - window)
        f.populateSeconds = vault.populateSeconds
        f.populateCount = vault.populateCount

        var raw: RawSQLite?
        var rng = SeededRandom(seed: 0x5EED ^ UInt64(size))
        func alternate(_ rounds: Int, _ keychainBlock: () throws -> Void, _ rawBlock: () throws -> Void) rethrows {
            for k in 0..<rounds {
                if k % 2 == 0 { try keychainBlock(); try rawBlock() } else { try rawBlock(); try keychainBlock() }
            }
        }
        do {
            // add: the last `window` items, in five blocks, each side growing to `size`.
            let blocks = 5
            for b in 0..<blocks {
                let n = window / blocks + (b < window % blocks ? 1 : 0)
                f.add.add(try vault.addTimed(n))
                if raw == nil {
                    f.shape = try vault.rowShape()
                    raw = try RawSQLite(path: directory + "/raw-\(size).sqlite", shape: f.shape)
                    try raw!.fill(size - window)
                }
                f.raw.insert.add(try raw!.timedInserts(n))
            }
            f.raw.shape = f.shape
            guard let keychain = vault.keychain, let table = raw else { throw BenchError("no keychain") }

            // find: copyMatching by the full primary key, returnData (a point lookup by blind index).
            for _ in 0..<200 {
                _ = try keychain.find(Layout.query(Int.random(in: 0..<size, using: &rng), returnData: true))
            }
            try alternate(
                4,
                {
                    for _ in 0..<500 {
                        let i = Int.random(in: 0..<size, using: &rng)
                        let q = Layout.query(i, returnData: true)
                        var item: KeychainItem?
                        f.find.add(try Clock.time { item = try keychain.find(q) })
                        guard item?.data?.count == 12 else {
                            throw BenchError("find returned the wrong data for item \(i)")
                        }
                    }
                }, { f.raw.select.add(try table.timedSelects(500, rng: &rng)) })

            // update: new data for one item by its full primary key: one durable commit each.
            try alternate(
                4,
                {
                    for _ in 0..<250 {
                        let i = Int.random(in: 0..<size, using: &rng)
                        let q = Layout.query(i)
                        let data = Layout.secret(i, tag: "upd")
                        f.update.add(try Clock.time { _ = try keychain.update(q, attributes: [:], data: data) })
                    }
                }, { f.raw.update.add(try table.timedUpdates(250, rng: &rng)) })
        }
        raw = nil
        vault.close()

        // Unlock: open + unlock of a fresh Keychain on the file, five times, each next to a
        // run of Argon2id alone (so "unlock − KDF" compares figures taken moments apart).
        let passphrase = try BenchVault.passphrase()
        let header = try VaultStore.open(at: vault.path)
        for round in 0..<5 {
            let salt = Sodium.randomBytes(PasswordHashParameters.saltBytes)
            f.kdf.add(
                try Clock.time {
                    _ = try KeyDerivation.passwordKey(passphrase: passphrase, salt: salt, parameters: .interactive)
                })
            var kc: Keychain?
            f.open.add(try Clock.time { kc = try vault.open() })
            f.unlock.add(try Clock.time { try kc!.unlock(passphrase: passphrase) })
            if round == 0 {
                for _ in 0..<3 { f.manifest.add(try Clock.time { try kc!.verifyIntegrity() }) }
            }
        }

        // File size after a checkpoint (WAL folded into the main file).
        try header.checkpoint()
        f.vaultBytes = fileSize(vault.path)
        f.walBytes = fileSize(vault.path + "-wal")
        return (f, vault)
    }
}
