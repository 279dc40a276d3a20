import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import KeychainCrypto

// Collection objects: /org/freedesktop/secrets/collection/login (the vault; aliases default and
// login) and /org/freedesktop/secrets/collection/session (in memory; alias session):
// org.freedesktop.Secret.Collection.

extension SecretServiceProvider {
    static let collectionInterface = Interface(
        name: Introspection.collection,
        methods: [
            Method("Delete", out: [Argument("prompt", "o")]) { provider, call in
                let what =
                    provider.collectionName(call) == .login
                    ? "the login collection is the vault: it cannot be deleted"
                    : "the session collection lasts as long as the service: it cannot be deleted"
                throw BusError("org.freedesktop.DBus.Error.AccessDenied", what)
            },
            Method("SearchItems", in: [Argument("attributes", "a{ss}")], out: [Argument("results", "ao")]) {
                try $0.collectionSearchItems($1)
            },
            Method(
                "CreateItem",
                in: [Argument("properties", "a{sv}"), Argument("secret", "(oayays)"), Argument("replace", "b")],
                out: [Argument("item", "o"), Argument("prompt", "o")]
            ) { try $0.createItem($1) },
        ],
        properties: [
            Property("Items", "ao"), Property("Label", "s", writable: true), Property("Locked", "b"),
            Property("Created", "t"), Property("Modified", "t"),
        ],
        signals: [
            Signal("ItemCreated", [Argument("item", "o")]), Signal("ItemDeleted", [Argument("item", "o")]),
            Signal("ItemChanged", [Argument("item", "o")]),
        ],
        values: { try $0.collectionProperties($1) },
        set: { try $0.setCollectionLabel($1, $2) })

    func collectionName(_ call: Call) -> ObjectPath.CollectionName {
        if case .collection(let name) = call.object { return name }
        return .login
    }

    func collectionProperties(_ call: Call) throws -> [String: PropertyValue] {
        if collectionName(call) == .session {
            let session = sessionCollection.withLock { $0 }
            return [
                "Items": .paths(session.search([:]).map(ObjectPath.sessionItemPath)), "Label": .string(session.label),
                "Locked": .bool(false), "Created": .uint64(session.created), "Modified": .uint64(session.modified),
            ]
        }
        let caller = try self.caller(of: call)
        let items: [String]
        do { items = try visibleItems(caller).map(ObjectPath.item) } catch KeychainStatus.interactionNotAllowed {
            items = []
        }
        return [
            "Items": .paths(items), "Label": .string(loginLabel.withLock { $0 }), "Locked": .bool(collectionLocked),
            "Created": .uint64(0), "Modified": .uint64(0),
        ]
    }

    /// Collection.Label: in memory for both collections (docs/secret-service.md).
    func setCollectionLabel(_ call: Call, _ name: String) throws {
        let label = try call.reader.variant("s", what: "Label") { () throws(BusError) in try call.reader.string() }
        let collection = collectionName(call)
        if collection == .session {
            sessionCollection.withLock { $0.label = label }
        } else {
            loginLabel.withLock { $0 = label }
        }
        try reply(call) { _ throws(BusError) in }
        propertiesChanged(ObjectPath.collectionPath(collection), Introspection.collection, ["Label"])
    }

    var collectionLocked: Bool {
        if case .unlocked = access.lockState { return false }
        return true
    }

    func collectionSearchItems(_ call: Call) throws {
        if collectionName(call) == .session {
            let query = try call.reader.stringMap()
            let found = sessionCollection.withLock { $0.search(query) }.map(ObjectPath.sessionItemPath)
            try reply(call) { w throws(BusError) in try w.objectPaths(found) }
            return
        }
        let (unlocked, locked) = try search(call)
        try reply(call) { w throws(BusError) in try w.objectPaths(unlocked + locked) }
    }

    /// CreateItem's properties: the label and the attributes (other properties are ignored).
    func readItemProperties(_ call: Call) throws -> (label: String, attributes: [String: String]) {
        var label = ""
        var attributes: [String: String] = [:]
        let r = call.reader
        guard try r.enter("a", "{sv}") else { throw BusError.invalidArgs("expected properties a{sv}") }
        while try r.enter("e", "sv") {
            switch try r.string() {
            case "org.freedesktop.Secret.Item.Label":
                label = try r.variant("s", what: "the Label property") { () throws(BusError) in try r.string() }
            case "org.freedesktop.Secret.Item.Attributes":
                attributes = try r.variant("a{ss}", what: "the Attributes property") { () throws(BusError) in
                    try r.stringMap()
                }
            default: try r.skip("v")
            }
            try r.exit()
        }
        try r.exit()
        return (label, attributes)
    }

    /// CreateItem. With `replace`, the item with the same primary key (the vault) or the same
    /// attributes (the session collection) takes the new secret; without it, a new item even
    /// when one has the same attributes (the spec's rule): in the vault its account carries
    /// `#2`, `#3`, … (`SecretServiceMapping.copyAccount`), its clients see the attributes given.
    func createItem(_ call: Call) throws {
        let (label, attributes) = try readItemProperties(call)
        var (value, contentType) = try readSecret(call)
        let replace = try call.reader.bool()
        let collection = collectionName(call)
        let path: String
        // The session collection is everyone's; a vault item is signalled when every client may see it.
        var signalled = true
        // `replace` that found the item changed it: the same object path, ItemChanged.
        var replaced = false
        if collection == .session {
            let caller = try self.caller(of: call)
            let (n, created) = sessionCollection.withLock {
                $0.create(
                    label: label, attributes: attributes, secret: value, contentType: contentType, replace: replace)
            }
            audit(caller, nil, .dbusCreate, true, "session collection item \(n)")
            path = ObjectPath.sessionItemPath(n)
            replaced = !created
        } else {
            defer { Sodium.wipe(&value) }
            let caller = try self.caller(of: call)
            // Through the door: each attempt is a decision of its own (a duplicate is audited as the
            // answer it is, then the next copy's create).
            let door = session(caller)
            let (created, added) = try { () throws -> (KeychainItem, Bool) in
                var copy = 1
                while true {
                    let (itemClass, mapped) = try SecretServiceMapping.newItem(
                        attributes: attributes, label: label, contentType: contentType, copy: copy)
                    if replace { return try door.addOrUpdate(itemClass, mapped, data: value) }
                    do { return (try door.add(itemClass, mapped, data: value), true) } catch let e
                        as KeychainError where e.status == .duplicateItem && copy < Self.maxCopies
                    {
                        copy += 1
                    }
                }
            }()
            path = ObjectPath.item(created)
            signalled = Self.isSignalled(created)
            replaced = !added
        }
        try reply(call) { w throws(BusError) in
            try w.objectPath(path)
            try w.objectPath("/")
        }
        guard signalled else { return }
        let collectionPath = ObjectPath.collectionPath(collection)
        emit(collectionPath, Introspection.collection, replaced ? "ItemChanged" : "ItemCreated") {
            w throws(BusError) in try w.objectPath(path)
        }
        if replaced {
            propertiesChanged(path, Introspection.item, ["Attributes", "Label", "Modified"])
        } else {
            propertiesChanged(collectionPath, Introspection.collection, ["Items"])
        }
    }

    /// How many items CreateItem without `replace` makes with one primary key.
    static let maxCopies = 1000
}
