import FoundationEssentials
import Glibc
import Keychain

/// One credential of git's helper protocol (gitcredentials(7), "custom helpers"): `key=value`
/// lines ended by a blank line or EOF. Keys this helper does not use (`wwwauth[]`,
/// `capability[]`, `url` parts git already split) are ignored, as git asks of helpers.
public struct GitCredential: Equatable, Sendable {
    public var `protocol`: String?
    /// `host` as git sends it: the host name with `:port` when the URL has one.
    public var host: String?
    public var path: String?
    public var username: String?
    public var password: String?
    /// Unix time after which the password is no longer valid (git ≥ 2.41).
    public var passwordExpiryUTC: String?
    /// An OAuth refresh token kept with the password (git ≥ 2.41).
    public var oauthRefreshToken: String?

    public init() {}

    public struct ParseError: Error, CustomStringConvertible {
        public let description: String
    }

    /// Reads git's lines. A line without `=`, or a value holding NUL, is malformed.
    public static func parse(_ bytes: [UInt8]) throws(ParseError) -> GitCredential {
        var credential = GitCredential()
        for rawLine in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            var line = Array(rawLine)
            if line.last == UInt8(ascii: "\r") { line.removeLast() }
            if line.isEmpty { break }
            guard let eq = line.firstIndex(of: UInt8(ascii: "=")), !line.contains(0),
                let key = String(validating: line[..<eq], as: UTF8.self),
                let value = String(validating: line[(eq + 1)...], as: UTF8.self)
            else {
                throw ParseError(description: "malformed line in git's credential request (expected key=value)")
            }
            switch key {
            case "protocol": credential.protocol = value
            case "host": credential.host = value
            case "path": credential.path = value
            case "username": credential.username = value
            case "password": credential.password = value
            case "password_expiry_utc": credential.passwordExpiryUTC = value
            case "oauth_refresh_token": credential.oauthRefreshToken = value
            default: continue
            }
        }
        return credential
    }

    /// The answer to `get`: the fields found, one `key=value` line each.
    public func answer() -> [UInt8] {
        var out = ""
        for (key, value) in [
            ("username", username), ("password", password), ("password_expiry_utc", passwordExpiryUTC),
            ("oauth_refresh_token", oauthRefreshToken),
        ] {
            if let value { out += "\(key)=\(value)\n" }
        }
        return Array(out.utf8)
    }

    /// The fields git sends beside the password, as they are kept with it in the item's data.
    var extras: [(String, String)] {
        [("password_expiry_utc", passwordExpiryUTC), ("oauth_refresh_token", oauthRefreshToken)].compactMap { k, v in
            v.map { (k, $0) }
        }
    }
}

/// How git's fields sit on an internet-password item, as git-credential-osxkeychain puts them:
/// server = the host without its port, port = the port (0 when the URL has none), protocol =
/// Apple's code for git's protocol name (`https` → `htps`), path, account = username.
public struct InternetLocation: Equatable, Sendable {
    public var server: String
    public var port: Int64
    public var protocolCode: String
    public var path: String?

    /// Nil with a reason when the credential names no host or a protocol without an Apple code.
    public init(_ credential: GitCredential) throws(HelperFailure) {
        guard let proto = credential.protocol, let code = InternetProtocol.code(for: proto) else {
            throw HelperFailure(
                "protocol '\(credential.protocol ?? "")' has no internet-password protocol code (https, http, ftp, smtp, imap, …)"
            )
        }
        guard let host = credential.host, !host.isEmpty else { throw HelperFailure("the request names no host") }
        try self.init(protocolCode: code, hostAndPort: host, path: credential.path)
    }

    public init(protocolCode: String, hostAndPort: String, path: String?) throws(HelperFailure) {
        self.protocolCode = protocolCode
        self.path = path
        // `[::1]:8080`: brackets hold an IPv6 address; the server is stored without them, as
        // the mount's `/inet/https:[::1]:8080/…` does.
        var host = Substring(hostAndPort)
        var portText: Substring?
        if host.hasPrefix("["), let close = host.firstIndex(of: "]") {
            let after = host[host.index(after: close)...]
            if after.hasPrefix(":") {
                portText = after.dropFirst()
            } else if !after.isEmpty {
                throw HelperFailure("malformed host")
            }
            host = host[host.index(after: host.startIndex)..<close]
        } else if let colon = host.lastIndex(of: ":") {
            portText = host[host.index(after: colon)...]
            host = host[..<colon]
        }
        if let portText {
            guard let p = Int64(portText), (1...65535).contains(p) else {
                throw HelperFailure("malformed port in host")
            }
            port = p
        } else {
            port = 0
        }
        guard !host.isEmpty else { throw HelperFailure("the request names no host") }
        server = String(host)
    }

    /// Attributes a lookup matches: every key attribute git gave (without a path, any path),
    /// except a port the URL left out: see `accepts(port:)`.
    public func query(account: String?) -> Attributes {
        var out: Attributes = [Schema.server: .string(server), Schema.protocolAttribute: .string(protocolCode)]
        if port != 0 { out[Schema.port] = .number(port) }
        if let path { out[Schema.path] = .string(path) }
        if let account { out[Schema.account] = .string(account) }
        return out
    }

    /// The same location exactly (docker's items): an absent path or account is the empty value add
    /// gives it; the port as `accepts(port:)` says.
    public func exactQuery(account: String?) -> Attributes {
        var out = query(account: account ?? "")
        out[Schema.path] = .string(path ?? "")
        return out
    }

    /// The whole location of a new item: an absent port is 0, an absent path or account empty.
    public func stored(account: String) -> Attributes {
        var out = exactQuery(account: account)
        out[Schema.port] = .number(port)
        return out
    }

    /// Whether an item's port is this location's: the URL's port when it has one; else 0 or the
    /// protocol's default port (`https://host` is `https://host:443`).
    public func accepts(port itemPort: Int64) -> Bool {
        if port != 0 { return itemPort == port }
        return itemPort == 0 || itemPort == Self.defaultPorts[protocolCode]
    }

    static let defaultPorts: [String: Int64] = [
        "http": 80, "htps": 443, "ftp ": 21, "ftps": 990, "smtp": 25, "imap": 143, "imps": 993, "pop3": 110,
        "pops": 995, "ldap": 389, "ldps": 636, "ssh ": 22,
    ]
}

/// git's extras as the helper keeps them: the item's data is the password alone (so every face,
/// `/inet/https:host/user`, `find-internet-password -w`, the Secret Service, gives the same
/// bytes), and `password_expiry_utc` and `oauth_refresh_token`, when git sends them, are the
/// item's extras (sealed with the password, handed back to this helper only: the core's
/// SecretExtras.swift), as `key=value` lines (git's values cannot hold NUL or newlines).
public enum StoredExtras {
    public static func encode(_ extras: [(String, String)]) -> [UInt8] {
        Array(extras.map { "\($0.0)=\($0.1)\n" }.joined().utf8)
    }

    public static func decode(_ bytes: [UInt8]?) -> [String: String] {
        var extras: [String: String] = [:]
        for line in (bytes ?? []).split(separator: UInt8(ascii: "\n")) {
            guard let eq = line.firstIndex(of: UInt8(ascii: "=")) else { continue }
            extras[String(decoding: line[..<eq], as: UTF8.self)] = String(decoding: line[(eq + 1)...], as: UTF8.self)
        }
        return extras
    }
}
