import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

// A walk over every item of a class the caller can see, a page of rows at a time. For views
// that need one thing from each item (the directory names under /genp and /inet) and must not
// hold all items at once: copyMatching of a 100,000-item class keeps every row and every
// decrypted attribute set until it returns (about 2 KB an item: 200 MB at the peak).

extension Keychain {
    /// Rows read per page of a walk.
    static let walkPageRows = 1_000

    /// Calls `body` with each item whose grouping attribute (service, server, label) is `value`
    /// that the caller can see, found through the secondary index per access group, in id
    /// order: a directory listing without holding every item's attributes at once. Visibility
    /// and damaged rows as in `forEachItem(_:caller:_:)`.
    public func forEachItem(
        _ itemClass: ItemClass, grouping value: AttributeValue, caller callerArgument: Caller? = nil,
        _ body: (KeychainItem) throws -> Void
    ) throws {
        guard itemClass != .identity else { return }
        let call = callContext(callerArgument)
        let caller = call.caller
        let keys = try call.unlockedKeys()
        // A listing depends on every row being there: it waits for the whole check.
        try requireEveryBucketVerified()
        var rows = try storeCall {
            try store.lookup { vault in
                try caller.accessGroups.flatMap {
                    try vault.items(
                        secondaryIndex: secondaryIndex(itemClass, group: $0, value, keys: keys), withData: false)
                }
            }
        }
        rows.sort { $0.id < $1.id }
        let grouping = Schema.groupingAttribute(of: itemClass)
        try visit(rows, itemClass, caller: caller, keys: keys) { item in
            // The index is a keyed hash of the value: confirm it, as copyMatching does.
            guard item.attributes[grouping]?.matches(value, caseInsensitive: false) == true else { return }
            try body(item)
        }
    }

    /// Calls `body` with each item of `itemClass` the caller can see (either synchronizable
    /// state; attributes, no data), in id order. The visibility rules are copyMatching's with
    /// kSecAttrSynchronizableAny and every access group of the caller; a row whose attributes
    /// do not authenticate is skipped and reported, as in a listing. Each page is read in its
    /// own lookup and decrypted outside the store's lock, so other requests are served between
    /// pages; a write between pages may or may not be seen, as with two listings.
    public func forEachItem(
        _ itemClass: ItemClass, caller callerArgument: Caller? = nil, _ body: (KeychainItem) throws -> Void
    ) throws {
        guard itemClass != .identity else { return }
        let call = callContext(callerArgument)
        let caller = call.caller
        _ = try call.unlockedKeys()
        try requireEveryBucketVerified()
        var after: Int64 = 0
        while true {
            let keys = try call.unlockedKeys()
            let page = try storeCall {
                try store.lookup {
                    try $0.items(
                        itemClass: itemClass.rawValue, afterID: after, limit: Self.walkPageRows, withData: false)
                }
            }
            try visit(page, itemClass, caller: caller, keys: keys, body)
            guard page.count == Self.walkPageRows, let last = page.last else { return }
            after = last.id
        }
    }

    /// Opens each row's attributes and hands the visible items to `body`, one at a time.
    private func visit(
        _ rows: [StoredItem], _ itemClass: ItemClass, caller: Caller, keys: Keys, _ body: (KeychainItem) throws -> Void
    ) throws {
        for row in rows where row.itemClass == itemClass.rawValue {
            if let item = visibleAttributesOnly(row, itemClass, caller: caller, keys: keys) { try body(item) }
        }
    }

    /// A row as an item without its data, if its attributes authenticate (else it is reported
    /// damaged) and the caller's access groups include the item's: the one rule every listing
    /// that opens rows itself follows (the walk, the Secret Service search).
    func visibleAttributesOnly(_ row: StoredItem, _ itemClass: ItemClass, caller: Caller, keys: Keys) -> KeychainItem? {
        let attributes: Attributes
        do {
            attributes = try openAttributes(row, itemClass: itemClass, keys: keys)
        } catch {
            reportDamaged(
                DamagedRow(id: row.id, itemClass: row.itemClass, reason: "its attributes do not authenticate"))
            return nil
        }
        guard case .string(let group)? = attributes[Schema.accessGroup], caller.canSee(accessGroup: group) else {
            return nil
        }
        return KeychainItem(
            id: row.id, itemClass: itemClass, attributes: attributes, data: nil,
            dataLength: Self.readableLength(itemClass, attributes, stored: row.sealedDataLength))
    }
}
