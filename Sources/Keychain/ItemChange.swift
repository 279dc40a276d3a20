import KeychainStore

/// A committed change to one item, as the core's write transaction saw it (issue 30: one change
/// stream in the core). Handed to `Keychain.onCommit` observers after the commit that holds it,
/// before its writer is told it committed; never a name, an attribute or a secret in clear: its
/// names are opened on demand, with the vault's metadata key (`Keychain.names(of:)`).
public struct ItemChange: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// A new item.
        case added
        /// Its data or attributes changed; its primary key (its name) and group did not.
        case changed
        /// Its primary key, class or access group changed: its name (and its directory) did.
        case renamed
        /// Deleted.
        case removed

        /// The operation's word, as `keychainfs watch` and `/views/changes` print it.
        public var word: String {
            switch self {
            case .added: "add"
            case .changed: "update"
            case .renamed: "rename"
            case .removed: "delete"
            }
        }
    }

    /// The stored rows (ciphertext) before and after the change, from which its names are
    /// opened when an observer needs them: the row before is gone once the change committed.
    final class Rows: Sendable {
        let before: StoredItem?
        let after: StoredItem?
        init(before: StoredItem?, after: StoredItem?) {
            self.before = before
            self.after = after
        }
    }

    public let itemClass: ItemClass
    public let id: Int64
    public let kind: Kind
    /// The face the change was made through (`Caller.origin`: `fuse`, `api`, `dbus`, …); empty
    /// for the core's own work.
    public let origin: String
    /// Its data was written (an added item; a changed or renamed one whose data was sealed
    /// again), as against its attributes alone: what a watcher hears as IN_MODIFY rather than
    /// IN_ATTRIB.
    public let dataChanged: Bool
    let rows: Rows?
    /// Its sequence number in the vault's change log (ChangeLog.swift), set when the commit
    /// wrote its row; 0 for a change not logged.
    public internal(set) var seq: Int64 = 0
    /// For a change another process committed (ForeignCommits.swift): its names as the change
    /// log holds them (no rows are kept for it).
    var logged: (before: Attributes?, after: Attributes?)?

    public init(itemClass: ItemClass, id: Int64, kind: Kind, origin: String = "", dataChanged: Bool = false) {
        self.init(itemClass: itemClass, id: id, kind: kind, origin: origin, dataChanged: dataChanged, rows: nil)
    }

    init(itemClass: ItemClass, id: Int64, kind: Kind, origin: String, dataChanged: Bool, rows: Rows?) {
        self.itemClass = itemClass
        self.id = id
        self.kind = kind
        self.origin = origin
        self.dataChanged = dataChanged
        self.rows = rows
    }

    public static func == (a: ItemChange, b: ItemChange) -> Bool {
        a.itemClass == b.itemClass && a.id == b.id && a.kind == b.kind && a.origin == b.origin
    }

    /// A change's names: the name-list entries (id, access group, grouping value and the
    /// attributes a file name is spelled from) of the item before and after it. `before` for a
    /// changed, renamed or removed item, `after` for an added, changed or renamed one; nil for a
    /// class without name lists, or when the rows were not kept.
    public struct Names: Sendable {
        public let before: NameListEntry?
        public let after: NameListEntry?
    }
}

extension Keychain {
    /// Opens the names of a committed change with the vault's metadata key (held while the
    /// vault is open, locked or not), for an observer that shows changes by name (the mount's
    /// replay to its watchers, a change feed filtered by access group). Never a secret.
    public func names(of change: ItemChange) -> ItemChange.Names {
        guard NameLists.listedClasses.contains(change.itemClass) else {
            return ItemChange.Names(before: nil, after: nil)
        }
        let (before, after) = attributes(of: change)
        return ItemChange.Names(
            before: before.map { NameListEntry(id: change.id, change.itemClass, attributes: $0) },
            after: after.map { NameListEntry(id: change.id, change.itemClass, attributes: $0) })
    }

    /// A committed change's attributes before and after it, of any class: opened from its rows,
    /// or, for another process's commit, the names the change log holds (primary key, label,
    /// access group, synchronizable). What a face spells a flat directory's names (labels) from.
    public func attributes(of change: ItemChange) -> (before: Attributes?, after: Attributes?) {
        if let logged = change.logged { return logged }
        guard let rows = change.rows, let metadata = try? currentKeys().metadata else { return (nil, nil) }
        func open(_ row: StoredItem?) -> Attributes? {
            guard let row else { return nil }
            return try? Self.openAttributes(row, itemClass: change.itemClass, vaultID: vaultID, metadataKey: metadata)
        }
        return (open(rows.before), open(rows.after))
    }
}
