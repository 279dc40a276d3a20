import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

// Writes: SecItemUpdate, rename, replaceData (a file renamed over an item), SecItemDelete.

extension Keychain {
    // MARK: SecItemUpdate

    /// SecItemUpdate: applies `changes` (and new data, if given) to every match, atomically.
    /// Returns how many items were updated.
    @discardableResult
    /// New data replaces the extras too (SecretExtras.swift): `extras` are the new data's, and
    /// none when empty (an expiry or refresh token kept for the old password is not the new
    /// one's). Without new data the extras stay as they are.
    public func update(
        _ query: Query, attributes changes: Attributes, data: [UInt8]? = nil, extras: [UInt8] = [],
        caller callerArgument: Caller? = nil
    ) throws -> Int {
        try update(query, attributes: changes, data: data, extras: extras, in: callContext(callerArgument))
    }

    /// `outer`: the write transaction this update is part of (rename, replaceData), if any.
    @discardableResult
    func update(
        _ query: Query, attributes changes: Attributes, data: [UInt8]? = nil, extras: [UInt8] = [],
        in call: CallContext, within outer: (any ItemStoreWriter)? = nil
    ) throws -> Int {
        let caller = call.caller
        guard query.matchLimit == nil, query.returnData == nil, query.returnAttributes == nil,
            query.caseInsensitive == nil
        else {
            throw KeychainError(.param, "an update query may not hold kSecReturn… or kSecMatch… keys")
        }
        guard !changes.isEmpty || data != nil else {
            throw KeychainError(.param, "nothing to update for \(Self.describe(query))")
        }
        try validate(changes, in: query.itemClass, forUpdate: true)
        try checkEntitlement(changes, caller: caller)
        var data = data
        var derived = Attributes()
        if let given = data {
            try checkDataSize(given, query.itemClass, query.attributes)
            if !extras.isEmpty { try SecretExtras.check(extras, for: query.itemClass, secret: given) }
            switch query.itemClass {
            case .certificate:
                data = try CertificateData.der(from: given)
                derived = try CertificateData.derivedAttributes(data!)
            case .key:
                derived = KeyData.derivedAttributes(given, given: changes)
            default: break
            }
        }
        let keys = try call.unlockedKeys()
        var all = query
        all.matchLimit = .all
        // User presence is asked before the write transaction: a prompt can take a minute,
        // and the vault must not be held against every other request meanwhile.
        // Only changes to the data or its protection ask; renaming or relabelling a protected
        // item does not (xattrs never prompt). Nested in another write (rename, replaceData)
        // the caller has asked already, before its own transaction.
        func needsPresence(_ attributes: Attributes) -> Bool {
            guard case .accessControl(let ac)? = attributes[Schema.accessControl], ac.requiresPresence else {
                return false
            }
            if data != nil { return true }
            return [Schema.accessible, Schema.accessControl, Schema.accessGroup].contains {
                changes[$0] != nil && changes[$0] != attributes[$0]
            }
        }
        var granted = caller
        func askPresence(_ items: [KeychainItem]) throws {
            for item in items where needsPresence(item.attributes) && !granted.presenceGrants.contains(item.id) {
                try checkPresence(item, caller: caller, ui: caller.authenticationUI)
                granted = granted.granting(presenceFor: item.id)
            }
        }
        var presenceAsked = outer != nil
        if let outer {
            try askPresence(
                matches(all, caller: caller, keys: keys, withData: false, in: outer).map { row, attributes in
                    KeychainItem(id: row.id, itemClass: query.itemClass, attributes: attributes, data: nil)
                })
        }
        func apply(_ vault: any ItemStoreWriter) throws -> Int {
            let found = try matches(all, caller: caller, keys: keys, withData: true, in: vault)
            guard !found.isEmpty else { throw KeychainError(.itemNotFound, "\(Self.describe(query)) not found") }
            let unasked = found.filter { old, oldAttributes in
                needsPresence(oldAttributes) && !granted.presenceGrants.contains(old.id)
            }.map { old, oldAttributes in
                KeychainItem(id: old.id, itemClass: query.itemClass, attributes: oldAttributes, data: nil)
            }
            if let first = unasked.first {
                // Nothing is written yet: the transaction stops (its savepoint undoes nothing)
                // and presence is asked outside it (see below).
                guard presenceAsked else { throw PresenceNeeded(items: unasked) }
                throw KeychainError(
                    .interactionRequired,
                    "\(first.summary) changed while its update waited for user presence; try again")
            }
            for (old, oldAttributes) in found {
                let oldItem = KeychainItem(id: old.id, itemClass: query.itemClass, attributes: oldAttributes, data: nil)
                try Self.checkNonExtractableUpdate(oldItem, changes: changes, newData: data != nil)
                var attributes = oldAttributes
                for (k, v) in changes { attributes[k] = v }
                for (k, v) in derived { attributes[k] = v }
                if query.itemClass == .key, let data { KeyData.setSSHHalves(&attributes, data: data) }
                // New data: its extras (or none) are stored with it.
                var sealedData = data
                if let data, SecretExtras.classes.contains(query.itemClass) {
                    let joined = SecretExtras.join(data, extras)
                    sealedData = joined.plaintext
                    attributes[SecretExtras.lengthAttribute] = joined.length
                }
                if let ac = accessControl(of: changes) {
                    guard changes[Schema.accessible] == nil else {
                        throw KeychainError(.param, "accessControl and accessible cannot both be given")
                    }
                    attributes[Schema.accessible] = .accessibility(ac.protection)
                } else if case .accessibility(let p)? = changes[Schema.accessible],
                    var ac = accessControl(of: oldAttributes)
                {
                    ac.protection = p
                    attributes[Schema.accessControl] = .accessControl(ac)
                }
                attributes[Schema.modificationDate] = .date(Date())
                try checkSynchronizable(attributes, query.itemClass)
                let protectionChanged =
                    Self.accessibility(of: attributes) != Self.accessibility(of: oldAttributes)
                    || attributes[Schema.accessGroup] != oldAttributes[Schema.accessGroup]
                let row: StoredItem
                if data != nil || protectionChanged {
                    // New data, or a new protection class / access group: the data is sealed
                    // again (the old data is needed only when it is kept).
                    let plaintext =
                        try sealedData
                        ?? openData(
                            old, item: oldItem, keys: keys, caller: granted,
                            ui: caller.authenticationUI)
                    // The item's name is spelled only for the error message (an autoclosure):
                    // building it for every update was ~1 % of a durable close's CPU.
                    let classKey = try self.classKey(
                        Self.accessibility(of: attributes), keys: keys,
                        for: Self.describe(query.itemClass, attributes, id: old.id))
                    row = try seal(
                        id: old.id, itemClass: query.itemClass, attributes: attributes, data: plaintext,
                        version: old.version + 1, keys: keys, classKey: classKey)
                } else {
                    row = try resealAttributes(old, itemClass: query.itemClass, attributes: attributes, keys: keys)
                }
                do { try vault.replace(row) } catch StoreError.duplicate {
                    throw KeychainError(
                        .duplicateItem,
                        "cannot update \(Self.describe(query.itemClass, oldAttributes)): \(Self.describe(query.itemClass, attributes)) already exists"
                    )
                }
            }
            return found.count
        }
        if let outer { return try apply(outer) }
        // User presence is asked before the write transaction that changes the item, never
        // inside one (a prompt can take a minute, and the vault must not be held against every
        // other request meanwhile). Most items need none, so the matches are not read once
        // more before the transaction to find out (that read was a whole extra store read and
        // attribute decryption per durable write): the transaction's own pass finds the items
        // that need presence not yet given and stops before writing anything; presence is
        // asked for them outside any transaction, and the update runs again. An item that
        // still needs presence then changed meanwhile: errSecInteractionRequired, as before.
        do {
            return try writeTransaction(keys: keys.manifest, origin: caller.origin, apply)
        } catch let stop as PresenceNeeded {
            try askPresence(stop.items)
            presenceAsked = true
            return try writeTransaction(keys: keys.manifest, origin: caller.origin, apply)
        }
    }

    // MARK: Rename (an update of key attributes that may replace an existing item)

    /// Changes the key attributes of the one item `source` names to `changes`. If another
    /// item already has the new key it is replaced when `replacing` is true (the old target
    /// is deleted in the same transaction), else errSecDuplicateItem. This is what a
    /// filesystem rename onto an existing name means; it is atomic.
    /// `victim`: an item that the new name already denotes although its primary key differs
    /// (certificates and keys are named by label, which is not in their key); it is deleted in
    /// the same transaction.
    public func rename(
        _ source: Query, to changes: Attributes, replacing: Bool, victim: Int64? = nil,
        caller callerArgument: Caller? = nil
    ) throws {
        let call = callContext(callerArgument)
        let caller = call.caller
        let keys = try call.unlockedKeys()
        try writeTransaction(keys: keys.manifest, origin: caller.origin) { vault in
            var one = source
            one.matchLimit = .all
            let found = try matches(one, caller: caller, keys: keys, withData: false, in: vault)
            guard let (row, attributes) = found.first else {
                throw KeychainError(.itemNotFound, "\(Self.describe(source)) not found")
            }
            guard found.count == 1 else {
                throw KeychainError(
                    .param, "\(Self.describe(source)) names \(found.count) items; a rename moves one")
            }
            // The transaction's writer takes each deleted row out of the manifest.
            if let victim, victim != row.id { try vault.delete(id: victim) }
            var target = attributes
            for (k, v) in changes { target[k] = v }
            let keyOnly = Schema.primaryKey(of: source.itemClass)
            var targetQuery = Query(source.itemClass, synchronizableAny: true)
            for k in keyOnly { targetQuery.attributes[k] = target[k] ?? AttributeValue.defaultValue(for: k.type) }
            targetQuery.matchLimit = .all
            let existing = try matches(targetQuery, caller: caller, keys: keys, withData: false, in: vault).filter {
                $0.0.id != row.id
            }
            if !existing.isEmpty {
                guard replacing else {
                    throw KeychainError(.duplicateItem, "\(Self.describe(source.itemClass, target)) already exists")
                }
                for (victim, _) in existing {
                    try vault.delete(id: victim.id)
                }
            }
            try update(
                Query(source.itemClass, synchronizableAny: true, persistentReference: row.id), attributes: changes,
                in: call, within: vault)
        }
    }

    /// Gives `target` the data of `source` and deletes `source`, in one transaction: what a
    /// temp file renamed over an item means (the item keeps its attributes).
    public func replaceData(of target: Query, withDataOf source: Query, caller callerArgument: Caller? = nil) throws {
        let call = callContext(callerArgument)
        let caller = call.caller
        let keys = try call.unlockedKeys()
        // Both halves' user presence is asked before the transaction (see update).
        var one = source
        one.matchLimit = .all
        var targets = target
        targets.matchLimit = .all
        var granted = caller
        for (row, attributes) in try matches(one, caller: caller, keys: keys, withData: false)
            + matches(targets, caller: caller, keys: keys, withData: false)
        {
            try checkPresence(
                KeychainItem(id: row.id, itemClass: source.itemClass, attributes: attributes, data: nil),
                caller: caller, ui: caller.authenticationUI)
            granted = granted.granting(presenceFor: row.id)
        }
        try writeTransaction(keys: keys.manifest, origin: caller.origin) { vault in
            let found = try matches(one, caller: caller, keys: keys, withData: true, in: vault)
            guard found.count == 1, let (row, attributes) = found.first else {
                throw KeychainError(
                    found.isEmpty ? .itemNotFound : .param, "\(Self.describe(source)) must name exactly one item")
            }
            let item = KeychainItem(id: row.id, itemClass: source.itemClass, attributes: attributes, data: nil)
            // A non-extractable key's bytes must not move into an item that would show them.
            guard item.isExtractable else {
                throw KeychainError(.readOnly, "\(item.summary) is not extractable: its key cannot be moved")
            }
            let data = try openData(row, item: item, keys: keys, caller: granted, ui: caller.authenticationUI)
            // The extras move with their secret.
            let (secret, extras) = try SecretExtras.split(source.itemClass, attributes, data)
            try update(
                target, attributes: [:], data: secret, extras: extras ?? [], in: call.with(caller: granted),
                within: vault)
            try vault.delete(id: row.id)
        }
    }

    // MARK: SecItemDelete

    /// SecItemDelete: deletes every match. Returns how many were deleted.
    @discardableResult
    public func delete(_ query: Query, caller callerArgument: Caller? = nil) throws -> Int {
        let call = callContext(callerArgument)
        let caller = call.caller
        guard query.matchLimit == nil else {
            throw KeychainError(.param, "a delete query may not hold kSecMatchLimit")
        }
        let keys = try call.unlockedKeys()
        var all = query
        all.matchLimit = .all
        return try writeTransaction(keys: keys.manifest, origin: caller.origin) { vault in
            let found = try matches(all, caller: caller, keys: keys, withData: false, in: vault)
            guard !found.isEmpty else { throw KeychainError(.itemNotFound, "\(Self.describe(query)) not found") }
            for (row, _) in found {
                try vault.delete(id: row.id)
            }
            return found.count
        }
    }
}

/// The items of an update that need user presence the caller has not given yet: thrown out of
/// the update's first write transaction (which then writes nothing), so that presence is asked
/// outside it. Internal to `Keychain.update`, which catches it; `commitBatch` hands it back to
/// its member unmapped. Never reaches a face.
struct PresenceNeeded: Error {
    let items: [KeychainItem]
}
