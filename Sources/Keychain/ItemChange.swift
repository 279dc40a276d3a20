/// A committed change to one item, as the core's write transaction saw it (issue 30: one change
/// stream in the core). Handed to `Keychain.onCommit` observers after the commit that holds it,
/// before its writer is told it committed; never a name, an attribute or a secret.
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
    }

    public let itemClass: ItemClass
    public let id: Int64
    public let kind: Kind

    public init(itemClass: ItemClass, id: Int64, kind: Kind) {
        self.itemClass = itemClass
        self.id = id
        self.kind = kind
    }
}
