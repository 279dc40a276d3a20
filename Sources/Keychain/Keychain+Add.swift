import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

// SecItemAdd, and add-or-update (`-U`).

extension Keychain {
    // MARK: SecItemAdd

    /// SecItemAdd. Returns the stored item (attributes as stored, no data).
    /// `extras`: what the face keeps beside a password (SecretExtras.swift), sealed with it.
    /// `durable: false`: committed, visible to every reader, but not yet synced to disk (a file
    /// system's create: the next durable commit, or `makeCommitsDurable`, makes it durable;
    /// CommitQueue).
    @discardableResult
    public func add(
        _ itemClass: ItemClass, _ given: Attributes, data: [UInt8], extras: [UInt8] = [],
        caller callerArgument: Caller? = nil, durable: Bool = true
    ) throws -> KeychainItem {
        try add(itemClass, given, data: data, extras: extras, in: callContext(callerArgument), durable: durable)
    }

    func add(
        _ itemClass: ItemClass, _ given: Attributes, data: [UInt8], extras: [UInt8] = [], in call: CallContext,
        durable: Bool = true
    )
        throws -> KeychainItem
    {
        guard itemClass != .identity else {
            throw KeychainError(.param, "identities cannot be added directly: add the certificate and the private key")
        }
        let keys = try call.unlockedKeys()
        let (attributes, data) = try newItem(itemClass, given, data: data, extras: extras, caller: call.caller)
        let protection = Self.accessibility(of: attributes)
        let classKey = try self.classKey(protection, keys: keys, for: Self.describe(itemClass, attributes))

        return try writeTransaction(keys: keys.manifest, durable: durable, origin: call.caller.origin) { vault in
            let id = try vault.nextItemID()
            let row = try seal(
                id: id, itemClass: itemClass, attributes: attributes, data: data, version: 1,
                keys: keys, classKey: classKey)
            do { try vault.insert(row, id: id) } catch StoreError.duplicate {
                throw KeychainError(.duplicateItem, "\(Self.describe(itemClass, attributes)) already exists")
            }
            return KeychainItem(
                id: id, itemClass: itemClass, attributes: attributes, data: nil,
                dataLength: data.count - SecretExtras.storedOverhead(attributes))
        }
    }

    /// The attributes and data an add stores for `given`: checked against the class, with
    /// everything the system sets filled in (derived certificate and key attributes, the key
    /// tag, access group, protection class, dates, primary-key defaults), and the bytes to seal
    /// (the data, and the extras after it: SecretExtras.swift). Touches no row.
    func newItem(
        _ itemClass: ItemClass, _ given: Attributes, data: [UInt8], extras: [UInt8] = [],
        caller: Caller
    ) throws -> (attributes: Attributes, data: [UInt8]) {
        try validate(given, in: itemClass, forUpdate: false)
        try checkDataSize(data, itemClass, given)
        var attributes = given
        var data = data
        switch itemClass {
        case .certificate:
            // Apple's value for a certificate is its DER; its key attributes come from it.
            data = try CertificateData.der(from: data)
            for (k, v) in try CertificateData.derivedAttributes(data) { attributes[k] = v }
            if attributes[Schema.label] == nil, let cn = CertificateData.commonName(data) {
                attributes[Schema.label] = .string(cn)
            }
        case .key:
            for (k, v) in KeyData.derivedAttributes(data, given: given) { attributes[k] = v }
            KeyData.setSSHHalves(&attributes, data: data)
            try Self.checkNonExtractableAdd(attributes, data: data)
            // A key's label is not in its primary key, so two keys added under different names
            // with the same key material would collide. Its tag (which is in the key) defaults
            // to the label: keys added under different names are different items.
            if case .string(let label)? = attributes[Schema.label], attributes[Schema.applicationTag] == nil {
                attributes[Schema.applicationTag] = .data(Array(label.utf8))
            }
        default: break
        }
        let now = Date()
        // Defaults set by the system.
        if attributes[Schema.accessGroup] == nil {
            guard let first = caller.accessGroups.first else {
                throw KeychainError(
                    .missingEntitlement, "the caller has no access group to add \(Self.describe(itemClass, given)) to")
            }
            attributes[Schema.accessGroup] = .string(first)
        }
        try checkEntitlement(attributes, caller: caller)
        if let ac = accessControl(of: attributes) {
            guard attributes[Schema.accessible] == nil else {
                throw KeychainError(
                    .param,
                    "accessControl and accessible cannot both be given for \(Self.describe(itemClass, given)): the access control carries the protection class"
                )
            }
            attributes[Schema.accessible] = .accessibility(ac.protection)
        } else if attributes[Schema.accessible] == nil {
            attributes[Schema.accessible] = .accessibility(.whenUnlocked)
        }
        if attributes[Schema.creationDate] == nil { attributes[Schema.creationDate] = .date(now) }
        if attributes[Schema.modificationDate] == nil { attributes[Schema.modificationDate] = .date(now) }
        for key in Schema.primaryKey(of: itemClass) where attributes[key] == nil {
            attributes[key] = AttributeValue.defaultValue(for: key.type)
        }
        try checkSynchronizable(attributes, itemClass)
        // Derived from what is sealed: a value given for it is not the caller's to set.
        attributes[SecretExtras.lengthAttribute] = nil
        guard !extras.isEmpty else { return (attributes, data) }
        try SecretExtras.check(extras, for: itemClass, secret: data)
        let (plaintext, length) = SecretExtras.join(data, extras)
        attributes[SecretExtras.lengthAttribute] = length
        return (attributes, plaintext)
    }

    /// SecItemAdd, and when the item exists (errSecDuplicateItem) SecItemUpdate of exactly the
    /// one item whose whole primary key equals the new item's, with the defaults add applies
    /// (empty account, the caller's first access group, not synchronizable, a key's tag): its
    /// data and the given non-key attributes are replaced. `security add-…-password -U`.
    /// Returns the item (attributes as stored, no data) and whether it was added.
    @discardableResult
    public func addOrUpdate(
        _ itemClass: ItemClass, _ attributes: Attributes, data: [UInt8], extras: [UInt8] = [],
        caller callerArgument: Caller? = nil
    ) throws -> (item: KeychainItem, added: Bool) {
        let call = callContext(callerArgument)
        do {
            return (try add(itemClass, attributes, data: data, extras: extras, in: call), true)
        } catch KeychainStatus.duplicateItem {
            let (full, _) = try newItem(itemClass, attributes, data: data, caller: call.caller)
            let keyAttributes = Set(Schema.primaryKey(of: itemClass))
            let primaryKey = full.filter { keyAttributes.contains($0.key) }
            let existing = try find(Query(itemClass, primaryKey), in: call)
            // By persistent reference: exactly that item, synchronizable or not.
            try update(
                Query(itemClass, synchronizableAny: true, persistentReference: existing.id),
                attributes: attributes.filter { !keyAttributes.contains($0.key) }, data: data, extras: extras,
                in: call)
            return (
                try item(id: existing.id, itemClass: itemClass, synchronizable: true, withData: false, in: call), false
            )
        }
    }
}
