import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import KeychainCrypto

// Item objects, /org/freedesktop/secrets/collection/login/genpN and …/inetN:
// org.freedesktop.Secret.Item, and how the provider finds, reads and writes items and secrets.

extension SecretServiceProvider {
    static let itemInterface = Interface(
        name: Introspection.item,
        methods: [
            Method("Delete", out: [Argument("Prompt", "o")]) { try $0.deleteItem($1) },
            Method("GetSecret", in: [Argument("session", "o")], out: [Argument("secret", "(oayays)")]) {
                try $0.getSecret($1)
            },
            Method("SetSecret", in: [Argument("secret", "(oayays)")]) { try $0.setSecret($1) },
        ],
        properties: [
            Property("Locked", "b"), Property("Attributes", "a{ss}", writable: true),
            Property("Label", "s", writable: true), Property("Created", "t"), Property("Modified", "t"),
        ],
        values: { try $0.itemProperties($1) },
        set: { try $0.setItemProperty($1, $2) })

    /// The item a call's object path names, and the call's caller.
    private func target(_ call: Call) throws -> (Caller, ItemClass, Int64) {
        guard case .item(let itemClass, let id) = call.object else {
            throw BusError("org.freedesktop.Secret.Error.NoSuchObject", "no such item")
        }
        return (try caller(of: call), itemClass, id)
    }

    func itemProperties(_ call: Call) throws -> [String: PropertyValue] {
        if case .sessionItem(let n) = call.object {
            let item = try sessionItem(n)
            return [
                "Locked": .bool(false), "Attributes": .map(item.attributes), "Label": .string(item.label),
                "Created": .uint64(item.created), "Modified": .uint64(item.modified),
            ]
        }
        let (caller, itemClass, id) = try target(call)
        let item = try visibleItem(caller, itemClass, id)
        return [
            "Locked": .bool(isLocked(item, for: caller)),
            "Attributes": .map(SecretServiceMapping.attributes(of: item)),
            "Label": .string(SecretServiceMapping.label(of: item)),
            "Created": .uint64(UInt64(max(0, item.creationDate?.timeIntervalSince1970 ?? 0))),
            "Modified": .uint64(UInt64(max(0, item.modificationDate?.timeIntervalSince1970 ?? 0))),
        ]
    }

    func setItemProperty(_ call: Call, _ name: String) throws {
        if case .sessionItem(let n) = call.object {
            let r = call.reader
            let label =
                name == "Label" ? try r.variant("s", what: "Label") { () throws(BusError) in try r.string() } : nil
            let map =
                name == "Attributes"
                ? try r.variant("a{ss}", what: "Attributes") { () throws(BusError) in try r.stringMap() } : nil
            try changeSessionItem(call, n, [name, "Modified"]) { item in
                if let label { item.label = label }
                if let map { item.attributes = map }
            }
            return
        }
        let (caller, itemClass, id) = try target(call)
        let item = try visibleItem(caller, itemClass, id)
        try requireIdentity(item, caller)
        let changes: Attributes
        if name == "Label" {
            changes = [
                Schema.label: .string(
                    try call.reader.variant("s", what: "Label") { () throws(BusError) in try call.reader.string() })
            ]
        } else {
            let map = try call.reader.variant("a{ss}", what: "Attributes") { () throws(BusError) in
                try call.reader.stringMap()
            }
            changes = try SecretServiceMapping.changes(settingAttributes: map, of: item)
        }
        _ = try session(caller, update: .dbusSetProperty).update(
            Query(itemClass, synchronizableAny: true, persistentReference: id), attributes: changes, data: nil)
        try reply(call) { _ throws(BusError) in }
        guard Self.isSignalled(item) else { return }
        emit(ObjectPath.collectionPath, Introspection.collection, "ItemChanged") { w throws(BusError) in
            try w.objectPath(ObjectPath.item(item))
        }
        propertiesChanged(ObjectPath.item(item), Introspection.item, [name, "Modified"])
    }

    func getSecret(_ call: Call) throws {
        let session = try call.reader.objectPath()
        let algorithm = try checkSession(session, for: call)
        if case .sessionItem(let n) = call.object {
            let item = try sessionItem(n)
            try reply(call) { w throws(BusError) in
                try writeSecret(
                    w, session: session, algorithm: algorithm, value: item.secret, contentType: item.contentType)
            }
            return
        }
        let (caller, itemClass, id) = try target(call)
        let item = try readSecretOf(caller, itemClass, id)
        try reply(call) { w throws(BusError) in
            try writeSecret(
                w, session: session, algorithm: algorithm, value: item.data ?? [],
                contentType: SecretServiceMapping.contentType(of: item))
        }
    }

    func setSecret(_ call: Call) throws {
        let (value, contentType) = try readSecret(call)
        if case .sessionItem(let n) = call.object {
            try changeSessionItem(call, n, ["Modified"]) { $0.setSecret(value, contentType: contentType) }
            return
        }
        let (caller, itemClass, id) = try target(call)
        let item = try visibleItem(caller, itemClass, id)
        try requireIdentity(item, caller)
        let changes = try SecretServiceMapping.changes(settingContentType: contentType, of: item)
        _ = try session(caller).update(
            Query(itemClass, synchronizableAny: true, persistentReference: id),
            attributes: SecretServiceMapping.isKept(item) ? changes : [:], data: value)
        try reply(call) { _ throws(BusError) in }
        guard Self.isSignalled(item) else { return }
        emit(ObjectPath.collectionPath, Introspection.collection, "ItemChanged") { w throws(BusError) in
            try w.objectPath(ObjectPath.item(item))
        }
        propertiesChanged(ObjectPath.item(item), Introspection.item, ["Modified"])
    }

    func deleteItem(_ call: Call) throws {
        if case .sessionItem(let n) = call.object {
            guard sessionCollection.withLock({ $0.delete(n) }) else {
                throw BusError("org.freedesktop.Secret.Error.NoSuchObject", "no such item")
            }
            try reply(call) { w throws(BusError) in try w.objectPath("/") }
            emit(ObjectPath.sessionCollectionPath, Introspection.collection, "ItemDeleted") { w throws(BusError) in
                try w.objectPath(ObjectPath.sessionItemPath(n))
            }
            propertiesChanged(ObjectPath.sessionCollectionPath, Introspection.collection, ["Items"])
            return
        }
        let (caller, itemClass, id) = try target(call)
        let item = try visibleItem(caller, itemClass, id)
        try requireIdentity(item, caller)
        _ = try session(caller).delete(Query(itemClass, synchronizableAny: true, persistentReference: id))
        try reply(call) { w throws(BusError) in try w.objectPath("/") }
        guard Self.isSignalled(item) else { return }
        emit(ObjectPath.collectionPath, Introspection.collection, "ItemDeleted") { w throws(BusError) in
            try w.objectPath(ObjectPath.item(item))
        }
        propertiesChanged(ObjectPath.collectionPath, Introspection.collection, ["Items"])
    }

    // MARK: The session collection's items

    /// An item of the session collection, or NoSuchObject.
    func sessionItem(_ n: Int) throws(BusError) -> SessionCollection.Item {
        guard let item = sessionCollection.withLock({ $0.items[n] }) else {
            throw BusError("org.freedesktop.Secret.Error.NoSuchObject", "no such item")
        }
        return item
    }

    /// Changes an item of the session collection, replies, and says what changed.
    private func changeSessionItem(
        _ call: Call, _ n: Int, _ changed: [String], _ body: (inout SessionCollection.Item) -> Void
    ) throws {
        guard sessionCollection.withLock({ $0.update(n, body) }) else {
            throw BusError("org.freedesktop.Secret.Error.NoSuchObject", "no such item")
        }
        try reply(call) { _ throws(BusError) in }
        emit(ObjectPath.sessionCollectionPath, Introspection.collection, "ItemChanged") { w throws(BusError) in
            try w.objectPath(ObjectPath.sessionItemPath(n))
        }
        propertiesChanged(ObjectPath.sessionItemPath(n), Introspection.item, changed)
    }

    // MARK: Finding and reading items

    /// Every password item the caller may see (attributes only) whose Secret Service attributes
    /// include every pair of `query` (the core narrows through its attribute index), or IsLocked
    /// when the keychain cannot read attributes at all.
    ///
    /// An item whose label or attributes hold NUL is left out (with a line in the log): a
    /// D-Bus string cannot carry it, and one such item must not fail a client's whole search.
    /// Asked for by its object path, it answers an error (`MessageWriter.string`).
    /// `audited`: a search (SearchItems) is one audited decision; a listing is not.
    func visibleItems(_ caller: Caller, narrowedBy query: [String: String] = [:], audited: Bool = false) throws
        -> [KeychainItem]
    {
        try session(caller).secretServiceSearch(query, audited: audited).filter { item in
            let strings =
                [SecretServiceMapping.label(of: item)] + SecretServiceMapping.attributes(of: item).flatMap { [$0, $1] }
            guard !strings.allSatisfy(MessageWriter.canCarry) else { return true }
            Log.warning(
                "secret service leaves out \(item.summary): a value holds NUL, which a D-Bus string cannot carry")
            return false
        }
    }

    /// The item an object path names, if the caller may see it; else NoSuchObject (audited:
    /// an item of another access group is never told apart from a missing one).
    func visibleItem(_ caller: Caller, _ itemClass: ItemClass, _ id: Int64) throws -> KeychainItem {
        do {
            return try session(caller).visibleItem(id: id, itemClass: itemClass)
        } catch let e as KeychainError where e.status == .itemNotFound {
            audit(caller, id, .dbusLookup, false, e.status.name)
            throw BusError("org.freedesktop.Secret.Error.NoSuchObject", "no such item")
        }
    }

    /// SearchItems: the vault's items that match, the most recently changed first (as
    /// gnome-keyring answers, so a lookup, which takes the first, gets the newest); on the
    /// service, the session collection's first (never locked).
    func search(_ call: Call, includingSession: Bool = false) throws -> (unlocked: [String], locked: [String]) {
        let query = try call.reader.stringMap()
        let caller = try self.caller(of: call)
        let found = try visibleItems(caller, narrowedBy: query, audited: true)
            .sorted { a, b in
                let (ma, mb) = (a.modificationDate ?? .distantPast, b.modificationDate ?? .distantPast)
                return ma != mb ? ma > mb : a.id > b.id
            }
        var unlocked: [String] =
            includingSession ? sessionCollection.withLock { $0.search(query) }.map(ObjectPath.sessionItemPath) : []
        var locked: [String] = []
        for item in found {
            if isLocked(item, for: caller) {
                locked.append(ObjectPath.item(item))
            } else {
                unlocked.append(ObjectPath.item(item))
            }
        }
        return (unlocked, locked)
    }

    /// A secret as the spec's struct (oayays), sealed for its session.
    func writeSecret(
        _ w: MessageWriter, session: String, algorithm: SessionAlgorithm, value: [UInt8], contentType: String
    ) throws(BusError) {
        var (parameters, sealed) = try algorithm.seal(value)
        defer { Sodium.wipe(&sealed) }
        try w.open("r", "oayays")
        try w.objectPath(session)
        try w.bytes(parameters)
        try w.bytes(sealed)
        try w.string(contentType)
        try w.close()
    }

    /// Reads a secret struct (oayays): the session it names must be the caller's.
    func readSecret(_ call: Call) throws -> (value: [UInt8], contentType: String) {
        guard try call.reader.enter("r", "oayays") else { throw BusError.invalidArgs("expected a secret (oayays)") }
        let session = try call.reader.objectPath()
        let parameters = try call.reader.bytes()
        var sent = try call.reader.bytes()
        defer { Sodium.wipe(&sent) }
        let contentType = try call.reader.string()
        try call.reader.exit()
        let algorithm = try checkSession(session, for: call)
        return (try algorithm.open(parameters: parameters, value: sent), contentType)
    }

    func readSecretOf(_ caller: Caller, _ itemClass: ItemClass, _ id: Int64) throws -> KeychainItem {
        try requireIdentity(try visibleItem(caller, itemClass, id), caller)
        // The caller never prompts here (ScopeLedger: kSecUseAuthenticationUIFail).
        return try session(caller).item(id: id, itemClass: itemClass, withData: true)
    }
}
