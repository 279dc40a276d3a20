import FoundationEssentials
import Glibc

/// How a Secret Service item (org.freedesktop.secrets: a label, a map of string attributes, a
/// secret and its content type) is kept as a keychain item, and how any keychain password item
/// looks to a Secret Service client. The D-Bus face translates messages; every decision about
/// which class, service, account or server an item gets is made here (docs/secret-service.md,
/// "Mapping").
///
/// The full attribute map and the content type are kept as JSON in the item's own
/// `secretServiceAttributes` attribute (keychainfs's, not Apple's), encrypted like every
/// attribute. Attributes are stored by their code in the sealed attribute box, so a new one
/// changes no vault format; and a user's `comment` stays the user's.
public enum SecretServiceMapping {
    /// Schemas whose items are network passwords: kept as internet passwords, so git's and
    /// docker's items are the ones their keychainfs helpers and `/inet/…` show.
    public static let networkSchemas: Set<String> = [
        "org.git.Password", "org.gnome.keyring.NetworkPassword", "io.docker.Credentials",
    ]
    public static let defaultContentType = "text/plain"
    /// The attribute libsecret adds to name an item's schema.
    public static let schemaAttribute = "xdg:schema"
    /// keychainfs's own: `true` makes the item synchronizable (docs/sync.md), at CreateItem and
    /// through SetAttributes (`false` stops it); never part of the item's name.
    public static let syncAttribute = "keychainfs:synchronizable"

    /// What `secretServiceAttributes` holds.
    struct Kept: Codable {
        var attributes: [String: String]
        var contentType: String
        /// The copy number of an item CreateItem made without `replace` beside another with the
        /// same primary key (2, 3, …; absent for the first): its account carries `#N`.
        var copy: Int? = nil
    }

    /// The account of copy `n` (n ≥ 2) of an item: `alice#2`, or `#2` for an empty account.
    public static func copyAccount(_ account: String, copy: Int) -> String { "\(account)#\(copy)" }

    /// The class and keychain attributes of an item created through the Secret Service API.
    ///
    /// - genp: service from `service`, else `xdg:schema`, else `application`, else the label;
    ///   account from `username`, else `account`, else `user`, else the remaining attributes in
    ///   one line (`k=v&k=v`, sorted), so items that differ only in other attributes stay apart.
    /// - inet (schemas in `networkSchemas`): server from `server` or `host` (a URL is split into
    ///   protocol, server, port and path), protocol from `protocol`, port from `port`, path from
    ///   `object` or `path`, security domain from `domain`, account as for genp.
    ///
    /// `copy` (≥ 2) makes the n-th item with the same attributes (CreateItem without `replace`,
    /// which the spec lets create another): its account is `copyAccount(account, copy:)`, and
    /// clients still see the attributes as given.
    public static func newItem(attributes given: [String: String], label: String, contentType: String, copy: Int = 1)
        throws -> (ItemClass, Attributes)
    {
        var attributes: Attributes = [
            Schema.label: .string(label),
            keptAttribute: try keptValue(
                Kept(attributes: given, contentType: contentType, copy: copy > 1 ? copy : nil)),
        ]
        func copied(_ account: String) -> AttributeValue {
            .string(copy > 1 ? copyAccount(account, copy: copy) : account)
        }
        let accountSource = ["username", "account", "user"].first { given[$0] != nil }
        if given[syncAttribute] == "true" { attributes[Schema.synchronizable] = .bool(true) }
        if let schema = given[schemaAttribute], networkSchemas.contains(schema) {
            var server = given["server"] ?? given["host"] ?? ""
            var protocolName = given["protocol"]
            var port = given["port"].flatMap { Int64($0) }
            var path = given["object"] ?? given["path"]
            if server.contains("://"), let url = URLComponents(string: server), let host = url.host, !host.isEmpty {
                server = host
                protocolName = protocolName ?? url.scheme
                port = port ?? url.port.map(Int64.init)
                if path == nil, !url.path.isEmpty, url.path != "/" { path = url.path }
            }
            attributes[Schema.server] = .string(server)
            if let protocolName, let code = InternetProtocol.code(for: protocolName) {
                attributes[Schema.protocolAttribute] = .string(code)
            }
            if let port { attributes[Schema.port] = .number(port) }
            if let path { attributes[Schema.path] = .string(path) }
            if let domain = given["domain"] { attributes[Schema.securityDomain] = .string(domain) }
            let used: Set<String> = [
                "server", "host", "protocol", "port", "object", "path", "domain", schemaAttribute, syncAttribute,
            ]
            attributes[Schema.account] = copied(account(given, source: accountSource, used: used))
            return (.internetPassword, attributes)
        }
        let serviceSource = ["service", schemaAttribute, "application"].first { given[$0] != nil }
        attributes[Schema.service] = .string(serviceSource.flatMap { given[$0] } ?? label)
        var used: Set<String> = [schemaAttribute, syncAttribute]
        if let serviceSource { used.insert(serviceSource) }
        attributes[Schema.account] = copied(account(given, source: accountSource, used: used))
        return (.genericPassword, attributes)
    }

    private static func account(_ given: [String: String], source: String?, used: Set<String>) -> String {
        if let source { return given[source] ?? "" }
        return given.filter { !used.contains($0.key) }.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
            .joined(separator: "&")
    }

    private static func kept(_ item: KeychainItem) -> Kept? {
        guard let text = item.string(keptAttribute) else { return nil }
        return try? JSONDecoder().decode(Kept.self, from: Data(text.utf8))
    }

    /// Whether an item was made through the Secret Service API (it keeps a map).
    public static func isKept(_ item: KeychainItem) -> Bool { kept(item) != nil }

    /// The attributes a client sees: the map the item was created with; for an item made
    /// through the mount or the CLI, its keychain attributes under the names libsecret's
    /// schemas use (genp: `service`, `username`; inet: `xdg:schema`
    /// org.gnome.keyring.NetworkPassword, `server`, `protocol`, `port`, `user`, `object`).
    /// A kept map shows the item's current names: after a rename through the mount or the CLI,
    /// the attribute its service, account or server came from says the new value (a schema
    /// name or a URL stays as given: it was never just the name).
    public static func attributes(of item: KeychainItem) -> [String: String] {
        if let kept = kept(item) { return current(kept.attributes, copy: kept.copy, of: item) }
        var out: [String: String] = [:]
        switch item.itemClass {
        case .internetPassword:
            out[schemaAttribute] = "org.gnome.keyring.NetworkPassword"
            out["server"] = item.string(Schema.server) ?? ""
            if let code = item.string(Schema.protocolAttribute), !code.isEmpty {
                out["protocol"] = InternetProtocol.name(for: code) ?? code
            }
            if case .number(let port)? = item[Schema.port], port != 0 { out["port"] = String(port) }
            out["user"] = item.string(Schema.account) ?? ""
            if let path = item.string(Schema.path), !path.isEmpty { out["object"] = path }
        default:
            out["service"] = item.string(Schema.service) ?? ""
            out["username"] = item.string(Schema.account) ?? ""
        }
        return out
    }

    /// The kept map with the attributes `newItem` took the item's names from set to the names
    /// it has now.
    /// A copy's `#N` is not part of the name its clients see.
    private static func current(_ given: [String: String], copy: Int?, of item: KeychainItem) -> [String: String] {
        var out = given
        func overlay(_ key: String?, _ attribute: Attribute) {
            guard let key, var now = item.string(attribute), out[key] != nil else { return }
            if attribute == Schema.account, let copy, now.hasSuffix("#\(copy)") { now.removeLast("#\(copy)".count) }
            guard !now.isEmpty else { return }
            out[key] = now
        }
        overlay(["username", "account", "user"].first { given[$0] != nil }, Schema.account)
        switch item.itemClass {
        case .internetPassword:
            let serverKey = ["server", "host"].first { given[$0] != nil }
            if let serverKey, !(given[serverKey] ?? "").contains("://") { overlay(serverKey, Schema.server) }
        default:
            let serviceSource = ["service", schemaAttribute, "application"].first { given[$0] != nil }
            if serviceSource != schemaAttribute { overlay(serviceSource, Schema.service) }
        }
        return out
    }

    public static func contentType(of item: KeychainItem) -> String { kept(item)?.contentType ?? defaultContentType }

    public static func label(of item: KeychainItem) -> String {
        item.string(Schema.label) ?? item.string(Schema.service) ?? item.string(Schema.server) ?? ""
    }

    /// SearchItems: every given attribute equal (exact bytes), as libsecret's providers match.
    public static func matches(_ item: KeychainItem, _ query: [String: String]) -> Bool {
        let have = attributes(of: item)
        return query.allSatisfy { k, v in have[k].map { $0.utf8.elementsEqual(v.utf8) } ?? false }
    }

    /// The attribute changes that set an item's Secret Service attributes (the `Attributes`
    /// property): the kept map is replaced; service, account and server stay as they are (a
    /// rename is the mount's or the CLI's business).
    public static func changes(settingAttributes new: [String: String], of item: KeychainItem) throws -> Attributes {
        var changes: Attributes = [
            keptAttribute: try keptValue(
                Kept(attributes: new, contentType: contentType(of: item), copy: kept(item)?.copy))
        ]
        // `keychainfs:synchronizable` given starts (`true`) or stops (anything else) syncing the
        // item; absent, the item syncs as before. It is never derived into the attributes a
        // client sees: those are what the attribute index holds, for every vault already made.
        if let sync = new[syncAttribute] { changes[Schema.synchronizable] = .bool(sync == "true") }
        return changes
    }

    /// The attribute changes that set an item's content type, keeping its map.
    public static func changes(settingContentType type: String, of item: KeychainItem) throws -> Attributes {
        [
            keptAttribute: try keptValue(
                Kept(attributes: attributes(of: item), contentType: type, copy: kept(item)?.copy))
        ]
    }

    static let keptAttribute = Schema.named("secretServiceAttributes")

    /// The value that keeps a map and content type. Names must be non-empty and at most 1 KiB,
    /// values at most 4 KiB (the whole value stays under the core's 64 KiB attribute limit for
    /// any reasonable map; a larger one is refused there).
    static func keptValue(_ kept: Kept) throws -> AttributeValue {
        for (k, v) in kept.attributes where k.isEmpty || k.utf8.count > 1024 || v.utf8.count > 4096 {
            throw KeychainError(.param, "a Secret Service attribute name is empty or an attribute is too long")
        }
        var kept = kept
        if kept.contentType.isEmpty { kept.contentType = defaultContentType }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return .string(String(decoding: try encoder.encode(kept), as: UTF8.self))
    }

    /// Whether an item's secret is out of reach of `caller` now: a locked keychain holds no key
    /// for its protection class, or it needs user presence that this caller has not given (an
    /// Unlock prompt of its own, or an "Always allow" remembered in the policy). Reported as the
    /// item's `Locked` property and in SearchItems' locked list.
    public static func isLocked(_ item: KeychainItem, in keychain: Keychain, for caller: Caller) -> Bool {
        do { try keychain.checkReadable(item.accessibility, itemID: item.id) } catch { return true }
        return caller.needsPresence(for: item)
    }
}
