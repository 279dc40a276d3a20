import Foundation
import Keychain
import KeychainCrypto
import KeychainStore

/// Names and contents shared by the benchmark vaults and the floor filesystem, so both
/// serve the same paths with the same bytes:
///
///     item i < 1,000          /genp/d1k/acct<i, 6 digits>     (the 1,000-entry directory)
///     1,000 ≤ i < 11,000      /genp/d10k/acct…                (the 10,000-entry directory)
///     i ≥ 11,000              /genp/s<k, 4 digits>/acct…      (1,000 items per service)
///
/// Every secret is 12 bytes (`sec-00000042`).
enum Layout {
    static let smallDirectory = "d1k"
    static let largeDirectory = "d10k"
    static let smallCount = 1_000
    static let largeCount = 10_000

    static func service(_ i: Int) -> String {
        if i < smallCount { return smallDirectory }
        if i < smallCount + largeCount { return largeDirectory }
        return "s" + String(format: "%04d", (i - smallCount - largeCount) / 1_000)
    }

    static func account(_ i: Int) -> String { "acct" + String(format: "%06d", i) }

    /// 12 bytes: `tag` (3 characters), a dash, 8 digits.
    static func secret(_ i: Int, tag: String = "sec") -> [UInt8] {
        Array((tag + "-" + String(format: "%08d", i % 100_000_000)).utf8)
    }

    static func query(_ i: Int, returnData: Bool? = nil) -> Query {
        Query(
            .genericPassword, [Schema.service: .string(service(i)), Schema.account: .string(account(i))],
            returnData: returnData)
    }

    /// A vault this size holds the 10,000-entry directory whole.
    static func hasLargeDirectory(_ size: Int) -> Bool { size >= smallCount + largeCount }

    /// The floor's directories (it always has both).
    static func floorDirectories() -> [(String, [(String, [UInt8])])] {
        [
            (smallDirectory, (0..<smallCount).map { (account($0), secret($0)) }),
            (largeDirectory, (smallCount..<(smallCount + largeCount)).map { (account($0), secret($0)) }),
        ]
    }
}

/// A benchmark vault: created with INTERACTIVE Argon2id in the run's temp directory and
/// filled through the public core API: the untimed population with `Keychain.addBatch`, one
/// durable transaction per `populateBatch` items (every rule of `add` applied to each), the
/// timed adds one durable `add` each. Items are added in index order: item i is
/// `Layout.service(i)/Layout.account(i)`.
final class BenchVault {
    static let passphraseText = "keychainfs-bench passphrase"
    static func passphrase() throws -> SecureBytes { try SecureBytes(copying: Array(passphraseText.utf8)) }

    /// The passphrase in `directory/passphrase` (0600), for the CLIs and helpers a row starts.
    static func writePassphraseFile(in directory: String) throws -> String {
        let path = directory + "/passphrase"
        guard
            FileManager.default.createFile(
                atPath: path, contents: Data(passphraseText.utf8), attributes: [.posixPermissions: 0o600])
        else { throw BenchError("cannot write \(path)") }
        return path
    }

    /// The size it is meant to reach.
    let size: Int
    let path: String
    let deviceKeyPath: String
    /// The unlocked keychain it is filled through; nil once closed.
    private(set) var keychain: Keychain?
    /// Items added so far.
    private(set) var count = 0
    /// Time and count of the untimed bulk population (the measured adds are not in it).
    private(set) var populateSeconds: Double = 0
    private(set) var populateCount = 0
    private(set) var createSeconds: Double = 0

    private init(size: Int, path: String, deviceKeyPath: String) {
        self.size = size
        self.path = path
        self.deviceKeyPath = deviceKeyPath
    }

    /// Creates an empty vault meant to hold `size` items, unlocked.
    static func create(size: Int, directory: String) throws -> BenchVault {
        // The device key where `keychainfs mount` finds it with XDG_STATE_HOME=<dir>/state.
        let vault = BenchVault(
            size: size, path: directory + "/bench-\(size).vault",
            deviceKeyPath: stateDirectory(directory) + "/keychainfs/device.key")
        vault.createSeconds = try Clock.time {
            vault.keychain = try Keychain.create(
                at: vault.path, passphrase: try passphrase(), parameters: .interactive,
                deviceKeyPath: vault.deviceKeyPath)
        }
        return vault
    }

    /// Items per write transaction when populating: big enough that the commit's fsyncs are
    /// noise, small enough that a batch's rows stay a few MiB in memory.
    static let populateBatch = 1_000

    private static func newItem(_ i: Int) -> NewItem {
        NewItem(
            .genericPassword, [Schema.service: .string(Layout.service(i)), Schema.account: .string(Layout.account(i))],
            data: Layout.secret(i))
    }

    private func addNext() throws {
        guard let keychain else { throw BenchError("the vault is closed") }
        let item = Self.newItem(count)
        try keychain.add(item.itemClass, item.attributes, data: item.data)
        count += 1
    }

    /// Adds items until there are `n`, `populateBatch` per transaction (a fixture: timed as a
    /// whole, with progress notes).
    func populate(upTo n: Int) throws {
        guard let keychain else { throw BenchError("the vault is closed") }
        let start = Clock.now()
        var lastNote = start
        let first = count
        while count < n {
            let batch = count..<min(n, count + Self.populateBatch)
            try keychain.addBatch(batch.map(Self.newItem))
            count = batch.upperBound
            if Clock.now() - lastNote > 15_000_000_000 {
                lastNote = Clock.now()
                Out.progress(
                    "  populating \(Fmt.grouped(size)) items: \(Fmt.grouped(count)) added in \(Fmt.seconds(populateSeconds + Clock.since(start)))"
                )
            }
        }
        populateSeconds += Clock.since(start)
        populateCount += count - first
    }

    /// Adds the next `n` items, timing each.
    func addTimed(_ n: Int) throws -> Samples {
        var s = Samples()
        for _ in 0..<n {
            let t = Clock.now()
            try addNext()
            s.add(Clock.since(t))
        }
        return s
    }

    /// Drops the keychain (its SQLite connection closes).
    func close() { keychain = nil }

    /// XDG_STATE_HOME of the daemons: device key, audit log, control socket.
    static func stateDirectory(_ directory: String) -> String { directory + "/state" }

    func open() throws -> Keychain {
        try Keychain.open(at: path, deviceKeyPath: deviceKeyPath)
    }

    /// Byte lengths of a stored row (for the raw SQLite baseline), read from item 1.
    func rowShape() throws -> RawSQLite.RowShape {
        guard let row = try VaultStore.open(at: path).item(id: 1) else { throw BenchError("the vault has no item 1") }
        return RawSQLite.RowShape(
            attrs: row.sealedAttributes.count, itemKey: row.wrappedItemKey.count, data: row.sealedData.count)
    }
}
