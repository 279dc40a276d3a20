import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

// The authenticated manifest at work: every write transaction, the unlock-time check, rollback
// detection against the device's mark, and the one-time migration from format 1.

/// A row that fails its own check (its attributes or data do not authenticate): named by id
/// and class only, never by anything read from it.
public struct DamagedRow: Sendable, Equatable, CustomStringConvertible {
    public let id: Int64
    public let itemClass: String
    public let reason: String
    public var description: String { "item \(id) (\(itemClass)): \(reason)" }
}

extension Keychain {
    // MARK: Write transactions: `writeTransaction` and the group commit are in CommitQueue.swift.

    // MARK: Unlock-time check

    /// Authenticates the manifest and checks the bucket table and access policy against it, in
    /// one snapshot, and, unless `incremental`, every bucket's rows against the bucket table and
    /// the name lists' bucket table against its accumulator (the full check; `incremental` leaves
    /// each bucket for its first read or the background pass, and the name lists' table for the
    /// first listing, Keychain+IncrementalCheck.swift). Returns the manifest and the authenticated
    /// header and class keys. A mismatch says what does not match, in which buckets, and names the rows that
    /// fail their own check. `first` sees the header and class keys of the same snapshot before
    /// the tag is checked (unlock opens the class keys there, so a damaged one is named as such).
    func verifyManifest(
        keys: ManifestKeys, metadataKey: SecureBytes, incremental: Bool = false,
        first: (AuthenticatedState) throws -> Void = { _ in }
    ) throws -> (Manifest, AuthenticatedState) {
        try storeCall {
            try store.read { vault in
                let state = try AuthenticatedState.read(from: vault)
                try first(state)
                let expected = try state.verified(try vault.meta("manifest"), keys: keys)
                let stored = try ManifestBuckets.stored(vault)
                if !incremental {
                    let (found, buckets) = try Manifest.bucketTally(vault, key: keys.entry)
                    if let problem = Manifest.mismatch(found: found, expected: expected) {
                        let damaged = try damagedRows(in: vault, metadataKey: metadataKey)
                        let which = ManifestBuckets.differing(found: buckets, stored: stored).map { " in \($0)" } ?? ""
                        throw KeychainError(
                            .decode, "vault integrity check failed: \(problem)\(which); \(Self.describe(damaged))")
                    }
                }
                if let problem = try Manifest.bucketTableMismatch(
                    vault, stored, expected: expected, key: keys.entry, names: !incremental)
                {
                    throw KeychainError(.decode, "vault integrity check failed: \(problem)")
                }
                return (expected, state)
            }
        }
    }

    /// Rows whose attribute box does not open under the metadata key with their own id,
    /// class and version: moved, altered or made-up rows. (A whole older row replayed opens;
    /// only the manifest catches it.)
    func damagedRows(
        in vault: any ItemStoreReader, metadataKey: SecureBytes, ids: ClosedRange<Int64>? = nil
    ) throws -> [DamagedRow] {
        var damaged: [DamagedRow] = []
        func check(_ row: StoredItem) {
            guard let itemClass = ItemClass(rawValue: row.itemClass) else {
                damaged.append(DamagedRow(id: row.id, itemClass: row.itemClass, reason: "unknown item class"))
                return
            }
            if (try? openAttributes(row, itemClass: itemClass, metadataKey: metadataKey)) == nil {
                damaged.append(
                    DamagedRow(id: row.id, itemClass: row.itemClass, reason: "its attributes do not authenticate"))
            }
        }
        if let ids { try vault.forEachItem(ids: ids, check) } else { try vault.forEachItem(check) }
        return damaged
    }

    static func describe(_ damaged: [DamagedRow]) -> String {
        guard !damaged.isEmpty else {
            return "every row passes its own check, so whole rows were deleted, added or replayed from an older copy"
        }
        let named = damaged.prefix(10).map { "\($0.id) (\($0.itemClass))" }.joined(separator: ", ")
        let more = damaged.count > 10 ? " and \(damaged.count - 10) more" : ""
        return "rows that fail their own check: \(named)\(more)"
    }

    // MARK: Damaged rows met while serving

    /// `observer` is told (on the calling thread) about each row a query or listing skips
    /// because it fails its own check; faces log it. Replaces any earlier observer.
    public func onDamagedRow(_ observer: @escaping @Sendable (DamagedRow) -> Void) {
        state.withLock { $0.damagedRowObserver = observer }
    }

    func reportDamaged(_ row: DamagedRow) {
        let observer = state.withLock { $0.damagedRowObserver }
        observer?(row)
    }

    // MARK: Rollback

    /// The highest counter this process or this device has seen. Read it *before* the
    /// transaction that reads the counter it is compared with: a mark is raised only after its
    /// commit is durable, so any snapshot begun later holds a counter at least as high, unless
    /// the file went back. (Read after a read snapshot began, a mark raised by another process's
    /// newer commit would look like a rollback.) Inside a write transaction either order is
    /// safe: it sees the latest commit, and nobody else commits meanwhile.
    func highestCounterSeen() -> Int64 {
        max(state.withLock { $0.highestCounterSeen }, rollbackMark.read() ?? 0)
    }

    /// Refuses a counter below `seen` (by default: what `highestCounterSeen` says now),
    /// unless `accepting` (then the device's mark is reset to it).
    func refuseRollback(_ counter: Int64, seen given: Int64? = nil, accepting: Bool) throws {
        let seen = given ?? highestCounterSeen()
        guard counter < seen else { return }
        guard accepting else {
            throw KeychainError(
                .decode,
                "vault \(path) was rolled back: its commit counter is \(counter) but this device has seen \(seen). If you restored it from a backup on purpose, open it once with --accept-rollback"
            )
        }
        try rollbackMark.reset(to: counter)
        state.withLock { $0.highestCounterSeen = counter }
    }

    /// Remembers a counter seen or committed, here and in the device's mark, once it is
    /// durable: the WAL is synced first (`ItemStore.syncLog`), since the commit that reached it
    /// may be one whose writer has not synced it yet (a group commit syncs after its commit,
    /// CommitQueue.swift, and so may another process's). If the sync fails the mark stays.
    func noteCounter(_ counter: Int64) {
        guard (try? store.syncLog()) != nil else { return }
        raiseMark(to: counter)
    }

    /// `noteCounter` for a counter known durable (the group commit's, after its fsync).
    func raiseMark(to counter: Int64) {
        state.withLock { $0.highestCounterSeen = max($0.highestCounterSeen, counter) }
        rollbackMark.raise(to: counter)
    }

    // MARK: Migration from formats 1 to 6

    /// Format 1 to 6 → 7 in one write transaction. The stored manifest is checked as its own
    /// format checks it (format 1: count and accumulator; formats 2 and 3: tag, table, index,
    /// policy and the device's rollback mark), then the store gets the new tables
    /// (`upgradeSchema`); a format-1 or format-2 vault gets every password item's attribute-index
    /// tags (`buildAttributeIndex`); the manifest's buckets are tallied from the table and index
    /// and stored, and their entries make the new top accumulator (ManifestBuckets.swift); every
    /// name list is built from the rows (a format-5 vault's lists, verified with the rows, are
    /// kept) and its bucket's entry XORed into the manifest's `names` (NameLists.swift); the
    /// master key is re-wrapped under the new format's associated data with the same KEK and
    /// salt, and the authenticated manifest is written. Rows, index rows, class keys and the
    /// policy (and a format-5 or -6 vault's name lists and buckets) are kept byte for byte; the
    /// change log (format 7) starts empty. Returns the
    /// new header (or the one another process migrated to first).
    func migrate(master: SecureBytes, kek: SecureBytes, metadataKey: SecureBytes, acceptRollback: Bool = false)
        throws -> VaultHeader
    {
        let keys = try ManifestKeys(master: master)
        let indexKey = try KeyDerivation.subkey(of: master, id: Subkey.attributeIndex.rawValue, context: Subkey.context)
        let (header, counter) = try storeCall {
            try store.write { vault -> (VaultHeader, Int64?) in
                var header = try VaultHeader.read(from: vault)
                guard header.format < VaultHeader.formatVersion else { return (header, nil) }
                try vault.upgradeSchema()
                var manifest =
                    try header.format == 1
                    ? formatOneManifest(vault, keys: keys, metadataKey: metadataKey)
                    : header.format >= VaultHeader.bucketedManifestFormat
                        ? verifiedManifest(
                            vault, keys: keys, metadataKey: metadataKey, acceptRollback: acceptRollback,
                            tally: {
                                try Manifest.bucketTally(
                                    $0, key: keys.entry, split: header.format >= VaultHeader.nameAccumulatorFormat
                                ).0
                            })
                        : verifiedManifest(
                            vault, keys: keys, metadataKey: metadataKey, acceptRollback: acceptRollback,
                            tally: { try Manifest.tally($0, key: keys.entry) })
                if header.format < 3 {
                    try buildAttributeIndex(
                        in: vault, metadataKey: metadataKey, indexKey: indexKey, entryKey: keys.entry,
                        manifest: &manifest)
                }
                let buckets = try ManifestBuckets.tally(vault, key: keys.entry)
                try ManifestBuckets.write(buckets, to: vault)
                (manifest.accumulator, manifest.count) = ManifestBuckets.fold(buckets, key: keys.entry)
                let names =
                    header.format >= VaultHeader.nameListFormat
                    ? try NameLists.tally(vault, key: keys.entry)
                    : try NameLists(vaultID: header.vaultID, keys: keys).rebuild(in: vault)
                manifest.names = NameLists.fold(names, key: keys.entry)
                header.format = VaultHeader.formatVersion
                header.wrappedMaster = try master.withUnsafeBytes {
                    try AEAD.seal($0, associatedData: header.masterAssociatedData, key: kek)
                }
                try header.write(to: vault)
                try vault.setMeta("manifest", try AuthenticatedState.read(from: vault).encode(manifest, keys: keys))
                return (header, manifest.counter)
            }
        }
        if let counter { noteCounter(counter) }
        state.withLock { $0.header = header }
        return header
    }

    /// The manifest a format-1 vault's table stands for, once it matches its (unauthenticated)
    /// format-1 manifest: counter 1, ids never reused.
    private func formatOneManifest(_ vault: any ItemStoreWriter, keys: ManifestKeys, metadataKey: SecureBytes) throws
        -> Manifest
    {
        let found = try Manifest.tally(vault, key: keys.entry)
        guard let stored = try vault.meta("manifest"), let old = Manifest.formatOne(stored),
            old.count == found.count, Sodium.constantTimeEqual(old.accumulator, found.formatOneAccumulator)
        else {
            let damaged = try damagedRows(in: vault, metadataKey: metadataKey)
            throw KeychainError(
                .decode,
                "vault integrity check failed: the item table does not match its format-1 manifest, so it is not migrated; \(Self.describe(damaged))"
            )
        }
        var manifest = found
        manifest.counter = 1
        manifest.highestID = max(found.highestID, try vault.nextItemID() - 1)
        return manifest
    }

    /// The manifest of a format-2 to -5 vault, verified as unlock verified it in that format
    /// (the tag; the accumulator `tally` makes from every row and index row: flat in formats 2
    /// and 3, the buckets folded to the top in format 4, whose name-list tables are new and empty
    /// here, and in format 5 with every name list's chunks folded in too; the policy; the rollback
    /// mark), with the counter moved on by this write.
    private func verifiedManifest(
        _ vault: any ItemStoreWriter, keys: ManifestKeys, metadataKey: SecureBytes, acceptRollback: Bool,
        tally: (any ItemStoreWriter) throws -> Manifest
    ) throws -> Manifest {
        let expected = try AuthenticatedState.read(from: vault).verified(try vault.meta("manifest"), keys: keys)
        if let problem = Manifest.mismatch(found: try tally(vault), expected: expected) {
            let damaged = try damagedRows(in: vault, metadataKey: metadataKey)
            throw KeychainError(
                .decode, "vault integrity check failed: \(problem), so it is not migrated; \(Self.describe(damaged))")
        }
        try refuseRollback(expected.counter, accepting: acceptRollback)
        var manifest = expected
        manifest.counter += 1
        return manifest
    }
}

extension Manifest {
    /// Formats 4 to 6: the manifest of what the store holds now (counter 0) and its buckets:
    /// count and top accumulator folded from the buckets tallied over every row and index row,
    /// the name lists' accumulator from every list's chunks (`split`, format 6; else XORed into
    /// the top, as formats 4 and 5 keep it), the highest id in either, and the policy's entry.
    static func bucketTally(_ vault: any ItemStoreReader, key: SecureBytes, split: Bool = true) throws
        -> (Manifest, [Int64: ManifestBucket])
    {
        let buckets = try ManifestBuckets.tally(vault, key: key)
        var (accumulator, count) = ManifestBuckets.fold(buckets, key: key)
        let names = NameLists.fold(try NameLists.tally(vault, key: key), key: key)
        if !split { accumulator = xor(accumulator, names) }
        let found = Manifest(
            counter: 0, count: count, highestID: try vault.highestStoredID(), accumulator: accumulator,
            policy: policyEntry(try vault.meta("access_policy"), key: key), names: split ? names : nil)
        return (found, buckets)
    }

    /// Formats 4 to 6, without reading a row: what differs between the stored bucket tables (id
    /// buckets, with the policy and the highest id stored; the name lists' buckets when `names`,
    /// and always in format 5, where they share the top) and the authenticated manifest, in
    /// words; nil when they agree. One keyed hash per bucket: the id buckets' table alone is a
    /// few hundred at 100,000 items, the name lists' one per directory (100,000 there).
    static func bucketTableMismatch(
        _ vault: any ItemStoreReader, _ stored: [Int64: ManifestBucket], expected: Manifest, key: SecureBytes,
        names: Bool = true
    ) throws -> String? {
        var (accumulator, count) = ManifestBuckets.fold(stored, key: key)
        var foundNames = expected.names
        if expected.names == nil {
            accumulator = xor(accumulator, try NameLists.foldStored(vault, key: key))
        } else if names {
            foundNames = try NameLists.foldStored(vault, key: key)
        }
        let found = Manifest(
            counter: 0, count: count, highestID: try vault.highestStoredID(), accumulator: accumulator,
            policy: policyEntry(try vault.meta("access_policy"), key: key), names: foundNames)
        guard let problem = mismatch(found: found, expected: expected) else { return nil }
        guard found.highestID <= expected.highestID && Sodium.constantTimeEqual(found.policy, expected.policy) else {
            return problem
        }
        if found.count == expected.count && Sodium.constantTimeEqual(found.accumulator, expected.accumulator) {
            return
                "the name lists' bucket table does not match its authenticated accumulator: a list's bucket was deleted, added, altered or replayed from an older copy"
        }
        return
            "the manifest's bucket table does not match its authenticated manifest: a bucket was deleted, added, altered or replayed from an older copy"
    }

    /// Two accumulators XORed (the id buckets' and the name lists' parts of the top).
    static func xor(_ a: [UInt8], _ b: [UInt8]) -> [UInt8] { zip(a, b).map { $0 ^ $1 } }

    /// Formats 2 and 3: the manifest of what the store holds now (counter 0): count, accumulator
    /// and highest id over every row, and the policy's entry.
    static func tally(_ vault: any ItemStoreReader, key: SecureBytes) throws -> Manifest {
        var found = Manifest.empty
        try vault.forEachItem { found.insert($0, key: key) }
        try vault.forEachAttributeTag { found.toggleTag(itemID: $0, $1, key: key) }
        found.policy = policyEntry(try vault.meta("access_policy"), key: key)
        return found
    }

    /// What differs between the table found and the authenticated manifest, in words; nil when
    /// they agree.
    static func mismatch(found: Manifest, expected: Manifest) -> String? {
        if !Sodium.constantTimeEqual(found.policy, expected.policy) {
            return
                "the access policy is not the one the manifest authenticates: an older policy was replayed, or the policy was altered or removed"
        }
        if found.highestID > expected.highestID {
            return
                "the item table does not match its authenticated manifest: row \(found.highestID) has an id that was never issued (a row was copied or inserted under a new id)"
        }
        if found.count == expected.count && Sodium.constantTimeEqual(found.accumulator, expected.accumulator) {
            guard let names = expected.names, !Sodium.constantTimeEqual(found.names ?? Manifest.zeros, names) else {
                return nil
            }
            return
                "the name lists do not match their authenticated accumulator: a list's chunks were altered, deleted, added, swapped or replayed from an older copy"
        }
        let what = Manifest.whatDiffers(found: found.count, expected: expected.count)
        return
            "the item table does not match its authenticated manifest (\(found.count) rows found, \(expected.count) expected): \(what)"
    }

    /// A format-1 manifest: count ‖ accumulator (rows and policy XORed together), unauthenticated.
    static func formatOne(_ stored: [UInt8]) -> Manifest? {
        guard stored.count == 40 else { return nil }
        let count = stored[0..<8].reversed().reduce(Int64(0)) { ($0 << 8) | Int64($1) }
        return Manifest(counter: 0, count: count, highestID: 0, accumulator: Array(stored[8...]), policy: zeros)
    }

    /// Format 1 XORed the policy's entry into the accumulator.
    var formatOneAccumulator: [UInt8] { zip(accumulator, policy).map { $0 ^ $1 } }
}
