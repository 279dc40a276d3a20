import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

/// The change log (vault format 7, issue 30): one row per committed item change, written by
/// `ManifestedWriter.logChanges` in the SQLite transaction that makes the change, so a change
/// rolled back (a member's savepoint, the whole transaction) leaves no row. A row is its
/// sequence number (the vault's own counter: one more than the last row's, so gap-free and
/// increasing in commit order), the item's class and id, the operation, and a sealed box (AEAD
/// under the metadata key; associated data: vault id, sequence, class, id, operation) holding
/// the item's names before and after the change: the attributes its path is spelled from, with
/// its access group, so a watcher can show and filter a change after the item is gone. Never a
/// name or a secret in clear. The newest `retained` rows are kept, older ones pruned in the same
/// transaction. Not covered by the manifest: docs/security.md, "The change log (vault format 7)".
public enum ChangeLog {
    /// How many rows the log keeps: a watcher resuming with `--since` more than this many
    /// changes behind is told so, never given a silent gap.
    public static let retained: Int64 = 10_000

    /// The operation codes stored in the log's `op` column.
    static func code(_ kind: ItemChange.Kind) -> Int64 {
        switch kind {
        case .added: 1
        case .changed: 2
        case .renamed: 3
        case .removed: 4
        }
    }

    static func kind(_ code: Int64) -> ItemChange.Kind? {
        switch code {
        case 1: .added
        case 2: .changed
        case 3: .renamed
        case 4: .removed
        default: nil
        }
    }

    /// The attributes a log row keeps of an item: its primary key (a file name's attributes),
    /// its label (the name of a certificate or key file), its access group and synchronizable.
    static func nameAttributes(of itemClass: ItemClass) -> [Attribute] {
        let all = Schema.attributes(of: itemClass)
        let wanted = Schema.primaryKey(of: itemClass) + [Schema.label, Schema.accessGroup, Schema.synchronizable]
        return all.filter { wanted.contains($0) }
    }

    static func names(_ attributes: Attributes, of itemClass: ItemClass) -> Attributes {
        var out: Attributes = [:]
        for attribute in nameAttributes(of: itemClass) { out[attribute] = attributes[attribute] }
        return out
    }

    static func associatedData(vaultID: [UInt8], seq: Int64, itemClass: String, id: Int64, operation: Int64)
        -> [UInt8]
    {
        Framing.frame([
            Framing.text("kcfs/change-log/v1"), vaultID, Framing.int(seq), Framing.text(itemClass), Framing.int(id),
            Framing.int(operation),
        ])
    }

    /// The box's plaintext: a version byte, then the names before and after, each framed
    /// (`AttributeCodec`; an empty part when there is none).
    static func encode(before: Attributes?, after: Attributes?) -> [UInt8] {
        [1] + Framing.frame([before.map(AttributeCodec.encode) ?? [], after.map(AttributeCodec.encode) ?? []])
    }

    static func decode(_ plain: [UInt8], itemClass: ItemClass) throws -> (Attributes?, Attributes?) {
        let bad = KeychainError(.decode, "a change-log row is malformed")
        guard plain.first == 1 else { throw bad }
        var parts: [[UInt8]] = []
        var i = 1
        while i < plain.count {
            guard plain.count - i >= 4 else { throw bad }
            let n = Int(plain[i..<(i + 4)].reversed().reduce(UInt32(0)) { ($0 << 8) | UInt32($1) })
            i += 4
            guard n <= plain.count - i else { throw bad }
            parts.append(Array(plain[i..<(i + n)]))
            i += n
        }
        guard parts.count == 2 else { throw bad }
        func attributes(_ part: [UInt8]) throws -> Attributes? {
            part.isEmpty ? nil : try AttributeCodec.decode(part, itemClass: itemClass)
        }
        return (try attributes(parts[0]), try attributes(parts[1]))
    }
}

extension ChangeLog {
    /// Every row's box opened with `old` and sealed with `new` (a master-key rotation, in its
    /// transaction), numbers and columns kept; a row that does not open stops the rotation.
    static func reseal(in vault: any ItemStoreWriter, vaultID: [UInt8], from old: SecureBytes, to new: SecureBytes)
        throws
    {
        let rows = try vault.loggedChanges(after: Int64.min, limit: Int(retained) * 2)
        guard !rows.isEmpty else { return }
        var resealed: [StoredChange] = []
        for var row in rows {
            let ad = associatedData(
                vaultID: vaultID, seq: row.seq, itemClass: row.itemClass, id: row.itemID, operation: row.operation)
            guard let plain = try? AEAD.open(row.sealed, associatedData: ad, key: old) else {
                throw KeychainError(.decode, "change-log row \(row.seq) is damaged: nothing was rotated")
            }
            row.sealed = try AEAD.seal(plain, associatedData: ad, key: new)
            resealed.append(row)
        }
        try vault.pruneChanges(through: Int64.max)
        for row in resealed { try vault.appendChange(row) }
    }
}

extension ChangeLog {
    /// `verify`'s check of the log: its rows numbered without a gap, each box opening under its
    /// own numbers; nil when they do, else what is wrong (the log is not in the manifest: this is
    /// the only check of it besides every reader's).
    static func problem(in vault: any ItemStoreReader, vaultID: [UInt8], metadataKey: SecureBytes) throws -> String? {
        var previous: Int64?
        for row in try vault.loggedChanges(after: Int64.min, limit: Int(retained) * 2) {
            if let previous, row.seq != previous + 1 {
                return "the change log has a gap before row \(row.seq): a row was deleted"
            }
            previous = row.seq
            let ad = associatedData(
                vaultID: vaultID, seq: row.seq, itemClass: row.itemClass, id: row.itemID, operation: row.operation)
            guard (try? AEAD.open(row.sealed, associatedData: ad, key: metadataKey)) != nil else {
                return "change-log row \(row.seq) does not authenticate: it was altered or moved"
            }
        }
        return nil
    }
}

/// A change as the log holds it, its names opened: what `keychainfs watch` shows.
public struct LoggedChange: Sendable, Equatable {
    public let seq: Int64
    public let itemClass: ItemClass
    public let id: Int64
    public let kind: ItemChange.Kind
    /// The item's names (ChangeLog.nameAttributes) before the change (renamed, removed) and
    /// after it (added, changed, renamed).
    public let before: Attributes?
    public let after: Attributes?

    public init(
        seq: Int64, itemClass: ItemClass, id: Int64, kind: ItemChange.Kind, before: Attributes?, after: Attributes?
    ) {
        self.seq = seq
        self.itemClass = itemClass
        self.id = id
        self.kind = kind
        self.before = before
        self.after = after
    }

    static func group(_ names: Attributes?) -> String? {
        guard let names else { return nil }
        if case .string(let g)? = names[Schema.accessGroup] { return g }
        return Caller.defaultAccessGroup
    }

    /// The change as a caller may see it: nil when it sees neither side's access group; a
    /// rename across groups is, to a caller that sees one side only, an add or a removal, so no
    /// name of a group it is not in is ever shown.
    public func visible(to canSee: (String) -> Bool) -> LoggedChange? {
        let seesBefore = Self.group(before).map(canSee) ?? false
        let seesAfter = Self.group(after).map(canSee) ?? false
        switch (seesBefore, seesAfter) {
        case (true, true): return self
        case (false, false): return nil
        case (true, false):
            return LoggedChange(seq: seq, itemClass: itemClass, id: id, kind: .removed, before: before, after: nil)
        case (false, true):
            return LoggedChange(
                seq: seq, itemClass: itemClass, id: id, kind: kind == .renamed ? .added : kind, before: nil,
                after: after)
        }
    }
}

/// A page of the log read after a sequence number.
public struct ChangeLogPage: Sendable {
    /// The changes after the sequence asked for, in order (at most the limit asked).
    public let changes: [LoggedChange]
    /// The last sequence number the log holds (0 when it has none).
    public let last: Int64
    /// The last row this page read (skipped ones included), else the sequence asked after.
    let through: Int64
    /// How many rows this page read (skipped ones included): a full page means there may be more.
    let rowsRead: Int
}

extension Keychain {
    /// The logged changes after `seq` (at most `limit`), their names opened with the metadata
    /// key (held while the vault is open, locked or not). A `seq` older than the log retains
    /// (changes after it were pruned) is `errSecDataNotAvailable`, never a silent gap; a row
    /// that does not authenticate, or a gap inside the log, is `errSecDecode` (tampering). A
    /// negative `seq` reads from the oldest change the log retains.
    public func changeLog(after asked: Int64, limit: Int = 1_000) throws -> ChangeLogPage {
        try changeLog(after: asked, limit: limit, skipping: { _ in false })
    }

    /// The same, rows for which `skip` is true checked for gaps but neither opened nor returned
    /// (the follower of other processes' commits skips this process's own).
    func changeLog(after asked: Int64, limit: Int, skipping skip: (Int64) -> Bool) throws -> ChangeLogPage {
        let metadata = try currentKeys().metadata
        let vaultID = vaultID
        let (bounds, rows) = try storeCall {
            try store.read { vault in
                let bounds = try vault.changeLogBounds()
                let from = asked < 0 ? (bounds?.first ?? 1) - 1 : asked
                return (bounds, try vault.loggedChanges(after: from, limit: limit))
            }
        }
        let last = bounds?.last ?? 0
        let seq = asked < 0 ? (bounds?.first ?? 1) - 1 : asked
        if let bounds, seq + 1 < bounds.first {
            throw KeychainError(
                .dataNotAvailable,
                "the change log no longer holds the changes after \(seq): it keeps the last \(ChangeLog.retained), now \(bounds.first) to \(bounds.last)"
            )
        }
        if seq > last {
            throw KeychainError(
                .dataNotAvailable,
                "the change log ends at \(last), before \(seq): the vault was restored from an older copy or its log was cut"
            )
        }
        var out: [LoggedChange] = []
        var expected = seq + 1
        for row in rows {
            guard row.seq == expected else {
                throw KeychainError(
                    .decode, "the change log has a gap before \(row.seq): a row was deleted (tampering)")
            }
            expected = row.seq + 1
            if skip(row.seq) { continue }
            guard let itemClass = ItemClass(rawValue: row.itemClass), let kind = ChangeLog.kind(row.operation),
                let plain = try? AEAD.open(
                    row.sealed,
                    associatedData: ChangeLog.associatedData(
                        vaultID: vaultID, seq: row.seq, itemClass: row.itemClass, id: row.itemID,
                        operation: row.operation),
                    key: metadata)
            else {
                throw KeychainError(
                    .decode, "change-log row \(row.seq) is damaged or was tampered with: it does not authenticate")
            }
            let (before, after) = try ChangeLog.decode(plain, itemClass: itemClass)
            out.append(
                LoggedChange(
                    seq: row.seq, itemClass: itemClass, id: row.itemID, kind: kind, before: before, after: after))
        }
        return ChangeLogPage(
            changes: out, last: max(last, out.last?.seq ?? 0), through: rows.last?.seq ?? seq, rowsRead: rows.count)
    }
}

extension Keychain {
    /// The change log's last sequence number (0 when it holds none): where a watch from now on
    /// starts.
    public func lastLoggedChange() throws -> Int64 {
        try storeCall { try store.read { try $0.changeLogBounds()?.last ?? 0 } }
    }
}
