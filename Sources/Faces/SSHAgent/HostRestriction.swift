import Crypto
import FoundationEssentials
import Glibc
import Keychain

/// Per-key host restrictions (a key's `sshHosts` attribute): a key that names hosts is offered
/// and used only on a connection whose destination, proved by `session-bind@openssh.com`, is
/// one of them. ssh offers every listed key in turn, so a server's MaxAuthTries is hit by an
/// agent holding many keys; restricting keys to their hosts keeps the list short.
///
/// The agent knows the destination only by its host key. A pattern names it either by that
/// key's fingerprint (`SHA256:…`, as `ssh-keygen -l` prints it) or by a host name, which is
/// looked up in the user's known_hosts: the names recorded there for that very key. A key
/// that names hosts is never offered where the destination is unknown (no bind: `ssh-keygen
/// -Y sign`, an ssh older than 8.9), as OpenSSH's own `ssh-add -h` destination constraints.
public struct HostRestriction: Sendable {
    /// The known_hosts files read for host names, in order.
    public let knownHostsFiles: [String]

    public init(knownHostsFiles: [String]) { self.knownHostsFiles = knownHostsFiles }

    /// OpenSSH's defaults: the user's files, then the system's.
    public static func defaultFiles(home: String?) -> [String] {
        var files: [String] = []
        if let home, !home.isEmpty { files += [home + "/.ssh/known_hosts", home + "/.ssh/known_hosts2"] }
        return files + ["/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"]
    }

    /// The patterns of an `sshHosts` value: separated by commas or white space.
    public static func patterns(_ value: String) -> [String] {
        value.split(whereSeparator: { $0 == "," || $0.isWhitespace }).map(String.init)
    }

    /// Whether a key restricted to `patterns` may be offered to a connection whose destination
    /// has this host key (nil: unknown). No patterns: no restriction.
    public func allows(_ patterns: [String], destination hostKey: [UInt8]?) -> Bool {
        guard !patterns.isEmpty else { return true }
        guard let hostKey else { return false }
        let fingerprint = sshFingerprint(hostKey)
        if patterns.contains(where: { $0 == fingerprint }) { return true }
        let names = patterns.filter { !$0.hasPrefix("SHA256:") }
        guard !names.isEmpty else { return false }
        for entry in knownHosts(for: hostKey) {
            for pattern in names where entry.matches(pattern) { return true }
        }
        return false
    }

    /// The plain names known_hosts records for this host key, for the prompt ("git.example.org
    /// (SHA256:…)"); hashed entries cannot be named.
    public func names(for hostKey: [UInt8]) -> [String] {
        var out: [String] = []
        for entry in knownHosts(for: hostKey) where !entry.field.hasPrefix("|") {
            for name in entry.field.split(separator: ",").map(String.init) where !out.contains(name) {
                out.append(name)
            }
        }
        return out
    }

    /// The host-name fields of the known_hosts lines that record this key (markers such as
    /// `@cert-authority` and `@revoked` are not a host's own key and are skipped).
    func knownHosts(for hostKey: [UInt8]) -> [KnownHostNames] {
        var out: [KnownHostNames] = []
        for file in knownHostsFiles {
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else { continue }
            for line in text.split(whereSeparator: \.isNewline) {
                let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                guard fields.count >= 3, !fields[0].hasPrefix("#"), !fields[0].hasPrefix("@"),
                    let blob = Data(base64Encoded: String(fields[2])), Array(blob) == hostKey
                else { continue }
                out.append(KnownHostNames(field: String(fields[0])))
            }
        }
        return out
    }
}

/// The first field of a known_hosts line: plain names (`host`, `[host]:port`, comma-separated)
/// or one hashed name (`|1|salt|HMAC-SHA1(salt, name)`, from `HashKnownHosts yes`).
struct KnownHostNames {
    let field: String

    /// A pattern with `*` and `?` matches a plain name (case-insensitively; `[host]:port` also
    /// as `host`). A hashed name can only be compared with a literal pattern, so wildcards
    /// never match one.
    func matches(_ pattern: String) -> Bool {
        let pattern = pattern.lowercased()
        if field.hasPrefix("|1|") {
            let parts = field.split(separator: "|", omittingEmptySubsequences: false)
            guard parts.count == 4, !pattern.contains(where: { $0 == "*" || $0 == "?" }),
                let salt = Data(base64Encoded: String(parts[2])), let hash = Data(base64Encoded: String(parts[3]))
            else { return false }
            let mac = HMAC<Insecure.SHA1>.authenticationCode(for: Data(pattern.utf8), using: SymmetricKey(data: salt))
            return Data(mac) == hash
        }
        for name in field.lowercased().split(separator: ",") {
            var candidates = [String(name)]
            if name.hasPrefix("["), let close = name.firstIndex(of: "]") {
                candidates.append(String(name[name.index(after: name.startIndex)..<close]))
            }
            if candidates.contains(where: { glob(pattern, $0) }) { return true }
        }
        return false
    }
}

/// `*` (any run) and `?` (any one character), over the whole name.
func glob(_ pattern: String, _ name: String) -> Bool {
    let p = Array(pattern.unicodeScalars), s = Array(name.unicodeScalars)
    var pi = 0, si = 0, star = -1, mark = 0
    while si < s.count {
        if pi < p.count && (p[pi] == "?" || p[pi] == s[si]) {
            pi += 1; si += 1
        } else if pi < p.count && p[pi] == "*" {
            star = pi; mark = si; pi += 1
        } else if star >= 0 {
            pi = star + 1; mark += 1; si = mark
        } else {
            return false
        }
    }
    while pi < p.count && p[pi] == "*" { pi += 1 }
    return pi == p.count
}
