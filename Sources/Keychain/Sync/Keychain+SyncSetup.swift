import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

/// A vault's sync settings and progress, as `keychainfs sync status` shows them. Readable
/// without the keys: nothing in it is secret (the server's connection string holds no password:
/// libpq reads it from `PGPASSFILE` or the service file, docs/sync.md).
public struct SyncConfiguration: Sendable, Equatable {
    public let groupID: [UInt8]
    public let server: String
    public let deviceID: [UInt8]
    /// The ids in lower-case hex, as `sync status` prints them.
    public var group: String { AttributeText.hex(groupID) }
    public var device: String { AttributeText.hex(deviceID) }
    /// The server's sequence number this device has applied everything up to.
    public let cursor: Int64
    /// Local changes not yet uploaded.
    public let outbox: Int
    /// Versions kept from conflicts (`sync conflicts`).
    public let conflicts: Int
    public let joined: Date?
    public let lastPush: Date?
    public let lastPull: Date?
    /// What the keychain service's engine last failed on, and since when it has been failing
    /// (nil while its rounds succeed).
    public let problem: String?
    public let problemSince: Date?
}

extension Keychain {
    /// The sync settings, or nil when the vault is in no group.
    public func syncConfiguration() throws -> SyncConfiguration? {
        try storeCall {
            try store.read { vault -> SyncConfiguration? in
                guard let group = try vault.syncValue(SyncStateName.group),
                    let server = try vault.syncValue(SyncStateName.server)
                else { return nil }
                func date(_ name: String) throws -> Date? {
                    try vault.syncValue(name).map { Date(timeIntervalSince1970: Double(Self.int64($0))) }
                }
                return SyncConfiguration(
                    groupID: group, server: String(decoding: server, as: UTF8.self),
                    deviceID: try vault.syncValue(SyncStateName.device) ?? [],
                    cursor: Self.int64(try vault.syncValue(SyncStateName.cursor) ?? []),
                    outbox: try vault.outboxCount(), conflicts: try vault.conflicts().count,
                    joined: try date(SyncStateName.joined), lastPush: try date(SyncStateName.lastPush),
                    lastPull: try date(SyncStateName.lastPull),
                    problem: try vault.syncValue(SyncStateName.problem).map { String(decoding: $0, as: UTF8.self) },
                    problemSince: try date(SyncStateName.problemSince))
            }
        }
    }

    /// Whether this process holds the group's keys (the vault is in a group and unlocked).
    public var syncReady: Bool { sync.keys?.canSeal == true }

    /// Loads the group's keys when the vault joined a group since this process unlocked it
    /// (another process's `sync join`); true when they are held now.
    public func refreshSync() -> Bool {
        // Checked against the vault, not only the keys held: another process may have left the
        // group (`sync leave`), or left it and joined or started another (a new root, group and
        // device id) while this one ran. Keys kept from before would journal and seal this
        // process's changes for a group the vault is no longer in, which its devices refuse.
        let stored = try? storeCall {
            try store.read { (try $0.syncValue(SyncStateName.group), try $0.syncValue(SyncStateName.device)) }
        }
        if let (group, device) = stored {
            if group == nil || device == nil {
                if sync.keys != nil { sync.install(keys: nil, device: [], clock: nil) }
                return false
            }
            if sync.keys?.canSeal == true && sync.keys?.group.bytes == group && sync.device == device { return true }
        } else if sync.keys?.canSeal == true {
            return true
        }
        guard let keys = try? currentKeys(), keys.classKeys[.whenUnlocked] != nil else { return false }
        try? loadSync(keys: keys)
        return sync.keys?.canSeal == true
    }

    /// Joins a group with its root key (from pairing or a recovery code): the root wrapped
    /// under the whenUnlocked class key (so it is held exactly while the vault is unlocked, by
    /// every process that unlocks it), a new device id, the cursor at 0, and every
    /// synchronizable item journaled for upload, in one transaction. The passphrase authorises
    /// it (checked, one KDF), as a change of the access policy: joining a group sends every
    /// synchronizable item, sealed, to a server. A vault already in a group is refused (`sync
    /// leave` first).
    public func joinSyncGroup(group: SyncGroupID, root: SecureBytes, server: String, passphrase: SecureBytes) throws {
        _ = try masterKey(passphrase: passphrase)
        let keys = try currentKeys()
        let syncKeys = try SyncKeys(group: group, root: root)
        let wrapped = try SyncKeys.wrapRoot(root, group: group, vaultID: vaultID, under: try rootWrapKey(keys))
        let device = Sodium.randomBytes(16)
        sync.install(keys: syncKeys, device: device, clock: nil)
        do {
            try writeTransaction(keys: keys.manifest) { vault in
                guard try vault.syncValue(SyncStateName.group) == nil else {
                    throw KeychainError(
                        .duplicateItem, "this vault is already in a sync group: `keychainfs sync leave` first")
                }
                try vault.setSyncValue(SyncStateName.group, group.bytes)
                try vault.setSyncValue(SyncStateName.root, wrapped)
                try vault.setSyncValue(SyncStateName.device, device)
                try vault.setSyncValue(SyncStateName.server, Array(server.utf8))
                try vault.setSyncValue(SyncStateName.cursor, Framing.int(0))
                try vault.setSyncValue(SyncStateName.joined, Framing.int(Int64(Date().timeIntervalSince1970)))
                try journalEverySyncingItem(vault, keys: keys)
            }
        } catch {
            try? loadSync(keys: keys)
            throw error
        }
    }

    /// Records what the engine failed on (nil: its round succeeded), for `sync status`; the
    /// time is kept from the first failure of a run of them. Written only when it changes.
    public func noteSyncProblem(_ problem: String?) throws {
        let keys = try currentKeys()
        try writeTransaction(keys: keys.manifest, origin: syncOrigin) { vault in
            guard try vault.syncValue(SyncStateName.group) != nil else { return }
            let had = try vault.syncValue(SyncStateName.problem)
            if let problem {
                if had == nil {
                    try vault.setSyncValue(
                        SyncStateName.problemSince, Framing.int(Int64(Date().timeIntervalSince1970)))
                }
                try vault.setSyncValue(SyncStateName.problem, Array(problem.utf8))
            } else if had != nil {
                try vault.setSyncValue(SyncStateName.problem, nil)
                try vault.setSyncValue(SyncStateName.problemSince, nil)
            }
        }
    }

    /// Leaves the group: the sync tables emptied (the items stay), the keys dropped.
    public func leaveSyncGroup(passphrase: SecureBytes) throws {
        _ = try masterKey(passphrase: passphrase)
        let keys = try currentKeys()
        try writeTransaction(keys: keys.manifest) { try $0.clearSync() }
        sync.install(keys: nil, device: [], clock: nil)
    }

    /// The recovery code (RecoveryCode.swift): the group and its root key, in base32. It IS the
    /// root key, so only the passphrase's holder gets it.
    public func syncRecoveryCode(passphrase: SecureBytes) throws -> String {
        _ = try masterKey(passphrase: passphrase)
        let (group, root) = try syncRoot(keys: try currentKeys())
        return RecoveryCode.text(group: group, root: root)
    }

    /// The group and its root key, for pairing a new device (`sync pair`): only for the
    /// passphrase's holder, as the recovery code.
    public func syncGroupKey(passphrase: SecureBytes) throws -> (SyncGroupID, SecureBytes) {
        _ = try masterKey(passphrase: passphrase)
        return try syncRoot(keys: try currentKeys())
    }

    /// The key the root is wrapped under: the whenUnlocked class key, held while unlocked.
    func rootWrapKey(_ keys: Keys) throws -> SecureBytes {
        guard let key = keys.classKeys[.whenUnlocked] else {
            throw KeychainError(.interactionNotAllowed, "the keychain is locked: the sync group's key is not held")
        }
        return key
    }

    /// The group and its root key, unwrapped with the whenUnlocked class key;
    /// errSecItemNotFound when the vault is in no group.
    func syncRoot(keys: Keys) throws -> (SyncGroupID, SecureBytes) {
        try storeCall { try store.read { try syncRoot(keys: keys, in: $0) } }
    }

    func syncRoot(keys: Keys, in vault: any ItemStoreReader) throws -> (SyncGroupID, SecureBytes) {
        guard let groupBytes = try vault.syncValue(SyncStateName.group),
            let box = try vault.syncValue(SyncStateName.root),
            let group = SyncGroupID(bytes: groupBytes)
        else { throw KeychainError(.itemNotFound, "this vault is in no sync group") }
        do {
            return (group, try SyncKeys.unwrapRoot(box, group: group, vaultID: vaultID, under: try rootWrapKey(keys)))
        } catch {
            throw KeychainError(.decode, "the sync group's root key does not open: it was altered")
        }
    }

    /// At unlock (and when another process joined the vault to a group meanwhile): the
    /// group's keys, when the vault is in one.
    func loadSync(keys: Keys) throws {
        try storeCall { try store.read { try loadSync(keys: keys, from: $0) } }
    }

    /// The same, read in `vault`'s snapshot (a commit's own transaction: SyncJournal.swift).
    func loadSync(keys: Keys, from vault: any ItemStoreReader) throws {
        guard let device = try vault.syncValue(SyncStateName.device) else {
            sync.install(keys: nil, device: [], clock: nil)
            return
        }
        // The clock goes on from the highest stamp this device kept: the one saved with a pulled
        // page or a join, or one in the outbox or the record table (a local change's stamp is
        // kept only in its outbox row, then in its record), so no stamp is ever issued twice.
        let stamps = [try vault.syncValue(SyncStateName.clock), try vault.highestSyncClock()]
        let clock = stamps.compactMap { $0.flatMap { HybridTime(encoded: $0) } }.max()
        let (group, root) = try syncRoot(keys: keys, in: vault)
        sync.install(keys: try SyncKeys(group: group, root: root), device: device, clock: clock)
    }

    /// Every synchronizable item in the outbox (joining a group), stamped now.
    private func journalEverySyncingItem(_ vault: any ItemStoreWriter, keys: Keys) throws {
        try vault.forEachItem { row in
            guard let itemClass = ItemClass(rawValue: row.itemClass),
                let attributes = try? openAttributes(row, itemClass: itemClass, keys: keys),
                Self.syncs(attributes)
            else { return }
            try journal(live: row.id, itemClass, attributes, in: vault)
        }
        try saveClock(vault)
    }

    /// Lower-case hex. Not `String(format:)` a byte: Foundation's formatter cost the sync thread
    /// about a tenth of its CPU (`syncConfiguration` and every pulled record's name, each round).
    static func int64(_ bytes: [UInt8]) -> Int64 {
        guard bytes.count == 8 else { return 0 }
        return bytes.reversed().reduce(Int64(0)) { ($0 << 8) | Int64($1) }
    }
}
