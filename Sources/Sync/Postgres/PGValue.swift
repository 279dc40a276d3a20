import CPQ
import FoundationEssentials
import Glibc

/// A statement parameter. Bytes travel in libpq's binary format (no escaping, no hex doubling
/// of a 64 KiB blob); everything else as text, typed so the server never has to guess.
public enum PGValue: Sendable, Equatable {
    case text(String)
    /// Sent as `bytea` in binary format.
    case bytes([UInt8])
    case int(Int64)
    case bool(Bool)
    /// Sent as `bytea[]` (one dimension, no NULL) in binary format: a batch of blobs in one
    /// parameter, for `unnest`.
    case byteaArray([[UInt8]])
    case null

    /// The parameter's type OID (0 lets the server infer it from the statement), its bytes and
    /// its format (0 text, 1 binary).
    var wire: (type: Oid, bytes: [UInt8]?, format: Int32) {
        switch self {
        case .text(let s): return (0, Array(s.utf8), 0)
        case .bytes(let b): return (17, b, 1)
        case .int(let i): return (20, Array(String(i).utf8), 0)
        case .bool(let b): return (16, Array((b ? "t" : "f").utf8), 0)
        case .byteaArray(let elements): return (1001, Self.binaryArray(elements, elementType: 17), 1)
        case .null: return (0, nil, 0)
        }
    }

    /// PostgreSQL's binary array format (array_recv): dimensions, a has-null flag, the element
    /// type, each dimension's length and lower bound, then each element as a length and its
    /// bytes, every integer big-endian. An empty array has no dimension.
    static func binaryArray(_ elements: [[UInt8]], elementType: Oid) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(20 + elements.reduce(0) { $0 + 4 + $1.count })
        func int32(_ v: Int32) { withUnsafeBytes(of: v.bigEndian) { out.append(contentsOf: $0) } }
        int32(elements.isEmpty ? 0 : 1)
        int32(0)
        int32(Int32(bitPattern: elementType))
        if !elements.isEmpty {
            int32(Int32(elements.count))
            int32(1)
        }
        for element in elements {
            int32(Int32(element.count))
            out.append(contentsOf: element)
        }
        return out
    }

    /// A one-dimensional array of integers as text (`{1,2,3}`), for a `$n::bigint[]` parameter.
    public static func intArray(_ values: [Int64]) -> PGValue {
        .text("{" + values.map(String.init).joined(separator: ",") + "}")
    }

    /// A one-dimensional array of booleans as text (`{t,f}`), for a `$n::boolean[]` parameter.
    public static func boolArray(_ values: [Bool]) -> PGValue {
        .text("{" + values.map { $0 ? "t" : "f" }.joined(separator: ",") + "}")
    }
}

/// A failure of libpq or the server. Messages are libpq's or the server's text with any
/// password scrubbed (`PGConnection` removes `password=…`, a URI's `user:…@` and the literal
/// password of its conninfo), so a PGError may be logged.
public enum PGError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Nothing to talk to: refused, unreachable, bad conninfo, server not accepting connections.
    case connectionFailed(message: String)
    /// The server refused these credentials (SQLSTATE 28P01 / 28000).
    case authenticationFailed(message: String)
    /// A connection that worked is gone (the server restarted, the network dropped it).
    case connectionLost
    /// The server answered with an error.
    case server(sqlState: String, message: String)
    /// A value could not be read as the type asked for.
    case decode(String)

    public var description: String {
        switch self {
        case .connectionFailed(let m): return "cannot connect to PostgreSQL: \(m)"
        case .authenticationFailed(let m): return "PostgreSQL refused the credentials: \(m)"
        case .connectionLost: return "the connection to PostgreSQL was lost"
        case .server(let state, let m): return "PostgreSQL error \(state): \(m)"
        case .decode(let m): return "cannot decode a PostgreSQL value: \(m)"
        }
    }

    /// What a failed connect means: credentials refused, or nothing usable to talk to. libpq
    /// gives no SQLSTATE for a failed connect, so the server's text decides (PostgreSQL 15's
    /// wording, in English: the test server and libpq run with LC_MESSAGES=C).
    static func connect(_ message: String) -> PGError {
        let refusals = [
            "password authentication failed", "no password supplied", "authentication failed for user",
            "28P01", "28000", "SCRAM authentication", "no pg_hba.conf entry", "is not permitted to log in",
        ]
        // 28000 as well: the role named does not exist (a database that does not is 3D000).
        if message.contains("FATAL:  role \"") && message.contains("\" does not exist") {
            return .authenticationFailed(message: message)
        }
        if refusals.contains(where: { message.contains($0) }) { return .authenticationFailed(message: message) }
        return .connectionFailed(message: message)
    }
}

/// A NOTIFY heard on a channel this connection listens to.
public struct PGNotification: Sendable, Equatable {
    public let channel: String
    public let payload: String
    /// The notifying backend's process id.
    public let senderPID: Int32
}

/// Scrubs secrets out of text libpq or the server wrote: `password=value` (quoted or not), the
/// password of a `postgresql://user:password@host` URI, and each literal in `secrets`.
func scrubSecrets(_ text: String, secrets: [String]) -> String {
    var out = text
    for secret in secrets where !secret.isEmpty {
        out = out.replacing(secret, with: "***")
    }
    out = out.replacing(/password\s*=\s*('(?:[^'\\]|\\.)*'|[^\s]+)/.ignoresCase(), with: "password=***")
    out = out.replacing(/(postgres(?:ql)?:\/\/[^:@\/\s]*):[^@\/\s]*@/, with: { "\($0.output.1):***@" })
    return out
}
