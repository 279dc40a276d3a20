import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess

/// A reference to an item's secret, for `keychainfs run` and `inject`:
///
///     kc://genp/<service>[/<account>]
///     kc://inet/<server>[/<account>][?protocol=<name>&port=<n>&path=<path>]
///
/// Each part is percent-encoded where it holds `/`, `?`, `&`, `%`, `#`, spaces or `}`. A part left
/// out matches any value; a reference that matches more than one item is refused as ambiguous
/// rather than answered with a guess. An inet item's secret is its password: the data up to the
/// first NUL (after which git's helper keeps its extra fields); a genp item's is all its data.
public struct ItemReference: Equatable, Sendable, CustomStringConvertible {
    public let itemClass: ItemClass
    public let attributes: Attributes
    /// The reference as written; it names the item and never holds a secret.
    public let text: String

    public static let scheme = "kc://"
    public var description: String { text }

    public init(_ text: String) throws(KeychainError) {
        self.text = text
        func bad(_ why: String) -> KeychainError { KeychainError(.param, "bad reference '\(text)': \(why)") }
        guard text.hasPrefix(Self.scheme) else { throw bad("it does not start with kc://") }
        var rest = Substring(text.dropFirst(Self.scheme.count))
        var queryText: Substring?
        if let mark = rest.firstIndex(of: "?") {
            queryText = rest[rest.index(after: mark)...]
            rest = rest[..<mark]
        }
        let parts = rest.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 2 || parts.count == 3 else {
            throw bad("expected kc://genp/<service>/<account> or kc://inet/<server>/<account>")
        }
        var decoded: [String] = []
        for part in parts.dropFirst() {
            guard let d = part.percentDecoded(), !d.isEmpty else { throw bad("an empty or malformed part") }
            decoded.append(d)
        }
        var attributes = Attributes()
        switch parts[0] {
        case "genp":
            itemClass = .genericPassword
            attributes[Schema.service] = .string(decoded[0])
            guard queryText == nil else { throw bad("kc://genp takes no ?options") }
        case "inet":
            itemClass = .internetPassword
            attributes[Schema.server] = .string(decoded[0])
            for option in (queryText ?? "").split(separator: "&") {
                let kv = option.split(separator: "=", maxSplits: 1).map { $0.percentDecoded() ?? "" }
                guard kv.count == 2 else { throw bad("options are name=value") }
                switch kv[0] {
                case "protocol":
                    guard let code = InternetProtocol.code(for: kv[1]) else { throw bad("unknown protocol") }
                    attributes[Schema.protocolAttribute] = .string(code)
                case "port":
                    guard let port = Int64(kv[1]), (0...65535).contains(port) else { throw bad("bad port") }
                    attributes[Schema.port] = .number(port)
                case "path": attributes[Schema.path] = .string(kv[1])
                default: throw bad("unknown option (protocol, port, path)")
                }
            }
        default:
            throw bad("the class is genp or inet")
        }
        if decoded.count == 2 { attributes[Schema.account] = .string(decoded[1]) }
        self.attributes = attributes
    }

    /// The secret this reference names, for `caller`. errSecItemNotFound when nothing
    /// matches, errSecParam when more than one item does.
    public func resolve(in door: any KeychainDoor) throws -> [UInt8] {
        let matches: [KeychainItem]
        do {
            matches = try door.copyMatching(Query(itemClass, attributes, matchLimit: .all, synchronizableAny: true))
        } catch KeychainStatus.itemNotFound {
            throw KeychainError(.itemNotFound, "\(text): no such item")
        }
        guard matches.count == 1 else {
            throw KeychainError(
                .param, "\(text) matches \(matches.count) items; name the account (or the protocol, port, path)")
        }
        let data = try door.item(id: matches[0].id, itemClass: itemClass, withData: true).data ?? []
        if itemClass == .internetPassword, let nul = data.firstIndex(of: 0) { return Array(data[..<nul]) }
        return data
    }
}
