import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

// Item sealing: how a row is encrypted, authenticated and indexed, and opened again.
//
// Every box is XChaCha20-Poly1305-IETF with a fresh random 192-bit nonce (AEAD.seal draws it):
// random nonces of that size never collide in practice under one key, so no key ever needs a
// counter or a nonce kept in state. What keeps a box from being *moved* is its associated
// data: each helper below states which key it uses and what its AD binds. Everything an AD
// binds is either fixed for the row (vault, id, class) or covered by the manifest (version,
// data generation), so a swapped, moved or replayed box fails to open (errSecDecode) or
// fails the manifest at unlock. Framing.frame length-prefixes every part, so no two
// different lists of parts give the same bytes.

extension Keychain {
    // MARK: Sealing

    /// The blind index of an item's whole primary key (the `pidx` column, UNIQUE).
    /// Key: the index key (a subkey of the master key, so this vault's only). Message: the
    /// domain `kcfs/pidx/v1`, the class, and every primary-key attribute in schema order with
    /// add's defaults, each type-tagged and length-framed by AttributeCodec, so two different
    /// keys never give the same message. Keyed, so someone holding only the file cannot test
    /// guessed names against it; equal keys do give equal hashes, which is what lets SQLite
    /// refuse a duplicate without seeing plaintext (a leak docs/security.md states).
    func primaryIndex(_ itemClass: ItemClass, _ attributes: Attributes, keys: Keys) -> [UInt8] {
        KeyedHash.hash(Self.primaryKeyMessage(itemClass, attributes), key: keys.index)
    }

    /// The blind index of an item's grouping attribute within its access group (the `sidx`
    /// column: service, server or label), for directory listings and lookups.
    /// Key: the index key. Message: the domain `kcfs/sidx/v1` (distinct from the primary
    /// index's, so the two can never be confused), the class, the access group and the framed
    /// value. The group is in the message so a probe made for one group never finds another
    /// group's rows; equality of the value within a group is visible in the file (documented).
    func secondaryIndex(_ itemClass: ItemClass, group: String, _ value: AttributeValue, keys: Keys) -> [UInt8] {
        let attribute = Schema.groupingAttribute(of: itemClass)
        return KeyedHash.hash(
            Framing.frame([
                Framing.text("kcfs/sidx/v1"), Framing.text(itemClass.rawValue),
                Framing.text(group), AttributeCodec.encode([attribute: value]),
            ]), key: keys.index)
    }

    /// AD of an item's attribute box, sealed under the metadata key.
    /// Binds `kcfs/item-attrs/v1`, the vault id, the item id, the class and the row version:
    /// - vault id: a box copied from another vault (same passphrase or not) does not open;
    /// - item id: two rows' attribute boxes cannot be swapped (names moved between secrets);
    /// - class: a box is never decoded against another class's schema;
    /// - version: an older box of the same row does not open in a newer row, and replaying
    ///   the old version number with it changes the row's manifest entry, caught at unlock.
    private func attributesAD(id: Int64, itemClass: ItemClass, version: Int64) -> [UInt8] {
        Self.attributesAD(vaultID: vaultID, id: id, itemClass: itemClass, version: version)
    }

    /// The same AD for a vault given by its id.
    static func attributesAD(vaultID: [UInt8], id: Int64, itemClass: ItemClass, version: Int64) -> [UInt8] {
        Framing.frame([
            Framing.text("kcfs/item-attrs/v1"), vaultID, Framing.int(id),
            Framing.text(itemClass.rawValue), Framing.int(version),
        ])
    }

    /// AD of the wrapped item key (sealed under the class key) and of the data (sealed under
    /// the item key). Binds `kcfs/item-key/v1` or `kcfs/item-data/v1`, vault id, item id, class,
    /// protection class, access group and the data generation:
    /// - the field name: a wrapped key can never be served as data, nor data unwrapped as a key;
    /// - vault id, item id, class: a secret cannot be moved to another row, class or vault;
    /// - protection class: relabelling a WhenUnlocked item as AfterFirstUnlock in its
    ///   attributes does not make its data readable while locked (the AD no longer matches);
    /// - access group: a secret moved under another group's item does not open there;
    /// - data generation (the version at which the data was last sealed, not the row version,
    ///   so an attribute-only update needs no class key): an older secret replayed into a row
    ///   does not open, and replaying the old generation with it fails the manifest.
    /// Because protection class and group are bound here, any change to either must re-seal
    /// the data (update does), never only the attributes.
    private func dataAD(_ field: DataField, id: Int64, itemClass: ItemClass, attributes: Attributes, generation: Int64)
        -> [UInt8]
    {
        dataAD(label: field.framedLabel, id: id, itemClass: itemClass, attributes: attributes, generation: generation)
    }

    /// Both of `dataAD`'s ADs (the key's and the data's), sharing the work: every open of a
    /// file makes both. The data's is the key's with the other label: its parts after the label
    /// are copied, not spelled again.
    private func dataADs(id: Int64, itemClass: ItemClass, attributes: Attributes, generation: Int64)
        -> (key: [UInt8], data: [UInt8])
    {
        let keyLabel = DataField.key.framedLabel
        let key = dataAD(label: keyLabel, id: id, itemClass: itemClass, attributes: attributes, generation: generation)
        var data: [UInt8] = []
        data.reserveCapacity(DataField.data.framedLabel.count + key.count - keyLabel.count)
        data += DataField.data.framedLabel
        data += key[keyLabel.count...]
        return (key, data)
    }

    /// `dataAD` after the framed `label`, built in one buffer.
    private func dataAD(label: [UInt8], id: Int64, itemClass: ItemClass, attributes: Attributes, generation: Int64)
        -> [UInt8]
    {
        var group = ""
        if case .string(let g)? = attributes[Schema.accessGroup] { group = g }
        let protection = Self.accessibility(of: attributes).rawValue
        var out: [UInt8] = []
        out.reserveCapacity(
            label.count + 40 + vaultID.count + itemClass.rawValue.utf8.count + protection.utf8.count
                + group.utf8.count)
        out += label
        Framing.append(vaultID, to: &out)
        Framing.append(id, to: &out)
        Framing.append(itemClass.rawValue.utf8, to: &out)
        Framing.append(protection.utf8, to: &out)
        Framing.append(group.utf8, to: &out)
        Framing.append(generation, to: &out)
        return out
    }

    /// The two boxes `dataAD` binds, by their labels (framed once: every open of a file makes
    /// both ADs).
    enum DataField {
        case key, data

        private static let keyLabel = Framing.frame([Framing.text("kcfs/item-key/v1")])
        private static let dataLabel = Framing.frame([Framing.text("kcfs/item-data/v1")])

        var framedLabel: [UInt8] {
            switch self {
            case .key: Self.keyLabel
            case .data: Self.dataLabel
            }
        }
    }

    /// A complete row for `data` at `version`: a fresh random item key seals the data, the class
    /// key of the item's protection class wraps the item key, and the attributes and indexes
    /// are made by `resealAttributes`. The item key is new at every seal, so no item key ever
    /// covers two versions of a secret, and it exists only in guarded scratch memory, wiped
    /// when this returns. The data generation is set to `version` (see `dataAD`).
    func seal(
        id: Int64, itemClass: ItemClass, attributes: Attributes, data: [UInt8], version: Int64,
        keys: Keys, classKey: SecureBytes
    ) throws -> StoredItem {
        // A fresh random item key, in guarded scratch memory for the length of this call.
        let (wrappedKey, sealedData) = try KeyScratch.shared.withKey { itemKey in
            itemKey.fillRandom()
            let wrapped = try itemKey.withBytes {
                try AEAD.seal(
                    $0,
                    associatedData: dataAD(
                        .key, id: id, itemClass: itemClass, attributes: attributes, generation: version), key: classKey
                )
            }
            return (
                wrapped,
                try AEAD.seal(
                    data,
                    associatedData: dataAD(
                        .data, id: id, itemClass: itemClass, attributes: attributes, generation: version), key: itemKey
                )
            )
        }
        return try resealAttributes(
            StoredItem(
                id: id, itemClass: itemClass.rawValue, primaryIndex: [], secondaryIndex: [], version: version - 1,
                dataGeneration: version, sealedAttributes: [], wrappedItemKey: wrappedKey, sealedData: sealedData),
            itemClass: itemClass, attributes: attributes, keys: keys)
    }

    /// A new row version with new attributes and indexes (the attribute index's tags too); data
    /// and item key unchanged.
    /// Key: the metadata key (kept while locked, so names can change while the data is
    /// unreadable); fresh nonce; AD from `attributesAD` with the new version, so the previous
    /// box of this row no longer opens in it. Only for changes that leave the protection class
    /// and access group alone: those are bound into the data's AD (see `dataAD`).
    func resealAttributes(_ old: StoredItem, itemClass: ItemClass, attributes: Attributes, keys: Keys) throws
        -> StoredItem
    {
        var row = old
        row.version = old.version + 1
        var group = ""
        if case .string(let g)? = attributes[Schema.accessGroup] { group = g }
        row.primaryIndex = primaryIndex(itemClass, attributes, keys: keys)
        row.secondaryIndex = secondaryIndex(
            itemClass, group: group,
            attributes[Schema.groupingAttribute(of: itemClass)] ?? .string(""), keys: keys)
        row.attributeTags = Self.attributeTags(itemClass, attributes, key: keys.attributeIndex)
        row.sealedAttributes = try AEAD.seal(
            AttributeCodec.encode(attributes),
            associatedData: attributesAD(id: old.id, itemClass: itemClass, version: row.version),
            key: keys.metadata)
        return row
    }

    /// The attributes of a row: opened under the metadata key with the AD the row's own id,
    /// class and version give, then decoded. Any failure (authentication or decoding) is
    /// errSecDecode naming only the item id: a damaged or moved box never yields attributes.
    func openAttributes(_ row: StoredItem, itemClass: ItemClass, keys: Keys) throws -> Attributes {
        try openAttributes(row, itemClass: itemClass, metadataKey: keys.metadata)
    }

    func openAttributes(_ row: StoredItem, itemClass: ItemClass, metadataKey: SecureBytes) throws -> Attributes {
        try Self.openAttributes(row, itemClass: itemClass, vaultID: vaultID, metadataKey: metadataKey)
    }

    /// The same for a vault given by its id (the writer that keeps the name lists opens rows
    /// with it, NameLists.swift).
    static func openAttributes(_ row: StoredItem, itemClass: ItemClass, vaultID: [UInt8], metadataKey: SecureBytes)
        throws -> Attributes
    {
        do {
            let plain = try AEAD.open(
                row.sealedAttributes,
                associatedData: attributesAD(vaultID: vaultID, id: row.id, itemClass: itemClass, version: row.version),
                key: metadataKey)
            return try AttributeCodec.decode(plain, itemClass: itemClass)
        } catch {
            throw KeychainError(
                .decode, "item \(row.id) is damaged or was tampered with: its attributes do not authenticate")
        }
    }

    /// The row under new keys, for a master-key rotation: the item key unwrapped with the old
    /// class key and wrapped with the new one, the attributes sealed under the new metadata key
    /// and the indexes (the attribute index's tags too) made with the new index keys. The ADs
    /// are the row's own as before (same id, class, version, generation): only the keys change.
    /// The data box is kept: its item key is what was re-wrapped.
    func rekeyed(
        _ row: StoredItem, itemClass: ItemClass, attributes: Attributes, oldClassKey: SecureBytes,
        newClassKey: SecureBytes, newKeys: Keys
    ) throws -> StoredItem {
        let gen = row.dataGeneration
        let keyAD = dataAD(.key, id: row.id, itemClass: itemClass, attributes: attributes, generation: gen)
        var out = row
        out.wrappedItemKey = try KeyScratch.shared.withKey { itemKey in
            try AEAD.openKey(row.wrappedItemKey, associatedData: keyAD, key: oldClassKey, into: itemKey)
            return try itemKey.withBytes { try AEAD.seal($0, associatedData: keyAD, key: newClassKey) }
        }
        var group = ""
        if case .string(let g)? = attributes[Schema.accessGroup] { group = g }
        out.primaryIndex = primaryIndex(itemClass, attributes, keys: newKeys)
        out.secondaryIndex = secondaryIndex(
            itemClass, group: group, attributes[Schema.groupingAttribute(of: itemClass)] ?? .string(""), keys: newKeys)
        out.attributeTags = Self.attributeTags(itemClass, attributes, key: newKeys.attributeIndex)
        out.sealedAttributes = try AEAD.seal(
            AttributeCodec.encode(attributes),
            associatedData: attributesAD(id: row.id, itemClass: itemClass, version: row.version), key: newKeys.metadata)
        return out
    }

    /// A row's own check of its item key and data, for `verify`: both open under `classKey`
    /// with the AD the row's attributes give. No access check and no user presence: nothing
    /// is returned, and the plaintext is wiped before this returns.
    func checkSeal(_ row: StoredItem, itemClass: ItemClass, attributes: Attributes, classKey: SecureBytes) throws {
        var plain = try openSeal(row, itemClass: itemClass, attributes: attributes, classKey: classKey)
        Sodium.wipe(&plain)
    }

    /// The data of a row opened under `classKey`, with no access check (`verify`, `salvage`:
    /// callers that hold the passphrase).
    func openSeal(_ row: StoredItem, itemClass: ItemClass, attributes: Attributes, classKey: SecureBytes) throws
        -> [UInt8]
    {
        let gen = row.dataGeneration
        return try KeyScratch.shared.withKey { itemKey in
            try AEAD.openKey(
                row.wrappedItemKey,
                associatedData: dataAD(
                    .key, id: row.id, itemClass: itemClass, attributes: attributes, generation: gen),
                key: classKey, into: itemKey)
            return try AEAD.open(
                row.sealedData,
                associatedData: dataAD(
                    .data, id: row.id, itemClass: itemClass, attributes: attributes, generation: gen),
                key: itemKey)
        }
    }

    /// The secret of a row, after the two access checks in this order: the class key is held
    /// (lock state, device binding: errSecInteractionNotAllowed) and user presence is given
    /// or granted. The item key is unwrapped into guarded scratch memory under the class key
    /// and the data opened with it, both with the AD `item.attributes` (already authenticated
    /// by `openAttributes`) and the row's data generation give. Any failure is errSecDecode
    /// naming the item id, never wrong data.
    func openData(_ row: StoredItem, item: KeychainItem, keys: Keys, caller: Caller, ui: AuthenticationUI) throws
        -> [UInt8]
    {
        let classKey = try self.classKey(item.accessibility, keys: keys, for: item.summary)
        try checkPresence(item, caller: caller, ui: ui)
        let ads = dataADs(
            id: row.id, itemClass: item.itemClass, attributes: item.attributes, generation: row.dataGeneration)
        do {
            return try KeyScratch.shared.withKey { itemKey in
                try AEAD.openKey(row.wrappedItemKey, associatedData: ads.key, key: classKey, into: itemKey)
                return try AEAD.open(row.sealedData, associatedData: ads.data, key: itemKey)
            }
        } catch {
            throw KeychainError(
                .decode, "item \(row.id) is damaged or was tampered with: its data does not authenticate")
        }
    }
}
