import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

/// The writer a write transaction's body gets: every insert, replace and delete goes through
/// here and adjusts the working manifest in the same step, so no write path can change a row
/// without the manifest following it: the count and highest id directly, the accumulator
/// through the changes to the rows' buckets (format 4, ManifestBuckets.swift), which
/// `finishedManifest` folds into the stored buckets and the top accumulator. The manifest itself
/// is written only by `Keychain.writeTransaction`, once, when the body has returned.
final class ManifestedWriter: ItemStoreWriter {
    let inner: any ItemStoreWriter
    private let key: SecureBytes
    private var manifest: Manifest
    private var buckets = BucketChanges()
    /// Keeps the name lists (vault format 5, NameLists.swift) with the rows.
    private let nameLists: NameLists
    private var names = NameListChanges()
    /// The change log's box key and the vault id its rows are bound to (ChangeLog.swift).
    private let metadataKey: SecureBytes
    private let vaultID: [UInt8]
    /// A header field or a class key was written: the tag's state must be read again.
    private(set) var authenticatedStateChanged = false

    init(_ inner: any ItemStoreWriter, manifest: Manifest, keys: ManifestKeys, vaultID: [UInt8]) {
        self.inner = inner
        self.manifest = manifest
        self.key = keys.entry
        self.nameLists = NameLists(vaultID: vaultID, keys: keys)
        self.metadataKey = keys.metadata
        self.vaultID = vaultID
    }

    // MARK: Reads, as they are

    func item(id: Int64, withData: Bool) throws -> StoredItem? { try inner.item(id: id, withData: withData) }
    func item(primaryIndex: [UInt8], withData: Bool) throws -> StoredItem? {
        try inner.item(primaryIndex: primaryIndex, withData: withData)
    }
    func items(secondaryIndex: [UInt8], withData: Bool) throws -> [StoredItem] {
        try inner.items(secondaryIndex: secondaryIndex, withData: withData)
    }
    func exists(secondaryIndex: [UInt8]) throws -> Bool { try inner.exists(secondaryIndex: secondaryIndex) }
    func items(itemClass: String, withData: Bool) throws -> [StoredItem] {
        try inner.items(itemClass: itemClass, withData: withData)
    }
    func items(itemClass: String, afterID: Int64, limit: Int, withData: Bool) throws -> [StoredItem] {
        try inner.items(itemClass: itemClass, afterID: afterID, limit: limit, withData: withData)
    }
    func forEachItem(_ body: (StoredItem) throws -> Void) throws { try inner.forEachItem(body) }
    func itemCount() throws -> Int { try inner.itemCount() }
    func meta(_ name: String) throws -> [UInt8]? { try inner.meta(name) }
    func meta(_ names: [String]) throws -> [String: [UInt8]] { try inner.meta(names) }
    func classKeys() throws -> [String: [UInt8]] { try inner.classKeys() }
    func attributeTags(itemID: Int64) throws -> [[UInt8]] { try inner.attributeTags(itemID: itemID) }
    func forEachAttributeTag(_ body: (Int64, [UInt8]) throws -> Void) throws { try inner.forEachAttributeTag(body) }
    func itemIDs(withAllAttributeTags tags: [[UInt8]]) throws -> [Int64] {
        try inner.itemIDs(withAllAttributeTags: tags)
    }
    func forEachItem(ids: ClosedRange<Int64>, _ body: (StoredItem) throws -> Void) throws {
        try inner.forEachItem(ids: ids, body)
    }
    func forEachAttributeTag(itemIDs ids: ClosedRange<Int64>, _ body: (Int64, [UInt8]) throws -> Void) throws {
        try inner.forEachAttributeTag(itemIDs: ids, body)
    }
    func highestStoredID() throws -> Int64 { try inner.highestStoredID() }
    func manifestBuckets() throws -> [Int64: (accumulator: [UInt8], count: Int64)] { try inner.manifestBuckets() }
    func manifestBucket(_ bucket: Int64) throws -> (accumulator: [UInt8], count: Int64)? {
        try inner.manifestBucket(bucket)
    }
    func nameChunks(secondaryIndex: [UInt8]) throws -> [(chunk: Int64, sealed: [UInt8])] {
        try inner.nameChunks(secondaryIndex: secondaryIndex)
    }
    func nameChunk(secondaryIndex: [UInt8], holding id: Int64) throws -> (chunk: Int64, sealed: [UInt8])? {
        try inner.nameChunk(secondaryIndex: secondaryIndex, holding: id)
    }
    func forEachNameChunk(_ body: ([UInt8], Int64, [UInt8]) throws -> Void) throws {
        try inner.forEachNameChunk(body)
    }
    func nameBuckets() throws -> [[UInt8]: (accumulator: [UInt8], count: Int64)] { try inner.nameBuckets() }
    func forEachNameBucket(_ body: ([UInt8], [UInt8], Int64) throws -> Void) throws {
        try inner.forEachNameBucket(body)
    }
    func nameBucket(secondaryIndex: [UInt8]) throws -> (accumulator: [UInt8], count: Int64)? {
        try inner.nameBucket(secondaryIndex: secondaryIndex)
    }

    func changeLogBounds() throws -> (first: Int64, last: Int64)? { try inner.changeLogBounds() }
    func loggedChanges(after seq: Int64, limit: Int) throws -> [StoredChange] {
        try inner.loggedChanges(after: seq, limit: limit)
    }

    /// Writes the change log's rows for every change this transaction keeps (a member rolled
    /// back took its changes with it), numbered on from the log's last row, and prunes the log to
    /// its retention, in this transaction: called once, by the commit, after its members ran.
    /// Each change gets its sequence number (`ItemChange.seq`) for the observers.
    func logChanges() throws {
        guard !changes.isEmpty else { return }
        var seq = try inner.changeLogBounds()?.last ?? 0
        // A commit of more changes than the log keeps (an import) writes only the rows that
        // stay: the others would be pruned in this same transaction.
        let firstKept = seq + Int64(changes.count) - ChangeLog.retained + 1
        for index in changes.indices {
            seq += 1
            let change = changes[index]
            changes[index].seq = seq
            guard seq >= firstKept else { continue }
            // A row of another class (never made today) or one whose attributes do not open (a
            // damaged row deleted) is logged without its names: the change is shown to no one,
            // and the write it records is never refused for it.
            func names(_ row: StoredItem?) -> Attributes? {
                guard let row, row.itemClass == change.itemClass.rawValue,
                    let attributes = try? Keychain.openAttributes(
                        row, itemClass: change.itemClass, vaultID: vaultID, metadataKey: metadataKey)
                else { return nil }
                return ChangeLog.names(attributes, of: change.itemClass)
            }
            let operation = ChangeLog.code(change.kind)
            // A changed item keeps its names: the log holds them once, as after it.
            let before = change.kind == .changed ? nil : change.rows?.before
            let plain = ChangeLog.encode(before: names(before), after: names(change.rows?.after))
            let sealed = try AEAD.seal(
                plain,
                associatedData: ChangeLog.associatedData(
                    vaultID: vaultID, seq: seq, itemClass: change.itemClass.rawValue, id: change.id,
                    operation: operation),
                key: metadataKey)
            try inner.appendChange(
                StoredChange(
                    seq: seq, itemClass: change.itemClass.rawValue, itemID: change.id, operation: operation,
                    sealed: sealed))
        }
        if seq > ChangeLog.retained { try inner.pruneChanges(through: seq - ChangeLog.retained) }
    }

    /// The manifest after every change made through this writer: the name lists and the
    /// buckets touched are rewritten and the top accumulator follows them. Called once, by the
    /// commit.
    func finishedManifest() throws -> Manifest {
        var finished = manifest
        try nameLists.apply(names, to: inner, manifest: &finished)
        try buckets.fold(into: &finished, vault: inner, key: key)
        return finished
    }

    // MARK: Writes, with the manifest

    /// Above both SQLite's sequence and the manifest's highest id: a rolled-back
    /// `sqlite_sequence` can never make an id be issued twice.
    func nextItemID() throws -> Int64 { max(try inner.nextItemID(), manifest.highestID + 1) }

    /// The item changes made through this writer so far (the commit's, once it commits).
    private(set) var changes: [ItemChange] = []
    /// The face of the member now running (`CommitQueue.Member.origin`).
    var origin = ""

    private func changed(_ row: StoredItem, id: Int64, _ kind: ItemChange.Kind, before: StoredItem? = nil) {
        guard let itemClass = ItemClass(rawValue: row.itemClass) else { return }
        let after = kind == .removed ? nil : row
        let dataChanged =
            kind == .added || (kind != .removed && before.map { $0.dataGeneration != row.dataGeneration } == true)
        changes.append(
            ItemChange(
                itemClass: itemClass, id: id, kind: kind, origin: origin, dataChanged: dataChanged,
                rows: .init(before: kind == .removed ? row : before, after: after)))
    }

    func insert(_ item: StoredItem, id: Int64) throws {
        try inner.insert(item, id: id)
        changed(item, id: id, .added)
        var row = item
        row.id = id
        manifest.count += 1
        manifest.highestID = max(manifest.highestID, id)
        buckets.count(id, 1)
        buckets.toggle(id, Manifest.entry(row, key: key))
        toggle(id, item.attributeTags ?? [])
        if let (itemClass, entry) = try nameLists.entry(of: row) { names.add(entry, to: row.secondaryIndex, itemClass) }
    }

    func replace(_ item: StoredItem) throws {
        guard let old = try inner.item(id: item.id, withData: true) else {
            throw KeychainError(.decode, "item \(item.id) disappeared from the vault during a write")
        }
        var item = item
        let oldTags = item.attributeTags == nil ? [] : try inner.attributeTags(itemID: item.id)
        // A secret rewritten keeps its attribute pairs: unchanged tags are left as stored (nil),
        // which spares two index pages in that commit and toggles nothing in the manifest.
        if let tags = item.attributeTags, tags.count == oldTags.count, Set(tags) == Set(oldTags) {
            item.attributeTags = nil
        }
        try inner.replace(item)
        buckets.toggle(item.id, Manifest.entry(old, key: key))
        buckets.toggle(item.id, Manifest.entry(item, key: key))
        if let tags = item.attributeTags { toggle(item.id, oldTags + tags) }
        // The name is spelled from the primary key, which the primary index hashes (with the
        // class and group, which the indexes hash too): a replace that keeps the class and both
        // indexes (a secret rewritten) changes no name list and opens nothing.
        let renamed =
            old.itemClass != item.itemClass || old.primaryIndex != item.primaryIndex
            || old.secondaryIndex != item.secondaryIndex
        changed(item, id: item.id, renamed ? .renamed : .changed, before: old)
        if renamed {
            removeName(old)
            if let (itemClass, entry) = try nameLists.entry(of: item) {
                names.add(entry, to: item.secondaryIndex, itemClass)
            }
        }
    }

    private func removeName(_ row: StoredItem) {
        guard let itemClass = ItemClass(rawValue: row.itemClass), NameLists.listedClasses.contains(itemClass) else {
            return
        }
        names.remove(row.id, from: row.secondaryIndex, itemClass)
    }

    func delete(id: Int64) throws {
        guard let old = try inner.item(id: id, withData: true) else { return }
        let oldTags = try inner.attributeTags(itemID: id)
        try inner.delete(id: id)
        changed(old, id: id, .removed)
        manifest.count -= 1
        buckets.count(id, -1)
        buckets.toggle(id, Manifest.entry(old, key: key))
        toggle(id, oldTags)
        removeName(old)
    }

    func upgradeSchema() throws { try inner.upgradeSchema() }

    /// The savepoint undoes the rows; the working manifest is put back with them.
    func savepoint<R>(_ body: () throws -> R) throws -> R {
        let (savedManifest, savedBuckets, savedChanged) = (manifest, buckets, authenticatedStateChanged)
        let savedNames = names
        let savedChanges = changes.count
        do {
            return try inner.savepoint(body)
        } catch {
            manifest = savedManifest
            buckets = savedBuckets
            names = savedNames
            changes.removeSubrange(savedChanges...)
            authenticatedStateChanged = savedChanged
            throw error
        }
    }

    func setAttributeTags(_ tags: [[UInt8]], itemID: Int64) throws {
        let oldTags = try inner.attributeTags(itemID: itemID)
        try inner.setAttributeTags(tags, itemID: itemID)
        toggle(itemID, oldTags + tags)
    }

    /// XORs each tag's entry in or out (the same operation): old tags out, new ones in.
    private func toggle(_ itemID: Int64, _ tags: [[UInt8]]) {
        for tag in tags { buckets.toggle(itemID, Manifest.tagEntry(itemID: itemID, tag, key: key)) }
    }

    func setMeta(_ name: String, _ value: [UInt8]) throws {
        switch name {
        case "manifest": preconditionFailure("the manifest is written by writeTransaction only")
        case "access_policy": manifest.policy = Manifest.policyEntry(value, key: key)
        default: authenticatedStateChanged = true
        }
        try inner.setMeta(name, value)
    }

    func setClassKey(_ protection: String, wrapped: [UInt8]) throws {
        authenticatedStateChanged = true
        try inner.setClassKey(protection, wrapped: wrapped)
    }

    func setManifestBucket(_ bucket: Int64, _ value: (accumulator: [UInt8], count: Int64)?) throws {
        preconditionFailure("the manifest's buckets are written by writeTransaction only")
    }
    func clearManifestBuckets() throws {
        preconditionFailure("the manifest's buckets are written by writeTransaction only")
    }
    func setNameChunk(secondaryIndex: [UInt8], chunk: Int64, sealed: [UInt8]?) throws {
        preconditionFailure("the name lists follow the rows: written by writeTransaction only")
    }
    func setNameBucket(secondaryIndex: [UInt8], _ value: (accumulator: [UInt8], count: Int64)?) throws {
        preconditionFailure("the name lists follow the rows: written by writeTransaction only")
    }
    func clearNameLists() throws {
        preconditionFailure("the name lists follow the rows: written by writeTransaction only")
    }
    func appendChange(_ change: StoredChange) throws {
        preconditionFailure("the change log follows the rows: written by writeTransaction only")
    }
    func pruneChanges(through seq: Int64) throws {
        preconditionFailure("the change log follows the rows: written by writeTransaction only")
    }
}
