import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

// Which rows a query names: index choice, decryption of attributes, filtering.

extension Keychain {
    // MARK: Matching

    enum SkipItem: Error { case skip }

    /// Candidate rows for a query, decrypted attributes, filtered. Uses the primary index
    /// when the query names the whole primary key, the secondary index when it names the
    /// grouping attribute, and a class scan otherwise (or when matching ignores case).
    /// Rows are read through `vault` inside a transaction, else in one `lookup`; attributes are
    /// decrypted after the rows are read, outside the store's lock.
    func matches(
        _ query: Query, caller: Caller, keys: Keys, withData: Bool,
        in vault: (any ItemStoreReader)? = nil
    ) throws -> [(StoredItem, Attributes)] {
        let itemClass = query.itemClass
        guard itemClass != .identity else {
            throw KeychainError(.unimplemented, "identity queries are not supported yet")
        }
        for (attribute, value) in query.attributes {
            guard Schema.belongs(attribute, to: itemClass) else {
                throw KeychainError(.noSuchAttr, "attribute '\(attribute.name)' does not belong to class \(itemClass)")
            }
            guard value.fits(attribute.type) else {
                throw KeychainError(.param, "attribute '\(attribute.name)' has a value of the wrong type")
            }
        }
        let groups: [String]
        if case .string(let g)? = query.attributes[Schema.accessGroup] {
            guard caller.canSee(accessGroup: g) else {
                throw KeychainError(.missingEntitlement, "the caller is not entitled to access group '\(g)'")
            }
            groups = [g]
        } else {
            groups = caller.accessGroups
        }
        let syncValues: [Bool]
        if query.synchronizableAny {
            syncValues = [false, true]
        } else if case .bool(let s)? = query.attributes[Schema.synchronizable] {
            syncValues = [s]
        } else {
            syncValues = [false]
        }
        let caseInsensitive = query.caseInsensitive == true
        // A query naming one item (by reference or whole primary key) reports that item's
        // damage as errSecDecode; a scan (a listing) skips damaged rows instead.
        let namesOneItem =
            query.persistentReference != nil
            || (!caseInsensitive
                && Schema.primaryKey(of: itemClass).allSatisfy({
                    $0 == Schema.accessGroup || $0 == Schema.synchronizable || query.attributes[$0] != nil
                }))

        func candidates(_ vault: any ItemStoreReader) throws -> [StoredItem] {
            var rows: [StoredItem] = []
            if let id = query.persistentReference {
                if let row = try vault.item(id: id, withData: withData) { rows = [row] }
            } else if namesOneItem {
                for g in groups {
                    for s in syncValues {
                        var key = query.attributes
                        key[Schema.accessGroup] = .string(g)
                        key[Schema.synchronizable] = .bool(s)
                        if let row = try vault.item(
                            primaryIndex: primaryIndex(itemClass, key, keys: keys), withData: withData)
                        {
                            rows.append(row)
                        }
                    }
                }
            } else if !caseInsensitive, let grouping = query.attributes[Schema.groupingAttribute(of: itemClass)] {
                for g in groups {
                    rows += try vault.items(
                        secondaryIndex: secondaryIndex(itemClass, group: g, grouping, keys: keys), withData: withData)
                }
                rows.sort { $0.id < $1.id }
            } else {
                rows = try vault.items(itemClass: itemClass.rawValue, withData: withData)
            }
            return rows
        }
        // Taken before the read (RecentRows): a commit in between makes the rows kept below stale.
        let commits = store.localCommitCount &+ foreignCommits.deliveryCount
        let rows = try vault.map(candidates) ?? storeCall { try store.lookup(candidates) }
        // A query naming one item, outside a write transaction (committed rows only), shares
        // RecentRows with reads by id: a mount's LOOKUP of a name, then the OPEN that reads the
        // row by id, open its attributes once between them (and a name looked up again, once).
        let sharesRecentRows = namesOneItem && vault == nil
        // The incremental check (Keychain+IncrementalCheck.swift): rows found by id or key are
        // served once their buckets verify; a reference's bucket is verified even when its row
        // is gone; any other answer (a scan, an index range, "not found") waits for every bucket.
        if let id = query.persistentReference {
            try requireVerified(id: id)
        } else if namesOneItem && !rows.isEmpty {
            try requireVerified(ids: rows.map(\.id))
        } else if !(namesOneItem && vault == nil && provenAbsentByNameList(query, caller: caller, keys: keys)) {
            try requireEveryBucketVerified()
        }

        var out: [(StoredItem, Attributes)] = []
        for row in rows where row.itemClass == itemClass.rawValue {
            let attributes: Attributes
            do {
                if sharesRecentRows,
                    let kept = recentRows.attributes(sameAs: row, metadataKey: keys.metadata, commits: commits)
                {
                    attributes = kept
                } else {
                    attributes = try openAttributes(row, itemClass: itemClass, keys: keys)
                    if sharesRecentRows {
                        recentRows.put(row, attributes, commits: commits, metadataKey: keys.metadata)
                    }
                }
            } catch  where !namesOneItem {
                // In a scan, a row that fails its own check is skipped and reported: one
                // damaged row never fails a whole listing.
                reportDamaged(
                    DamagedRow(id: row.id, itemClass: row.itemClass, reason: "its attributes do not authenticate"))
                continue
            }
            guard case .string(let g)? = attributes[Schema.accessGroup], caller.canSee(accessGroup: g),
                groups.contains(g)
            else { continue }
            guard case .bool(let s)? = attributes[Schema.synchronizable], syncValues.contains(s) else { continue }
            let all = query.attributes.allSatisfy { attribute, wanted in
                guard
                    let have = attributes[attribute]
                        ?? (Schema.isPrimaryKey(attribute, in: itemClass)
                            ? AttributeValue.defaultValue(for: attribute.type) : nil)
                else { return false }
                return have.matches(wanted, caseInsensitive: caseInsensitive)
            }
            if all { out.append((row, attributes)) }
        }
        return out
    }
}
