import FoundationEssentials
import Glibc
@_spi(CallerRule) import Keychain

// The mount's verbs through the door (the FUSE face, Sources/Faces/FUSE). A file operation asks
// these of a `KeychainSession` made for its request's caller (`AccessLayer.session`), as every
// other face asks the door's verbs: the face keeps its protocol (inodes, handles, names, errno)
// and never holds the `Keychain` itself.
//
// Two kinds of verb. The reads that hand out no secret and decide nothing a local filesystem
// would log (a stat, a lookup, a listing, a handle's re-check) are not audited, as before. Every
// decision that hands out a secret or changes the vault is audited here, in the mount's words
// (`open-read`, `write`, `create`, `rename`, `replace-data`, `set-<attr>`, `delete`), from the
// core's status, followed by `via=fuse vault=PATH`: coverage is not the face's choice.

extension KeychainSession {
    // MARK: Reads that decide nothing

    /// An item's attributes (no data) for a stat, a lookup or an xattr read; `recentWithin`:
    /// as read up to that many seconds ago unless this process committed since (RecentRows).
    public func attributes(id: Int64, itemClass: ItemClass, recentWithin: Double = 0) throws -> KeychainItem {
        try keychain.item(id: id, itemClass: itemClass, withData: false, caller: caller, recentWithin: recentWithin)
    }

    /// The items a query without data matches, for a lookup by name (no secret handed out).
    public func matching(_ query: Query) throws -> [KeychainItem] {
        guard query.returnData != true else {
            throw KeychainError(.param, "a lookup hands out no data: read an item's data through open")
        }
        return try keychain.copyMatching(query, caller: caller)
    }

    /// Whether the caller can see any item grouped under this service, server or label.
    public func hasItems(_ itemClass: ItemClass, grouping value: AttributeValue) throws -> Bool {
        try keychain.hasItems(itemClass, grouping: value, caller: caller)
    }

    /// Every item of a class the caller can see, without data, a page of rows at a time.
    public func forEachItem(_ itemClass: ItemClass, _ body: (KeychainItem) throws -> Void) throws {
        try keychain.forEachItem(itemClass, caller: caller, body)
    }

    /// A service or server directory's entries from its sealed name lists.
    /// `expecting`, `keptChunk` and `chunk`: a listing sized from its chunks' count that takes the entries of unchanged chunks from the
    /// one it made before (`Keychain.forEachNameListEntry`).
    public func forEachNameListEntry(
        _ itemClass: ItemClass, grouping value: AttributeValue, expecting: (_ chunks: Int) -> Void = { _ in },
        keptChunk: ([UInt8]) -> (first: Int64, last: Int64)? = { _ in nil },
        chunk: ([UInt8], _ kept: Bool) throws -> Void = { _, _ in },
        _ body: (NameListEntry) throws -> Void
    ) throws {
        try keychain.forEachNameListEntry(
            itemClass, grouping: value, caller: caller, expecting: expecting, keptChunk: keptChunk, chunk: chunk,
            body)
    }

    /// An identity's two halves without data, for a stat.
    public func identityAttributes(certificateID: Int64) throws -> Keychain.Identity {
        try keychain.identity(certificateID: certificateID, withData: false, caller: caller)
    }

    /// Every identity the caller can see, without data, for a listing.
    public func identityList() throws -> [Keychain.Identity] { try keychain.identities(caller: caller) }

    /// A value that changes whenever anything in the vault changes (here or in another process).
    public func changeStamp() throws -> [Int64] { try keychain.changeStamp() }

    /// Whether a row with this id exists at all, whoever may see it (deleted, or hidden?).
    public func rowExists(id: Int64) throws -> Bool { try keychain.rowExists(id: id) }

    /// Makes every commit so far durable (the empty item of a `creat` at its handle's close).
    public func makeCommitsDurable() throws { try keychain.makeCommitsDurable() }

    /// An open handle's decision, taken again (lock, a policy change, the item moved out of the
    /// caller's groups): throws what a read would now get. Not audited: the open was.
    public func recheck(id: Int64, itemClass: ItemClass) throws {
        if itemClass == .identity {
            _ = try keychain.identity(certificateID: id, withData: false, caller: caller)
        } else {
            _ = try keychain.authorizeRead(id: id, itemClass: itemClass, caller: caller)
        }
    }

    // MARK: Decisions, audited in the mount's words

    /// An open of an item: the decision (visible, class key held, presence given, which may
    /// prompt), audited as `operation`; the item with its data, and the caller its handle keeps
    /// (presence for this item given, so its reads and commit do not ask again).
    public func open(id: Int64, itemClass: ItemClass, as operation: AuditOperation) throws -> (
        item: KeychainItem, handleCaller: Caller
    ) {
        let item = try decided(id, operation) {
            try keychain.item(id: id, itemClass: itemClass, withData: true, caller: caller)
        }
        return (item, handleCaller(granted: [id]))
    }

    /// An open of an identity: both halves with their data, one decision (`open-read`).
    public func openIdentity(certificateID: Int64) throws -> (identity: Keychain.Identity, handleCaller: Caller) {
        let identity = try decided(certificateID, .openRead) {
            try keychain.identity(certificateID: certificateID, withData: true, caller: caller)
        }
        return (identity, handleCaller(granted: [identity.certificate.id, identity.key.id]))
    }

    /// A new item made by a file's creation (`create`); `durable: false` for the empty item of
    /// a `creat`, which its handle's fsync or close makes durable. With the caller its handle
    /// keeps.
    public func create(_ itemClass: ItemClass, _ attributes: Attributes, data: [UInt8], durable: Bool = true) throws
        -> (item: KeychainItem, handleCaller: Caller)
    {
        let item = try decided(nil, .create) {
            try keychain.add(itemClass, attributes, data: data, caller: caller, durable: durable)
        }
        return (item, handleCaller(granted: [item.id]))
    }

    /// New data for an item (`write`: a handle's commit, a truncate, a scratch file renamed
    /// onto it): `change` gets the item's data as stored now when `readFirst`, else nothing,
    /// and returns the new data; read, change and update are one decision.
    @discardableResult
    public func write(
        id: Int64, itemClass: ItemClass, readFirst: Bool = false, _ change: ([UInt8]) throws -> [UInt8]
    ) throws -> [UInt8] {
        try decided(id, .write) {
            let current =
                readFirst
                ? try keychain.item(id: id, itemClass: itemClass, withData: true, caller: caller).data ?? [] : []
            let data = try change(current)
            _ = try keychain.update(
                Query(itemClass, synchronizableAny: true, persistentReference: id), attributes: [:], data: data,
                caller: caller)
            return data
        }
    }

    /// Attributes set on one item through an xattr (`set-<name>`).
    public func setAttributes(id: Int64, itemClass: ItemClass, _ changes: Attributes, named name: String) throws {
        try decided(id, .setAttribute(name)) {
            _ = try keychain.update(
                Query(itemClass, synchronizableAny: true, persistentReference: id), attributes: changes,
                caller: caller)
        }
    }

    /// A service or server directory renamed: every item the caller can see under it gets the
    /// new grouping attributes (`rename`, with the count).
    public func renameGroup(_ query: Query, to changes: Attributes) throws {
        do {
            let n = try keychain.update(query, attributes: changes, caller: caller)
            record(nil, .rename, allowed: true, count: n)
        } catch let e as KeychainError {
            record(nil, .rename, e)
            throw e
        }
    }

    /// An item's file renamed (`rename`): new primary-key attributes, replacing what the new
    /// name held unless `replacing` is false (`victim`: the item a label names in /cert, /keys).
    public func rename(id: Int64, itemClass: ItemClass, to key: Attributes, replacing: Bool, victim: Int64?) throws {
        try decided(id, .rename) {
            try keychain.rename(
                Query(itemClass, synchronizableAny: true, persistentReference: id), to: key, replacing: replacing,
                victim: victim, caller: caller)
        }
    }

    /// A fresh temp file renamed over an item (`replace-data`, `sed -i`): the item keeps its
    /// attributes and gets the temp item's data; the temp item goes. One transaction.
    public func replaceData(of target: Int64, withDataOf source: Int64, itemClass: ItemClass) throws {
        try decided(target, .replaceData) {
            try keychain.replaceData(
                of: Query(itemClass, synchronizableAny: true, persistentReference: target),
                withDataOf: Query(itemClass, synchronizableAny: true, persistentReference: source), caller: caller)
        }
    }

    /// A decision the face refused before asking the core (an item renamed to a scratch name,
    /// a lookup in another access group): audited as a denial with the face's reason.
    public func refused(_ item: Int64?, _ operation: AuditOperation, why: String) {
        audit?.record(caller, item: item, operation, allowed: false, why: why, detail: detail(nil, nil))
    }

    /// What the face makes of the caller's items (a generated view such as `/views/netrc`,
    /// from every password the caller can see): one decision for the view, audited as
    /// `operation` (an open), or none (a stat, which hands out only a size).
    public func view<R>(_ operation: AuditOperation?, _ items: Query, _ make: ([KeychainItem]) throws -> R) throws
        -> R
    {
        func read() throws -> R {
            let found: [KeychainItem]
            do { found = try keychain.copyMatching(items, caller: caller) } catch KeychainStatus.itemNotFound {
                found = []
            }
            return try make(found)
        }
        guard let operation else { return try read() }
        return try decided(nil, operation) { try read() }
    }

    /// The caller a handle keeps: presence given for `items` by this open, and no prompt of
    /// its own later (its reads and commit never ask).
    private func handleCaller(granted items: Set<Int64>) -> Caller {
        var kept = caller.granting(items)
        kept.authenticationUI = .allow
        return kept
    }

    /// One decision: audited allowed, or denied with the core's status (or the face's errno
    /// thrown from inside), and rethrown as it is.
    private func decided<R>(_ item: Int64?, _ operation: AuditOperation, _ body: () throws -> R) throws -> R {
        do {
            let result = try body()
            record(item, operation, allowed: true)
            return result
        } catch let e as KeychainError {
            audit?.record(caller, item: item, operation, allowed: false, why: e.status.name, detail: detail(nil, nil))
            throw e
        } catch {
            audit?.record(
                caller, item: item, operation, allowed: false, why: String(describing: error),
                detail: detail(nil, nil))
            throw error
        }
    }
}
