import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

// `keychainfs verify` and `keychainfs backup`: the full check of a vault, and a consistent
// copy of one that is checked before it is called a backup.

/// What a full check found: counts, and every failure (vault-level ones and damaged rows).
public struct VerificationReport: Sendable {
    public var format: Int64 = 0
    /// The authenticated commit counter (nil for format 1, or when the manifest fails).
    public var counter: Int64?
    /// The highest counter this device has seen for the vault, if any.
    public var deviceMark: Int64?
    public var itemsByClass: [String: Int] = [:]
    /// Access groups in the policy; nil when the vault has no policy.
    public var policyGroups: Int?
    public var classKeysOpened = 0
    /// The device key is not the one the ThisDeviceOnly class keys were bound to (another
    /// machine): those keys, and their items' data, were not checked.
    public var deviceMismatch = false
    /// Items whose data could not be checked because their class key is not held.
    public var dataNotChecked = 0
    public var failures: [String] = []
    public var damaged: [DamagedRow] = []
    public var isClean: Bool { failures.isEmpty && damaged.isEmpty }
}

/// What `backup` wrote.
public struct BackupSummary: Sendable {
    public let items: Int
    public let format: Int64
    /// The copy's commit counter (nil for format 1).
    public let counter: Int64?
    public init(items: Int, format: Int64, counter: Int64?) {
        self.items = items
        self.format = format
        self.counter = counter
    }
}

extension Keychain {
    // MARK: verify

    /// The full check, changing nothing (a format-1 or format-2 vault is checked as its format, not
    /// migrated): the passphrase unwraps the master key; the class keys open (the
    /// ThisDeviceOnly ones when the device key is the one they were bound to); the manifest's
    /// tag verifies over the header and class keys and the table and policy match it; the
    /// policy's signature verifies; and every row passes its own check (attributes, and item
    /// key and data where the class key is held, and from format 3 its attribute-index tags made
    /// again from its attributes); in format 4 also every stored bucket against the buckets tallied
    /// from the table, so `verify` still checks everything the incremental mount check spreads out. A wrong passphrase throws; everything else is reported.
    public func verify(passphrase: SecureBytes) throws -> VerificationReport {
        let master = try refreshedHeader().unwrapMaster(passphrase: passphrase)
        let manifestKeys = try ManifestKeys(master: master)
        let metadata = try KeyDerivation.subkey(of: master, id: Subkey.metadata.rawValue, context: Subkey.context)
        let policyKey = try Self.policyKeyPair(master: master).0
        let indexKey = try KeyDerivation.subkey(
            of: master, id: Subkey.attributeIndex.rawValue, context: Subkey.context)
        let device = try DeviceKey.load(at: deviceKeyPath)
        var report = VerificationReport()
        report.deviceMark = rollbackMark.read()
        try storeCall {
            try store.read { vault in
                let state = try AuthenticatedState.read(from: vault)
                report.format = state.header.format
                let deviceMatches = device.map { DeviceKey.identifier(of: $0) == state.header.deviceKeyID } ?? false
                report.deviceMismatch = !deviceMatches
                var classKeys: [Accessibility: SecureBytes] = [:]
                do {
                    classKeys = try Self.openClassKeys(state, master: master, device: deviceMatches ? device : nil)
                } catch let e as KeychainError { report.failures.append(e.message) }
                report.classKeysOpened = classKeys.count
                // Formats 4 to 6: the buckets tallied from the table (format 6: the name lists' accumulator
                // apart); formats 1 to 3: the flat accumulator.
                let bucketed = state.header.format >= VaultHeader.bucketedManifestFormat
                let (found, buckets) =
                    bucketed
                    ? try Manifest.bucketTally(
                        vault, key: manifestKeys.entry,
                        split: state.header.format >= VaultHeader.nameAccumulatorFormat)
                    : (try Manifest.tally(vault, key: manifestKeys.entry), [:])
                if let problem = try manifestProblem(vault, state, found: found, keys: manifestKeys, into: &report) {
                    let which = ManifestBuckets.differing(found: buckets, stored: try ManifestBuckets.stored(vault))
                    report.failures.append(problem + (bucketed ? which.map { " in \($0)" } ?? "" : ""))
                } else if bucketed,
                    let which = ManifestBuckets.differing(found: buckets, stored: try ManifestBuckets.stored(vault))
                {
                    report.failures.append(
                        "vault integrity check failed: the manifest's bucket table does not match the item table in \(which)"
                    )
                }
                // A list's stored bucket against its chunks (the tally above covers the chunks, not
                // the bucket rows an unlock folds).
                if state.header.format >= VaultHeader.nameListFormat,
                    let which = NameLists.differing(
                        found: try NameLists.tally(vault, key: manifestKeys.entry), stored: try NameLists.stored(vault))
                {
                    report.failures.append(
                        "vault integrity check failed: the name lists' bucket table does not match their chunks in \(which)"
                    )
                }
                if let blob = try vault.meta("access_policy") {
                    let policy = openPolicy(blob, publicKey: policyKey, metadataKey: metadata)
                    report.policyGroups = policy?.groups.count ?? 0
                    if policy == nil {
                        report.failures.append("the access policy does not verify: its signature or encryption fails")
                    }
                }
                if state.header.format >= VaultHeader.nameListFormat,
                    let problem = try nameListProblem(
                        vault, NameLists(vaultID: state.header.vaultID, keys: manifestKeys))
                {
                    report.failures.append(problem)
                }
                if state.header.format >= VaultHeader.changeLogFormat,
                    let problem = try ChangeLog.problem(in: vault, vaultID: state.header.vaultID, metadataKey: metadata)
                {
                    report.failures.append(problem)
                }
                try vault.forEachItem { row in
                    report.itemsByClass[row.itemClass, default: 0] += 1
                    switch checkRow(row, metadataKey: metadata, classKeys: classKeys) {
                    case .intact: break
                    case .dataNotChecked: report.dataNotChecked += 1
                    case .damaged(let reason):
                        report.damaged.append(DamagedRow(id: row.id, itemClass: row.itemClass, reason: reason))
                    }
                    if state.header.format >= VaultHeader.attributeIndexFormat,
                        let reason = try attributeIndexProblem(row, vault, metadataKey: metadata, indexKey: indexKey)
                    {
                        report.damaged.append(DamagedRow(id: row.id, itemClass: row.itemClass, reason: reason))
                    }
                }
            }
        }
        return report
    }

    /// What is wrong with the manifest against the table `found`, or nil.
    private func manifestProblem(
        _ vault: any ItemStoreReader, _ state: AuthenticatedState, found: Manifest, keys: ManifestKeys,
        into report: inout VerificationReport
    ) throws -> String? {
        guard state.header.format >= VaultHeader.authenticatedManifestFormat else {
            guard let stored = try vault.meta("manifest"), let old = Manifest.formatOne(stored),
                old.count == found.count, Sodium.constantTimeEqual(old.accumulator, found.formatOneAccumulator)
            else { return "vault integrity check failed: the item table does not match its format-1 manifest" }
            return nil
        }
        do {
            let expected = try state.verified(try vault.meta("manifest"), keys: keys)
            report.counter = expected.counter
            return Manifest.mismatch(found: found, expected: expected).map { "vault integrity check failed: \($0)" }
        } catch let e as KeychainError { return e.message }
    }

    /// Whether a row's attribute-index tags are the ones its attributes give (format 3 on): made
    /// again from the decrypted attributes and compared. The manifest already covers the index;
    /// this names the item whose entries a writer got wrong. nil when they agree, or when the
    /// attributes do not open (reported by `checkRow`).
    private func attributeIndexProblem(
        _ row: StoredItem, _ vault: any ItemStoreReader, metadataKey: SecureBytes, indexKey: SecureBytes
    ) throws -> String? {
        guard let itemClass = ItemClass(rawValue: row.itemClass),
            let attributes = try? openAttributes(row, itemClass: itemClass, metadataKey: metadataKey)
        else { return nil }
        let expected = Self.attributeTags(itemClass, attributes, key: indexKey)
        guard Set(try vault.attributeTags(itemID: row.id)) != Set(expected) else { return nil }
        return "its attribute-index entries do not match its attributes"
    }

    /// Whether the name lists list exactly the rows (format 5): each list made again from the rows'
    /// attributes and compared, entry by entry (id and name attributes), with its chunks opened.
    /// The manifest already covers the chunks; this finds a writer that got a list wrong (or a
    /// list no row stands for), named by its bucket only. nil when they agree.
    private func nameListProblem(_ vault: any ItemStoreReader, _ lists: NameLists) throws -> String? {
        var expected: [[UInt8]: (itemClass: ItemClass, entries: [Int64: [UInt8]])] = [:]
        try vault.forEachItem { row in
            // A row whose attributes do not open is reported by its own check.
            guard let (itemClass, entry) = try? lists.entry(of: row) else { return }
            expected[row.secondaryIndex, default: (itemClass, [:])].entries[row.id] = Array(entry.fields)
        }
        var found: [[UInt8]: [Int64: [UInt8]]] = [:]
        var unreadable = Set<[UInt8]>()
        try vault.forEachNameChunk { sidx, chunk, sealed in
            let classes = expected[sidx].map { [$0.itemClass] } ?? Array(NameLists.listedClasses)
            guard let entries = classes.lazy.compactMap({ try? lists.open(sealed, $0, sidx, chunk) }).first else {
                unreadable.insert(sidx)
                return
            }
            for entry in entries {
                if found[sidx, default: [:]].updateValue(Array(entry.fields), forKey: entry.id)
                    != nil
                {
                    unreadable.insert(sidx)
                }
            }
        }
        let differing = Set(expected.keys).union(found.keys).filter {
            unreadable.contains($0) || (expected[$0]?.entries ?? [:]) != (found[$0] ?? [:])
        }
        guard !differing.isEmpty else { return nil }
        let named = differing.prefix(10).map(NameLists.describe).joined(separator: ", ")
        return
            "the name lists do not match the items in \(differing.count) director\(differing.count == 1 ? "y" : "ies"): \(named)"
    }

    enum RowCheck: Equatable {
        case intact
        case dataNotChecked
        case damaged(String)
    }

    /// One row's own check: its attributes open under the metadata key, and its item key and
    /// data under its class key when that key is held.
    func checkRow(_ row: StoredItem, metadataKey: SecureBytes, classKeys: [Accessibility: SecureBytes]) -> RowCheck {
        guard let itemClass = ItemClass(rawValue: row.itemClass) else { return .damaged("unknown item class") }
        guard let attributes = try? openAttributes(row, itemClass: itemClass, metadataKey: metadataKey) else {
            return .damaged("its attributes do not authenticate")
        }
        guard let classKey = classKeys[Self.accessibility(of: attributes)] else { return .dataNotChecked }
        do {
            try checkSeal(row, itemClass: itemClass, attributes: attributes, classKey: classKey)
        } catch {
            return .damaged("its data does not authenticate")
        }
        return .intact
    }

    // MARK: backup

    /// Writes a consistent copy of the vault at `path` to `destination` with SQLite's
    /// `VACUUM INTO` (one read transaction: committed changes still in the WAL are in it, and
    /// a writer in another process, such as a mounted daemon, neither waits nor tears it),
    /// into a new file created 0600 (an existing file is never overwritten), synced, then
    /// checked by opening it: SQLite's integrity check, a header this build reads, and as many
    /// rows as its manifest counts. A copy that fails the check is removed.
    public static func backup(from path: String, to destination: String) throws -> BackupSummary {
        let source: VaultStore
        do { source = try VaultStore.open(at: path) } catch { throw mapStoreError(error, path: path) }
        let fd = Glibc.open(destination, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            // An existing file is errSecDuplicateKeychain, as for `init` onto one.
            let exists = errno == EEXIST
            let reason = exists ? "it exists; a backup never overwrites a file" : String(cString: strerror(errno))
            throw KeychainError(exists ? .duplicateKeychain : .io, "cannot create the backup \(destination): \(reason)")
        }
        close(fd)
        do {
            do { try source.copy(into: destination) } catch { throw mapStoreError(error, path: path) }
            try syncFile(destination)
            try syncFile(KeychainPaths.parent(of: destination))
            return try checkedCopy(destination)
        } catch {
            for suffix in ["", "-wal", "-shm"] { unlink(destination + suffix) }
            throw error
        }
    }

    /// Opens a fresh copy and checks what can be checked without the passphrase.
    private static func checkedCopy(_ path: String) throws -> BackupSummary {
        let failed = { (why: String) in KeychainError(.decode, "the backup at \(path) did not verify: \(why)") }
        let copy: VaultStore
        do { copy = try VaultStore.open(at: path) } catch { throw mapStoreError(error, path: path) }
        do {
            if let complaint = try copy.integrityComplaint() { throw failed("SQLite: \(complaint)") }
            return try copy.read { vault in
                let header = try VaultHeader.read(from: vault)
                let rows = try vault.itemCount()
                guard let stored = try vault.meta("manifest") else { throw failed("it has no manifest") }
                if header.format >= VaultHeader.authenticatedManifestFormat {
                    guard let (manifest, _) = Manifest.decode(stored), manifest.count == Int64(rows) else {
                        throw failed("its manifest does not count its \(rows) rows")
                    }
                    return BackupSummary(items: rows, format: header.format, counter: manifest.counter)
                }
                guard let manifest = Manifest.formatOne(stored), manifest.count == Int64(rows) else {
                    throw failed("its manifest does not count its \(rows) rows")
                }
                return BackupSummary(items: rows, format: header.format, counter: nil)
            }
        } catch let e as KeychainError { throw e } catch { throw mapStoreError(error, path: path) }
    }

    private static func syncFile(_ path: String) throws {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0, fsync(fd) == 0 else {
            let reason = String(cString: strerror(errno))
            if fd >= 0 { close(fd) }
            throw KeychainError(.io, "cannot sync \(path): \(reason)")
        }
        close(fd)
    }
}
