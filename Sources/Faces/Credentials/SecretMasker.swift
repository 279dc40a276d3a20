import FoundationEssentials
import Glibc

/// Replaces every occurrence of the secrets in a stream with a placeholder, however the
/// stream is cut into chunks: bytes are held back only while they could still be the start
/// of a secret, and are let through as soon as they cannot.
public struct SecretMasker {
    public static let placeholder = Array("<concealed by keychainfs>".utf8)
    let secrets: [[UInt8]]
    var pending: [UInt8] = []

    public init(secrets: [[UInt8]]) {
        // Longest first, so a secret that contains another is masked whole.
        self.secrets = Array(Set(secrets.filter { !$0.isEmpty })).sorted { $0.count > $1.count }
    }

    /// The masked bytes that are safe to write now.
    public mutating func feed(_ bytes: [UInt8]) -> [UInt8] {
        pending += bytes
        var out: [UInt8] = []
        var i = 0
        scan: while i < pending.count {
            for secret in secrets {
                let available = pending.count - i
                if available >= secret.count {
                    if pending[i..<(i + secret.count)].elementsEqual(secret) {
                        out += Self.placeholder
                        i += secret.count
                        continue scan
                    }
                } else if pending[i...].elementsEqual(secret.prefix(available)) {
                    // Could still become this secret (longer ones are tried first): wait for more.
                    break scan
                }
            }
            out.append(pending[i])
            i += 1
        }
        pending.removeFirst(i)
        return out
    }

    /// What is left at the end of the stream (a partial secret is not a secret).
    public mutating func finish() -> [UInt8] {
        defer { pending = [] }
        return pending
    }
}
