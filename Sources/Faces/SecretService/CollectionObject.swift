import Foundation
import Keychain
import KeychainAccess

// The collection object, /org/freedesktop/secrets/collection/login (aliases default and login):
// org.freedesktop.Secret.Collection.

extension SecretServiceProvider {
    static let collectionInterface = Interface(
        name: Introspection.collection,
        methods: [
            Method("Delete", out: [Argument("prompt", "o")]) { _, _ in
                throw BusError(
                    "org.freedesktop.DBus.Error.AccessDenied", "the login collection is the vault: it cannot be deleted"
                )
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
            Property("Items", "ao"), Property("Label", "s"), Property("Locked", "b"), Property("Created", "t"),
            Property("Modified", "t"),
        ],
        signals: [
            Signal("ItemCreated", [Argument("item", "o")]), Signal("ItemDeleted", [Argument("item", "o")]),
            Signal("ItemChanged", [Argument("item", "o")]),
        ],
        values: { try $0.collectionProperties($1) })

    func collectionProperties(_ call: Call) throws -> [String: PropertyValue] {
        let caller = try self.caller(of: call)
        let items: [String]
        do { items = try visibleItems(caller).map(ObjectPath.item) } catch KeychainStatus.interactionNotAllowed {
            items = []
        }
        return [
            "Items": .paths(items), "Label": .string("Login"), "Locked": .bool(collectionLocked),
            "Created": .uint64(0), "Modified": .uint64(0),
        ]
    }

    var collectionLocked: Bool {
        if case .unlocked = keychain.lockState { return false }
        return true
    }

    func collectionSearchItems(_ call: Call) throws {
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

    func createItem(_ call: Call) throws {
        let (label, attributes) = try readItemProperties(call)
        let (value, contentType) = try readSecret(call)
        let replace = try call.reader.bool()
        let caller = try self.caller(of: call)
        let (itemClass, mapped) = try SecretServiceMapping.newItem(
            attributes: attributes, label: label, contentType: contentType)
        let created = try audited(caller, nil, .dbusCreate) {
            replace
                ? try keychain.addOrUpdate(itemClass, mapped, data: value, caller: caller).item
                : try keychain.add(itemClass, mapped, data: value, caller: caller)
        }
        let path = ObjectPath.item(created)
        try reply(call) { w throws(BusError) in
            try w.objectPath(path)
            try w.objectPath("/")
        }
        emit(ObjectPath.collectionPath, Introspection.collection, "ItemCreated") { w throws(BusError) in
            try w.objectPath(path)
        }
        propertiesChanged(ObjectPath.collectionPath, Introspection.collection, ["Items"])
    }
}
