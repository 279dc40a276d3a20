import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

// Reads: SecItemCopyMatching, one item by id, the access check of an open, probes for
// directory lookups, and the change stamp caches key on.

extension Keychain {
    // MARK: SecItemCopyMatching

    /// SecItemCopyMatching. Throws errSecItemNotFound when nothing matches.
    public func copyMatching(_ query: Query, caller callerArgument: Caller? = nil) throws -> [KeychainItem] {
        try copyMatching(query, in: callContext(callerArgument))
    }

    func copyMatching(_ query: Query, in call: CallContext) throws -> [KeychainItem] {
        let caller = call.caller
        if case .count(let n)? = query.matchLimit, n < 1 {
            throw KeychainError(.param, "match limit must be at least 1")
        }
        let keys = try call.unlockedKeys()
        let candidates = try matches(query, caller: caller, keys: keys, withData: query.returnData == true)
        var results: [KeychainItem] = []
        let limit: Int
        switch query.matchLimit ?? .one {
        case .one: limit = 1
        case .all: limit = .max
        case .count(let n): limit = n
        }
        for (row, attributes) in candidates {
            if results.count >= limit { break }
            var data: [UInt8]?
            var extras: [UInt8]?
            if query.returnData == true {
                let item = KeychainItem(id: row.id, itemClass: query.itemClass, attributes: attributes, data: nil)
                do {
                    let stored = try openData(
                        row, item: item, keys: keys, caller: caller,
                        ui: query.authenticationUI ?? caller.authenticationUI)
                    let secret: [UInt8]
                    (secret, extras) = try SecretExtras.split(query.itemClass, attributes, stored)
                    data = try readableData(item, secret)
                } catch SkipItem.skip {
                    continue
                } catch let e as KeychainError where e.status == .decode && limit == .max {
                    // Listing every match: a damaged secret is reported and left out, not
                    // allowed to fail the others.
                    reportDamaged(
                        DamagedRow(id: row.id, itemClass: row.itemClass, reason: "its data does not authenticate"))
                    continue
                }
            }
            results.append(
                KeychainItem(
                    id: row.id, itemClass: query.itemClass, attributes: attributes, data: data,
                    dataLength: Self.readableLength(query.itemClass, attributes, stored: row.sealedDataLength),
                    extras: extras))
        }
        guard !results.isEmpty else {
            throw KeychainError(.itemNotFound, "\(Self.describe(query)) not found")
        }
        return results
    }

    /// The one item a query names (match limit one), with data if asked.
    public func find(_ query: Query, caller callerArgument: Caller? = nil) throws -> KeychainItem {
        try find(query, in: callContext(callerArgument))
    }

    func find(_ query: Query, in call: CallContext) throws -> KeychainItem {
        var q = query
        q.matchLimit = .one
        return try copyMatching(q, in: call)[0]
    }

    /// Reads one item by persistent reference, checking visibility and access like a query
    /// by kSecValuePersistentRef with kSecAttrSynchronizableAny: a persistent reference names
    /// one item whatever its synchronizable flag (the mount lists both kinds, so every listed
    /// name must open). One row fetch by id; no matcher.
    ///
    /// `recentWithin` (only without data): the row's attributes may be as this process read them
    /// up to that many seconds ago (at most one), unless it committed anything since
    /// (RecentRows.swift); visibility, class and lock state are checked as always. For the
    /// filesystem's stat and xattr reads, within the window of the kernel's own caches.
    public func item(
        id: Int64, itemClass: ItemClass, withData: Bool, caller callerArgument: Caller? = nil,
        ui: AuthenticationUI? = nil, recentWithin: Double = 0
    ) throws -> KeychainItem {
        try item(
            id: id, itemClass: itemClass, synchronizable: true, withData: withData,
            in: callContext(callerArgument), ui: ui, recentWithin: withData ? 0 : recentWithin)
    }

    /// Whether data of this protection class can be read now (its class key is held), as the
    /// error a read would give (the Secret Service's Locked property asks it).
    public func checkReadable(_ protection: Accessibility, itemID: Int64) throws {
        let keys = try callContext(nil).unlockedKeys()
        _ = try classKey(protection, keys: keys, for: "item \(itemID)")
    }

    /// `raw`: the data as stored even for a non-extractable key; only for the core's own use
    /// of the key (signing), never handed to a face.
    func item(
        id: Int64, itemClass: ItemClass, synchronizable: Bool, withData: Bool,
        in call: CallContext, ui: AuthenticationUI? = nil, raw: Bool = false, recentWithin: Double = 0
    ) throws -> KeychainItem {
        let caller = call.caller
        let keys = try call.unlockedKeys()
        let (row, attributes) = try visibleRow(
            id: id, itemClass: itemClass, synchronizable: synchronizable,
            withData: withData, caller: caller, keys: keys, recentWithin: recentWithin)
        var data: [UInt8]?
        var extras: [UInt8]?
        if withData {
            let item = KeychainItem(id: row.id, itemClass: itemClass, attributes: attributes, data: nil)
            do {
                let stored = try openData(
                    row, item: item, keys: keys, caller: caller, ui: ui ?? caller.authenticationUI)
                if raw {
                    data = stored
                } else {
                    let secret: [UInt8]
                    (secret, extras) = try SecretExtras.split(itemClass, attributes, stored)
                    data = try readableData(item, secret)
                }
            } catch SkipItem.skip {
                // kSecUseAuthenticationUISkip leaves the item out: nothing is left.
                throw KeychainError(.itemNotFound, "item \(id) not found")
            }
        }
        return KeychainItem(
            id: row.id, itemClass: itemClass, attributes: attributes, data: data,
            dataLength: raw
                ? max(0, row.sealedDataLength - AEAD.overhead)
                : Self.readableLength(itemClass, attributes, stored: row.sealedDataLength),
            extras: extras)
    }

    /// The row with this id and its attributes, if the caller may see it: of this class, in
    /// one of the caller's access groups, and non-synchronizable unless `synchronizable`
    /// allows both. Anything else is errSecItemNotFound, as for a query that matches nothing.
    /// `recentWithin`: a row this process read up to that many seconds ago will do
    /// (RecentRows.swift). A row read from the store is kept there either way (without its data),
    /// and its attributes are not opened again while its sealed bytes are the ones kept.
    private func visibleRow(
        id: Int64, itemClass: ItemClass, synchronizable: Bool, withData: Bool,
        caller: Caller, keys: Keys, recentWithin: Double = 0
    ) throws -> (StoredItem, Attributes) {
        guard itemClass != .identity else {
            throw KeychainError(.unimplemented, "identity queries are not supported yet")
        }
        // Spelled only when it is thrown: an open that finds its item (nearly all) spells nothing.
        func notFound() -> KeychainError { KeychainError(.itemNotFound, "item \(id) not found") }
        // Its bucket verified first, whether the row is there or not (and for a kept row too:
        // a failure found since makes every read fail).
        try requireVerified(id: id)
        // Taken before the read: a commit in between makes the kept row stale at once.
        // Other processes' commits this process followed count too (ForeignCommits.swift).
        let commits = store.localCommitCount &+ foreignCommits.deliveryCount
        let row: StoredItem
        let attributes: Attributes
        if recentWithin > 0, let (kept, keptAttributes) = recentRows.get(id, commits: commits, within: recentWithin) {
            (row, attributes) = (kept, keptAttributes)
        } else {
            guard
                let read = try storeCall({
                    try withData ? store.currentItem(id: id) : store.lookup { try $0.item(id: id, withData: false) }
                }),
                read.itemClass == itemClass.rawValue
            else { throw notFound() }
            row = read
            if let kept = recentRows.attributes(sameAs: row, metadataKey: keys.metadata, commits: commits) {
                attributes = kept
            } else {
                attributes = try openAttributes(row, itemClass: itemClass, keys: keys)
                recentRows.put(row, attributes, commits: commits, metadataKey: keys.metadata)
            }
        }
        guard row.itemClass == itemClass.rawValue else { throw notFound() }
        guard case .string(let group)? = attributes[Schema.accessGroup], caller.canSee(accessGroup: group),
            case .bool(let isSynchronizable)? = attributes[Schema.synchronizable], synchronizable || !isSynchronizable
        else { throw notFound() }
        return (row, attributes)
    }

    /// The access check of a read without decrypting the data: the item is visible to the
    /// caller, its class key is available (lock state, device), and user presence, if the item
    /// needs it, is given. Returns the item's attributes. The filesystem decides at open with
    /// this and decrypts on each read.
    public func authorizeRead(
        id: Int64, itemClass: ItemClass, caller callerArgument: Caller? = nil, ui: AuthenticationUI? = nil
    ) throws -> KeychainItem {
        let call = callContext(callerArgument)
        let caller = call.caller
        let keys = try call.unlockedKeys()
        let (row, attributes) = try visibleRow(
            id: id, itemClass: itemClass, synchronizable: true, withData: false,
            caller: caller, keys: keys)
        let item = KeychainItem(
            id: row.id, itemClass: itemClass, attributes: attributes, data: nil,
            dataLength: Self.readableLength(itemClass, attributes, stored: row.sealedDataLength))
        _ = try classKey(item.accessibility, keys: keys, for: item.summary)
        try checkPresence(item, caller: caller, ui: ui ?? caller.authenticationUI)
        return item
    }

    /// Whether the caller can see any item whose grouping attribute (service, server, label)
    /// has this value: one index probe per access group, no decryption. For directory lookups.
    public func hasItems(_ itemClass: ItemClass, grouping value: AttributeValue, caller callerArgument: Caller? = nil)
        throws -> Bool
    {
        let call = callContext(callerArgument)
        let caller = call.caller
        let keys = try call.unlockedKeys()
        let found = try storeCall {
            try store.lookup { vault in
                try caller.accessGroups.contains {
                    try vault.exists(secondaryIndex: secondaryIndex(itemClass, group: $0, value, keys: keys))
                }
            }
        }
        // "None" depends on every row being there; "some" names no item and serves no byte of
        // one (every item under it is read by id or key, through its bucket's check).
        if !found { try requireEveryBucketVerified() }
        return found
    }

    /// A value that changes whenever anything in the vault changes (here or in another
    /// process): front ends key caches of derived views (directory listings) on it.
    public func changeStamp() throws -> [Int64] { try storeCall { try store.changeStamp() } }

    /// Whether a row with this id exists at all, whoever may see it: for a face that holds an
    /// open handle on the item and must tell "deleted" (the handle keeps its snapshot, as on
    /// ext4) from "no longer visible to this caller" (the handle is revoked).
    public func rowExists(id: Int64) throws -> Bool {
        try requireVerified(id: id)
        return try storeCall { try store.lookup { try $0.item(id: id, withData: false) != nil } }
    }

    public func itemCount() throws -> Int { try storeCall { try store.lookup { try $0.itemCount() } } }
}
