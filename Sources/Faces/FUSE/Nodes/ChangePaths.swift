import Keychain

/// The mount's path of a logged change's item (ChangeLog.swift), as `PathCodec` spells it in a
/// listing: `genp/<service>/<leaf>`, `inet/<server>/<leaf>`, `cert/<leaf>`, `keys/<leaf>`,
/// relative to the mount's root. What `keychainfs watch` prints, from the service or from the
/// vault directly, spelled alike.
public enum ChangePaths {
    public static func path(_ itemClass: ItemClass, _ names: Attributes) -> String {
        let leaf = PathCodec.leaf(of: itemClass, names)
        guard let directory = PathCodec.directory(of: itemClass, names) else { return itemClass.rawValue + "/" + leaf }
        return itemClass.rawValue + "/" + directory + "/" + leaf
    }

    /// The line `keychainfs watch` prints and `/views/changes` reads: `SEQ OP CLASS PATH`, and
    /// ` (was OLD)` after a rename.
    public static func line(
        seq: Int64, kind: ItemChange.Kind, itemClass: ItemClass, path: String, oldPath: String?
    ) -> String {
        "\(seq) \(kind.word) \(itemClass.rawValue) \(path)" + (oldPath.map { " (was \($0))" } ?? "")
    }

    /// The change's path now (after it; before it for a removal) and, for a rename, before it.
    public static func paths(of change: LoggedChange) -> (path: String, oldPath: String?) {
        let now = change.after ?? change.before ?? [:]
        let old = change.kind == .renamed ? change.before.map { path(change.itemClass, $0) } : nil
        return (path(change.itemClass, now), old)
    }
}
