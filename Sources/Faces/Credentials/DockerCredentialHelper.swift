import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess

/// docker's credential helper protocol (docker-credential-helpers): `store` reads
/// `{"ServerURL","Username","Secret"}`, `get` and `erase` read a server URL, `list` prints
/// `{ServerURL: Username}`. Credentials are internet passwords labelled `Docker Credentials`
/// (as docker's osxkeychain helper labels them), and only those are docker's: a git
/// credential for the same host is neither answered nor erased.
public struct DockerCredentialHelper {
    public static let label = "Docker Credentials"
    /// What docker recognises as a miss (docker-credential-helpers `credentials.NotFound`).
    public static let notFound = "credentials not found in native keychain"
    /// docker-credential-helpers' words for a request without a server URL or a username
    /// (`credentials.NewErrCredentialsMissingServerURL`, `…MissingUsername`): docker's client
    /// recognises them by their text.
    public static let missingServerURL = "no credentials server URL"
    public static let missingUsername = "no credentials username"

    /// The keychain service's socket, or the vault this helper opened (`HelperVault.openDoor`).
    public let door: any KeychainDoor

    public init(door: any KeychainDoor) {
        self.door = door
    }

    public struct Credential: Codable, Equatable, Sendable {
        public var ServerURL: String
        public var Username: String
        public var Secret: String
    }

    /// A server URL as docker passes it (`registry.example.com:5000`, `https://index.docker.io/v1/`):
    /// a URL without a scheme is https.
    public static func location(_ serverURL: String) throws(HelperFailure) -> InternetLocation {
        let text = serverURL.contains("://") ? serverURL : "https://" + serverURL
        guard let url = URLComponents(string: text), let scheme = url.scheme?.lowercased(),
            scheme == "https" || scheme == "http", let host = url.host, !host.isEmpty
        else { throw HelperFailure("'\(serverURL)' is not a registry URL (https://host[:port][/path])") }
        let hostAndPort = (host.contains(":") ? "[\(host)]" : host) + (url.port.map { ":\($0)" } ?? "")
        return try InternetLocation(
            protocolCode: InternetProtocol.code(for: scheme)!, hostAndPort: hostAndPort, path: url.path)
    }

    func items(at serverURL: String, withData: Bool) throws -> [KeychainItem] {
        let location = try Self.location(serverURL)
        var attributes = location.exactQuery(account: nil)
        attributes[Schema.account] = nil
        attributes[Schema.label] = .string(Self.label)
        do {
            return try door.copyMatching(
                Query(
                    .internetPassword, attributes, matchLimit: .all, returnData: withData ? true : nil,
                    synchronizableAny: true)
            ).filter { location.accepts(port: $0.port) }.sorted { $0.id < $1.id }
        } catch KeychainStatus.itemNotFound {
            return []
        }
    }

    public func store(_ credential: Credential) throws {
        guard !credential.ServerURL.isEmpty else { throw HelperFailure(Self.missingServerURL) }
        guard !credential.Username.isEmpty else { throw HelperFailure(Self.missingUsername) }
        var attributes = try Self.location(credential.ServerURL).stored(account: credential.Username)
        attributes[Schema.label] = .string(Self.label)
        // The URL as docker wrote it, for `list` (docker compares it with what it asks for).
        attributes[Schema.named("comment")] = .string(credential.ServerURL)
        let stored = try door.addOrUpdate(
            .internetPassword, attributes, data: Array(credential.Secret.utf8))
        // One login per registry: a login as someone else replaces the old one, after the new
        // one is safely stored.
        for old in try items(at: credential.ServerURL, withData: false) where old.id != stored.item.id {
            try door.delete(Query(.internetPassword, synchronizableAny: true, persistentReference: old.id))
        }
    }

    /// Nil when docker has no credential for the URL.
    public func get(_ serverURL: String) throws -> Credential? {
        guard let item = try items(at: serverURL, withData: true).first else { return nil }
        guard let secret = String(validating: item.data ?? [], as: UTF8.self) else {
            throw HelperFailure("\(item.summary): the secret is not UTF-8, which docker's JSON cannot carry")
        }
        return Credential(ServerURL: serverURL, Username: item.string(Schema.account) ?? "", Secret: secret)
    }

    /// False when there was nothing to erase.
    public func erase(_ serverURL: String) throws -> Bool {
        let found = try items(at: serverURL, withData: false)
        for item in found {
            try door.delete(Query(.internetPassword, synchronizableAny: true, persistentReference: item.id))
        }
        return !found.isEmpty
    }

    public func list() throws -> [String: String] {
        let all: [KeychainItem]
        do {
            all = try door.copyMatching(
                Query(
                    .internetPassword, [Schema.label: .string(Self.label)], matchLimit: .all,
                    synchronizableAny: true))
        } catch KeychainStatus.itemNotFound {
            return [:]
        }
        var out: [String: String] = [:]
        for item in all {
            let url = item.string(Schema.named("comment")) ?? item.string(Schema.server) ?? ""
            out[url] = item.string(Schema.account) ?? ""
        }
        return out
    }
}
