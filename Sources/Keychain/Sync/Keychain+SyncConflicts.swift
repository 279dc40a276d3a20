import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

/// A version kept from a conflict, as `keychainfs sync conflicts` lists it.
public struct SyncConflict: Sendable, Equatable {
    public let id: Int64
    /// "local" (this device's change lost) or "remote" (another device's lost).
    public let side: String
    public let keptAt: Date
    public let itemClass: ItemClass
    /// The item's name (Keychain.describe), never its secret.
    public let item: String
    public let accessGroup: String
}

extension Keychain {
    /// The kept versions the caller's access groups see, oldest first.
    public func syncConflicts(caller callerArgument: Caller? = nil) throws -> [SyncConflict] {
        let call = callContext(callerArgument)
        guard let syncKeys = sync.keys, syncKeys.canSeal else { return [] }
        let rows = try storeCall { try store.read { try $0.conflicts() } }
        return rows.compactMap { row in
            guard let payload = try? open(row, syncKeys: syncKeys) else { return nil }
            let group =
                payload.attributes[Schema.accessGroup].flatMap { value -> String? in
                    if case .string(let g) = value { return g }
                    return nil
                } ?? Caller.defaultAccessGroup
            guard call.caller.canSee(accessGroup: group) else { return nil }
            return SyncConflict(
                id: row.id, side: row.side, keptAt: Date(timeIntervalSince1970: Double(row.keptAt)),
                itemClass: payload.itemClass, item: Self.describe(payload.itemClass, payload.attributes),
                accessGroup: group)
        }
    }

    /// Brings a kept version back as a local change (journaled, so it reaches the group and
    /// wins by its new clock), and drops it from the list. errSecItemNotFound for an id the
    /// caller does not see.
    public func restoreSyncConflict(id: Int64, caller callerArgument: Caller? = nil) throws {
        let call = callContext(callerArgument)
        let keys = try call.unlockedKeys()
        guard let syncKeys = sync.keys, syncKeys.canSeal else {
            throw KeychainError(.interactionNotAllowed, "the vault is in no sync group, or locked")
        }
        guard let row = try storeCall({ try store.read { try $0.conflicts() } }).first(where: { $0.id == id }),
            let payload = try? open(row, syncKeys: syncKeys)
        else { throw KeychainError(.itemNotFound, "no kept version \(id)") }
        try checkEntitlement(payload.attributes, caller: call.caller)
        let protection = Self.accessibility(of: payload.attributes)
        let classKey = try self.classKey(
            protection, keys: keys, for: Self.describe(payload.itemClass, payload.attributes))
        var attributes = payload.attributes
        attributes[Schema.modificationDate] = .date(Date())
        try writeTransaction(keys: keys.manifest, origin: call.caller.origin) { vault in
            let existing = try vault.item(
                primaryIndex: primaryIndex(payload.itemClass, attributes, keys: keys), withData: false)
            let itemID = try existing?.id ?? vault.nextItemID()
            let sealed = try seal(
                id: itemID, itemClass: payload.itemClass, attributes: attributes, data: payload.data,
                version: (existing?.version ?? 0) + 1, keys: keys, classKey: classKey)
            if existing != nil { try vault.replace(sealed) } else { try vault.insert(sealed, id: itemID) }
            try vault.removeConflict(id: id)
        }
    }

    private func open(_ row: StoredConflict, syncKeys: SyncKeys) throws -> SyncPayload {
        let clock = try SyncRecord.clock(of: row.blob)
        let header = SyncRecordHeader(
            group: syncKeys.group, recordID: row.recordID, version: row.version, clock: clock, deleted: row.deleted)
        var (plain, _) = try SyncRecord.open(row.blob, header: header, keys: syncKeys)
        defer { Sodium.wipe(&plain) }
        return try SyncPayload.decode(plain)
    }
}
