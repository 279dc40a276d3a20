import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

// The attribute index (vault format 3): one keyed tag per (name, value) pair of the map a
// Secret Service client sees for each password item (`SecretServiceMapping.attributes(of:)`),
// so SearchItems decrypts only the items whose tags answer every pair of its query.

extension Keychain {
    /// The classes a Secret Service client sees, and so the classes whose items are indexed.
    public static let secretServiceClasses: [ItemClass] = [.genericPassword, .internetPassword]

    /// At most this many pairs of a query narrow through the index (SQLite's compound-select
    /// limit is 500); any further pairs are only checked on the decrypted items.
    static let attributeIndexPairLimit = 32

    /// The tag of one attribute pair (the `attr_index.tag` column).
    /// Key: the attribute-index key (a subkey of the master key used for nothing else, so a
    /// tag is never comparable with a `pidx`/`sidx` hash or another vault's tag). Message: the
    /// domain `kcfs/attr-index/v1`, the class, the item's access group, the name and the value,
    /// each length-framed by `Framing.frame`, so no two different (class, group, name, value)
    /// give the same message. Keyed, so holding the file does not let anyone test a guessed
    /// pair; equal pairs within a class and group give equal tags (a leak docs/security.md
    /// states).
    static func attributeTag(_ itemClass: ItemClass, group: String, name: String, value: String, key: SecureBytes)
        -> [UInt8]
    {
        KeyedHash.hash(
            Framing.frame([
                Framing.text("kcfs/attr-index/v1"), Framing.text(itemClass.rawValue), Framing.text(group),
                Framing.text(name), Framing.text(value),
            ]), key: key)
    }

    /// Every tag of an item: one per pair of the map a Secret Service client sees for it, in
    /// byte order; for a key, its ssh public half's; none for the other classes.
    static func attributeTags(_ itemClass: ItemClass, _ attributes: Attributes, key: SecureBytes) -> [[UInt8]] {
        var group = ""
        if case .string(let g)? = attributes[Schema.accessGroup] { group = g }
        // A key's one tag: its ssh public half (Keychain+SSHIdentities.swift).
        if itemClass == .key { return KeyData.sshTags(attributes, group: group, key: key) }
        guard secretServiceClasses.contains(itemClass) else { return [] }
        let item = KeychainItem(id: 0, itemClass: itemClass, attributes: attributes, data: nil)
        return Set(
            SecretServiceMapping.attributes(of: item).map {
                attributeTag(itemClass, group: group, name: $0.key, value: $0.value, key: key)
            }
        ).sorted { $0.lexicographicallyPrecedes($1) }
    }

    // MARK: SearchItems

    /// The password items the caller may see whose Secret Service attributes include every
    /// pair of `query` (exact bytes), in (class, id) order, with attributes and no data. An
    /// empty query lists every visible item. The index only narrows: each candidate is
    /// decrypted and checked again with `SecretServiceMapping.matches` and the caller's access
    /// groups, so a forged or stale tag can never show an item that does not match.
    public func secretServiceItems(matching query: [String: String], caller callerArgument: Caller? = nil) throws
        -> [KeychainItem]
    {
        let call = callContext(callerArgument)
        guard !query.isEmpty else { return try everySecretServiceItem(in: call) }
        let caller = call.caller
        let keys = try call.unlockedKeys()
        try requireEveryBucketVerified()
        let pairs = query.sorted { $0.key < $1.key }.prefix(Self.attributeIndexPairLimit)
        let rows: [StoredItem] = try storeCall {
            try store.read { vault in
                var rows: [StoredItem] = []
                for itemClass in Self.secretServiceClasses {
                    for group in caller.accessGroups {
                        let tags = pairs.map {
                            Self.attributeTag(
                                itemClass, group: group, name: $0.key, value: $0.value, key: keys.attributeIndex)
                        }
                        for id in try vault.itemIDs(withAllAttributeTags: tags) {
                            if let row = try vault.item(id: id, withData: false) { rows.append(row) }
                        }
                    }
                }
                return rows
            }
        }
        var out: [KeychainItem] = []
        var seen: Set<Int64> = []
        for row in rows where seen.insert(row.id).inserted {
            guard let itemClass = ItemClass(rawValue: row.itemClass), Self.secretServiceClasses.contains(itemClass)
            else { continue }
            guard let item = visibleAttributesOnly(row, itemClass, caller: caller, keys: keys) else { continue }
            if SecretServiceMapping.matches(item, query) { out.append(item) }
        }
        return out.sorted { ($0.itemClass.rawValue, $0.id) < ($1.itemClass.rawValue, $1.id) }
    }

    /// Every password item the caller may see, synchronizable or not.
    private func everySecretServiceItem(in call: CallContext) throws -> [KeychainItem] {
        var out: [KeychainItem] = []
        for itemClass in Self.secretServiceClasses {
            do {
                out += try copyMatching(
                    Query(itemClass, [:], matchLimit: .all, returnAttributes: true, synchronizableAny: true), in: call)
            } catch let e as KeychainError where e.status == .itemNotFound {
                continue
            }
        }
        return out.sorted { ($0.itemClass.rawValue, $0.id) < ($1.itemClass.rawValue, $1.id) }
    }

    // MARK: Building the index (migration to format 3)

    /// Tags every password item of a vault that has none yet, inside the migration's write,
    /// adding each tag's entry to `manifest`. A row whose attributes do not open stops the
    /// migration (its tags could not be made, and it would vanish from searches).
    func buildAttributeIndex(
        in vault: any ItemStoreWriter, metadataKey: SecureBytes, indexKey: SecureBytes, entryKey: SecureBytes,
        manifest: inout Manifest
    ) throws {
        for itemClass in Self.secretServiceClasses {
            for row in try vault.items(itemClass: itemClass.rawValue, withData: false) {
                let attributes: Attributes
                do {
                    attributes = try openAttributes(row, itemClass: itemClass, metadataKey: metadataKey)
                } catch {
                    throw KeychainError(
                        .decode, "item \(row.id) (\(row.itemClass)) is damaged: the vault is not migrated")
                }
                let tags = Self.attributeTags(itemClass, attributes, key: indexKey)
                try vault.setAttributeTags(tags, itemID: row.id)
                for tag in tags { manifest.toggleTag(itemID: row.id, tag, key: entryKey) }
            }
        }
    }
}
