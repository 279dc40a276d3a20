import CSQLite
import Foundation
import Keychain
import KeychainCrypto
import Synchronization
import Testing
@_exported import TestSupport

// Fixtures of the core tests: a real vault file in a private temp directory per test, real
// libsodium (Argon2id at INTERACTIVE), raw SQLite access for tampering. Temp directories and
// processes come from TestSupport, as in every test target.

let testPassphrase = "correct horse battery staple"

func secure(_ text: String) throws -> SecureBytes {
    try SecureBytes(copying: Array(text.utf8))
}

/// One vault in its own temp directory, with its own device key. Use through `withVault`,
/// which removes the directory when the test body returns (or throws).
final class TestVault: Sendable {
    let dir: String
    let path: String
    let deviceKeyPath: String
    let keychain: Keychain

    fileprivate init(passphrase: String) throws {
        dir = try makeTempDirectory("kcfs-core-tests")
        path = dir + "/test.vault"
        deviceKeyPath = dir + "/state/device.key"
        do {
            keychain = try Keychain.create(
                at: path, passphrase: try secure(passphrase), parameters: .interactive,
                deviceKeyPath: deviceKeyPath)
        } catch {
            try? FileManager.default.removeItem(atPath: dir)
            throw error
        }
    }

    /// A second, independent Keychain (own SQLite connection) on the same file, locked.
    func open(deviceKeyPath: String? = nil) throws -> Keychain {
        try Keychain.open(at: path, deviceKeyPath: deviceKeyPath ?? self.deviceKeyPath)
    }

    /// A fresh open followed by unlock: re-runs the unlock-time integrity check.
    func openUnlocked(passphrase: String = testPassphrase, deviceKeyPath: String? = nil) throws -> Keychain {
        let kc = try open(deviceKeyPath: deviceKeyPath)
        try kc.unlock(passphrase: try secure(passphrase))
        return kc
    }

    func raw() throws -> RawDB { try RawDB(path) }

    fileprivate func remove() { try? FileManager.default.removeItem(atPath: dir) }
}

func withVault(passphrase: String = testPassphrase, _ body: (TestVault) throws -> Void) throws {
    let vault = try TestVault(passphrase: passphrase)
    defer { vault.remove() }
    try withExtendedLifetime(vault) { try body(vault) }
}

/// A private temp directory (for tests that do not want a vault made for them).
func withTempDir(_ body: (String) throws -> Void) throws {
    try withTempDirectory("kcfs-core-tests", body)
}

// MARK: Expecting errors

/// Runs `body`, expecting a KeychainError with `status` (and a message containing each of
/// `containing`, case-insensitively). Records an issue otherwise. Returns the error.
@discardableResult
func expectError<R>(
    _ status: KeychainStatus, containing: [String] = [],
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () throws -> R
) -> KeychainError? {
    do {
        let result = try body()
        Issue.record("expected \(status) but the call succeeded: \(result)", sourceLocation: sourceLocation)
        return nil
    } catch let error as KeychainError {
        #expect(
            error.status == status, "expected \(status), got \(error.status): \(error.message)",
            sourceLocation: sourceLocation)
        for text in containing {
            #expect(
                error.message.lowercased().contains(text.lowercased()),
                "message \"\(error.message)\" should mention \"\(text)\"", sourceLocation: sourceLocation)
        }
        return error
    } catch {
        Issue.record(
            "expected KeychainError(\(status)), got \(type(of: error)): \(error)", sourceLocation: sourceLocation)
        return nil
    }
}

// MARK: Attributes

extension Attribute {
    static func named(_ name: String) -> Attribute { Schema.named(name) }
}

func genp(_ service: String, _ account: String? = nil, _ extra: Attributes = [:]) -> Attributes {
    var a: Attributes = [Schema.service: .string(service)]
    if let account { a[Schema.account] = .string(account) }
    for (k, v) in extra { a[k] = v }
    return a
}

func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }

/// Reads the data of the one genp item (service, account) as the default caller.
func secret(_ kc: Keychain, _ service: String, _ account: String, caller: Caller = .default) throws -> [UInt8]? {
    try kc.find(Query(.genericPassword, genp(service, account), returnData: true), caller: caller).data
}

/// Everything a caller can see, by class: id, attributes and data. Used to show that a
/// failed call changed nothing.
struct ItemSnapshot: Equatable, CustomStringConvertible {
    let id: Int64
    let itemClass: ItemClass
    let attributes: Attributes
    let data: [UInt8]?
    var description: String { "\(itemClass) #\(id) \(attributes.count) attrs, \(data?.count ?? -1) data bytes" }
}

func snapshot(_ kc: Keychain, caller: Caller = .default) throws -> [ItemSnapshot] {
    var out: [ItemSnapshot] = []
    for itemClass in [ItemClass.genericPassword, .internetPassword, .certificate, .key] {
        do {
            let items = try kc.copyMatching(
                Query(itemClass, matchLimit: .all, returnData: true, synchronizableAny: true),
                caller: caller)
            out += items.map {
                ItemSnapshot(id: $0.id, itemClass: $0.itemClass, attributes: $0.attributes, data: $0.data)
            }
        } catch KeychainStatus.itemNotFound {}
    }
    return out.sorted { $0.id < $1.id }
}

// MARK: Raw SQLite, for tampering with the vault behind the keychain's back

enum Cell: Equatable {
    case integer(Int64)
    case text(String)
    case blob([UInt8])
    case null
}

struct RawDBError: Error, CustomStringConvertible {
    let description: String
}

/// A plain sqlite3 connection to a file, independent of KeychainStore.
final class RawDB {
    private let db: OpaquePointer

    init(_ path: String) throws {
        var handle: OpaquePointer?
        let rc = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nil)
        guard rc == SQLITE_OK, let handle else {
            if let handle { sqlite3_close_v2(handle) }
            throw RawDBError(description: "cannot open \(path): \(rc)")
        }
        db = handle
        sqlite3_busy_timeout(db, 30_000)
    }

    deinit { sqlite3_close_v2(db) }

    func exec(_ sql: String) throws {
        let rc = sqlite3_exec(db, sql, nil, nil, nil)
        guard rc == SQLITE_OK else { throw RawDBError(description: "\(sql): \(String(cString: sqlite3_errmsg(db)))") }
    }

    @discardableResult
    func query(_ sql: String, _ bindings: [Cell] = []) throws -> [[Cell]] {
        var stmt: OpaquePointer?
        guard sqlite3_prepare_v2(db, sql, -1, &stmt, nil) == SQLITE_OK, let stmt else {
            throw RawDBError(description: "\(sql): \(String(cString: sqlite3_errmsg(db)))")
        }
        defer { sqlite3_finalize(stmt) }
        for (i, cell) in bindings.enumerated() {
            let idx = Int32(i + 1)
            switch cell {
            case .integer(let v): sqlite3_bind_int64(stmt, idx, v)
            case .text(let s): kcfs_sqlite3_bind_text_copy(stmt, idx, s, -1)
            case .blob(let b):
                _ = b.withUnsafeBytes {
                    kcfs_sqlite3_bind_blob_copy(
                        stmt, idx, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32($0.count))
                }
            case .null: sqlite3_bind_null(stmt, idx)
            }
        }
        var rows: [[Cell]] = []
        while true {
            let rc = sqlite3_step(stmt)
            if rc == SQLITE_DONE { break }
            guard rc == SQLITE_ROW else {
                throw RawDBError(description: "\(sql): \(String(cString: sqlite3_errmsg(db)))")
            }
            var row: [Cell] = []
            for c in 0..<sqlite3_column_count(stmt) {
                switch sqlite3_column_type(stmt, c) {
                case SQLITE_INTEGER: row.append(.integer(sqlite3_column_int64(stmt, c)))
                case SQLITE_TEXT: row.append(.text(String(cString: sqlite3_column_text(stmt, c))))
                case SQLITE_BLOB:
                    let n = Int(sqlite3_column_bytes(stmt, c))
                    if n == 0 {
                        row.append(.blob([]))
                    } else {
                        row.append(
                            .blob([UInt8](UnsafeRawBufferPointer(start: sqlite3_column_blob(stmt, c), count: n))))
                    }
                case SQLITE_NULL: row.append(.null)
                default: row.append(.text(String(cString: sqlite3_column_text(stmt, c))))
                }
            }
            rows.append(row)
        }
        return rows
    }

    func itemBlob(_ column: String, id: Int64) throws -> [UInt8] {
        guard case .blob(let b)? = try query("SELECT \(column) FROM items WHERE id = ?", [.integer(id)]).first?.first
        else {
            throw RawDBError(description: "no blob \(column) for item \(id)")
        }
        return b
    }

    func setItem(_ column: String, id: Int64, _ value: Cell) throws {
        try query("UPDATE items SET \(column) = ? WHERE id = ?", [value, .integer(id)])
        guard changes == 1 else { throw RawDBError(description: "item \(id) not updated") }
    }

    /// Flips the bits of one byte of a blob column of an item row.
    func flipByte(_ column: String, id: Int64, at index: (Int) -> Int) throws {
        var b = try itemBlob(column, id: id)
        b[index(b.count)] ^= 0xff
        try setItem(column, id: id, .blob(b))
    }

    static let itemColumns = ["class", "pidx", "sidx", "version", "data_gen", "attrs", "item_key", "data"]

    func itemRow(id: Int64) throws -> [Cell] {
        guard
            let row = try query(
                "SELECT \(Self.itemColumns.joined(separator: ", ")) FROM items WHERE id = ?", [.integer(id)]
            ).first
        else {
            throw RawDBError(description: "no item \(id)")
        }
        return row
    }

    func writeItemRow(id: Int64, _ row: [Cell]) throws {
        let sets = Self.itemColumns.map { "\($0) = ?" }.joined(separator: ", ")
        try query("UPDATE items SET \(sets) WHERE id = ?", row + [.integer(id)])
        guard changes == 1 else { throw RawDBError(description: "item \(id) not rewritten") }
    }

    func meta(_ name: String) throws -> [UInt8]? {
        guard case .blob(let b)? = try query("SELECT value FROM meta WHERE name = ?", [.text(name)]).first?.first else {
            return nil
        }
        return b
    }

    func setMeta(_ name: String, _ value: [UInt8]) throws {
        try query("UPDATE meta SET value = ? WHERE name = ?", [.blob(value), .text(name)])
        guard changes == 1 else { throw RawDBError(description: "meta \(name) not updated") }
    }

    var changes: Int { Int(sqlite3_changes(db)) }
}

/// 8-byte little-endian, as the vault header stores integers.
func le64(_ v: UInt64) -> [UInt8] { withUnsafeBytes(of: v.littleEndian) { Array($0) } }

// MARK: Threads

/// Runs each body on its own OS thread (not the Swift concurrency pool, so blocking SQLite
/// waits cannot starve other tests) and waits for all of them.
func runOnThreads(_ bodies: [@Sendable () -> Void]) {
    let group = DispatchGroup()
    for body in bodies {
        group.enter()
        let thread = Thread {
            body(); group.leave()
        }
        thread.stackSize = 4 << 20
        thread.start()
    }
    group.wait()
}

/// Errors collected from several threads.
final class ErrorBox: Sendable {
    private let errors = Mutex<[String]>([])
    func add(_ e: any Error, _ context: String) { errors.withLock { $0.append("\(context): \(e)") } }
    var all: [String] { errors.withLock { $0 } }
}

/// Damaged rows a keychain reported (see `Keychain.onDamagedRow`), from any thread.
final class DamageLog: Sendable {
    private let rows = Mutex<[DamagedRow]>([])
    func add(_ row: DamagedRow) { rows.withLock { $0.append(row) } }
    var all: [DamagedRow] { rows.withLock { $0 } }
}

/// The vault format and store schema today's code writes and migrates every fixture to.
let currentVaultFormat: UInt64 = 8
let currentStoreSchema: Int64 = 6
