import FoundationEssentials
import Glibc
import Keychain
import KeychainCrypto

/// One entry of a password manager's export, in the terms every source shares: what the item
/// is called, the login, the secret, the site, free-form notes. Sources fill it; `item()` turns
/// it into a keychain item the same way for all of them.
public struct ImportRecord: Sendable {
    /// Where it came from, for messages: `line 7` of a CSV file, `pass entry mail/work`.
    public var origin: String
    /// The entry's name (KeePassXC Title, Bitwarden name, 1Password Title, the pass entry's path).
    public var title: String
    public var account: String
    /// The secret, wiped by `wipe()` once stored.
    public var password: [UInt8]
    public var url: String
    public var notes: String
    /// Why the entry is not imported at all (a Bitwarden card or secure note), if so.
    public var skipReason: String?
    /// Fields of the entry keychainfs does not keep (a TOTP seed), named for a warning.
    public var dropped: [String]

    public init(
        origin: String, title: String = "", account: String = "", password: [UInt8] = [], url: String = "",
        notes: String = "", skipReason: String? = nil, dropped: [String] = []
    ) {
        self.origin = origin
        self.title = title
        self.account = account
        self.password = password
        self.url = url
        self.notes = notes
        self.skipReason = skipReason
        self.dropped = dropped
    }

    public mutating func wipe() { Sodium.wipe(&password) }

    /// The keychain item for this entry:
    /// - a URL with a host makes an internet password: server = the host, protocol = the scheme
    ///   (when keychainfs knows it), port and path as the URL gives them (a path of `/` is no
    ///   path), label = the title;
    /// - otherwise a generic password: service = the title, label = the title;
    /// - account = the login, comment = the notes (absent when empty), data = the password.
    /// An entry with neither a title nor a URL host has nothing to name the item by: an error.
    public func item() throws(ImportError) -> ImportItem {
        var attributes = Attributes()
        func put(_ name: String, _ value: String, _ itemClass: ItemClass) throws(ImportError) {
            do {
                let attribute = try Schema.attribute(named: name, in: itemClass)
                attributes[attribute] = try AttributeText.parse(attribute, Array(value.utf8))
            } catch let error as KeychainError {
                throw ImportError("\(origin): its \(name) cannot be stored: \(error.message)")
            } catch {
                throw ImportError("\(origin): its \(name) cannot be stored")
            }
        }
        let itemClass: ItemClass
        if let site = Site(url) {
            itemClass = .internetPassword
            try put("server", site.server, itemClass)
            if let scheme = site.scheme { try put("protocol", scheme, itemClass) }
            if let port = site.port { try put("port", String(port), itemClass) }
            if !site.path.isEmpty { try put("path", site.path, itemClass) }
        } else {
            guard !title.isEmpty else {
                throw ImportError("\(origin): the entry has neither a title nor a URL with a host to name the item by")
            }
            itemClass = .genericPassword
            try put("service", title, itemClass)
        }
        if !title.isEmpty { try put("label", title, itemClass) }
        try put("account", account, itemClass)
        if !notes.isEmpty { try put("comment", notes, itemClass) }
        return ImportItem(origin: origin, itemClass: itemClass, attributes: attributes)
    }
}

/// What an import adds: the class and attributes (the data stays in the record).
public struct ImportItem: Sendable {
    public var origin: String
    public var itemClass: ItemClass
    public var attributes: Attributes

    /// The attributes of its primary key given here (the others take the core's defaults), to
    /// look for an existing item.
    public var primaryKeyQuery: Query {
        let keys = Set(Schema.primaryKey(of: itemClass))
        return Query(itemClass, attributes.filter { keys.contains($0.key) }, matchLimit: .one)
    }

    /// A secret-free name, as the core's messages name items.
    public var description: String { Keychain.describe(itemClass, attributes) }
}

/// An import that cannot go on: a source that does not parse or a record that cannot become an
/// item (exit 2, bad input), or a source that cannot be read (exit 1: no store, gpg failed).
/// The message names lines, fields, entries and columns, never a value of a secret.
public struct ImportError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public let exitCode: Int32
    public init(_ message: String, exitCode: Int32 = 2) {
        self.message = message
        self.exitCode = exitCode
    }
    public var description: String { message }
}

/// The parts of an entry's URL an internet password keeps.
struct Site {
    var server: String
    /// The URL's scheme when keychainfs has a protocol code for it (`https` → `htps`).
    var scheme: String?
    var port: Int?
    var path: String

    /// Nil when there is no host (empty, or not a URL). Without a scheme (`example.com/login`)
    /// the host is still taken, with no protocol.
    init?(_ text: String) {
        let trimmed = text.trimmingWhitespace()
        guard !trimmed.isEmpty else { return nil }
        let hasScheme = trimmed.firstRange(of: "://") != nil
        guard let components = URLComponents(string: hasScheme ? trimmed : "unknown://" + trimmed),
            let host = components.host, !host.isEmpty
        else { return nil }
        server = host.lowercased()
        scheme = hasScheme ? components.scheme.flatMap { InternetProtocol.code(for: $0) == nil ? nil : $0 } : nil
        port = components.port
        path = components.percentEncodedPath == "/" ? "" : components.percentEncodedPath
    }
}
