import FoundationEssentials
import Glibc
import Keychain

/// The objects the provider serves and their paths (the Secret Service spec's layout): the
/// service; the collection `login`, the vault (also reached by its aliases `default` and
/// `login`, where libsecret writes directly), its items named by class and persistent reference
/// (`…/collection/login/genp42`); the collection `session` (alias `session`), kept in memory
/// (`SessionCollection`), its items numbered (`…/collection/session/3`); sessions and prompts.
enum ObjectPath: Equatable {
    case service
    case collection(CollectionName)
    case item(ItemClass, Int64)
    /// An item of the session collection.
    case sessionItem(Int)
    case session(Int)
    /// A Prompt object (the vault's passphrase through pinentry), until it completes.
    case prompt(Int)
    /// `/org/freedesktop/secrets/aliases` itself and `/org/freedesktop/secrets/collection`: nodes
    /// with children only.
    case directory

    enum CollectionName: String, CaseIterable {
        /// The vault.
        case login
        /// In memory only, gone when the provider stops.
        case session
    }

    static let root = "/org/freedesktop/secrets"
    static let collectionPath = root + "/collection/login"
    static let sessionCollectionPath = root + "/collection/session"
    /// Each alias and the collection it names.
    static let aliasTable: [String: CollectionName] = ["default": .login, "login": .login, "session": .session]
    static let aliases = aliasTable.keys.sorted()
    static let collectionPaths = CollectionName.allCases.map(collectionPath)
    static let itemClasses: [ItemClass] = [.genericPassword, .internetPassword]

    init?(_ path: String) {
        if path == Self.root {
            self = .service
            return
        }
        guard path.hasPrefix(Self.root + "/") else { return nil }
        let parts = path.dropFirst(Self.root.count + 1).split(separator: "/", omittingEmptySubsequences: false)
        var collection: CollectionName?
        if parts.count >= 2 {
            switch parts[0] {
            case "collection": collection = CollectionName(rawValue: String(parts[1]))
            case "aliases": collection = Self.aliasTable[String(parts[1])]
            default: break
            }
        }
        switch (parts.first, parts.count) {
        case ("collection", 1), ("aliases", 1): self = .directory
        case ("collection", 2), ("aliases", 2):
            guard let collection else { return nil }
            self = .collection(collection)
        case ("collection", 3), ("aliases", 3):
            let name = parts[2]
            switch collection {
            case .login?:
                guard let itemClass = Self.itemClasses.first(where: { name.hasPrefix($0.rawValue) }),
                    let id = Int64(name.dropFirst(itemClass.rawValue.count)), id > 0
                else { return nil }
                self = .item(itemClass, id)
            case .session?:
                guard let n = Int(name), n > 0 else { return nil }
                self = .sessionItem(n)
            case nil: return nil
            }
        case ("session", 2):
            guard let n = Int(parts[1]) else { return nil }
            self = .session(n)
        case ("prompt", 2):
            guard let n = Int(parts[1]) else { return nil }
            self = .prompt(n)
        default: return nil
        }
    }

    static func collectionPath(_ name: CollectionName) -> String { "\(root)/collection/\(name.rawValue)" }
    static func item(_ item: KeychainItem) -> String { itemPath(item.itemClass, item.id) }
    static func itemPath(_ itemClass: ItemClass, _ id: Int64) -> String {
        "\(collectionPath)/\(itemClass.rawValue)\(id)"
    }
    static func sessionItemPath(_ n: Int) -> String { "\(sessionCollectionPath)/\(n)" }
    static func session(_ n: Int) -> String { "\(root)/session/\(n)" }
    static func prompt(_ n: Int) -> String { "\(root)/prompt/\(n)" }
}

/// One property value and its D-Bus signature.
enum PropertyValue {
    case string(String)
    case bool(Bool)
    case uint64(UInt64)
    case paths([String])
    case map([String: String])

    var signature: String {
        switch self {
        case .string: "s"
        case .bool: "b"
        case .uint64: "t"
        case .paths: "ao"
        case .map: "a{ss}"
        }
    }

    func write(_ w: MessageWriter) throws(BusError) {
        try w.variant(signature) { () throws(BusError) in
            switch self {
            case .string(let s): try w.string(s)
            case .bool(let b): try w.bool(b)
            case .uint64(let n): try w.uint64(n)
            case .paths(let p): try w.objectPaths(p)
            case .map(let m): try w.stringMap(m)
            }
        }
    }
}
