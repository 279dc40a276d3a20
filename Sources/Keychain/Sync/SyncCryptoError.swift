import CSodium
import KeychainCrypto

/// The sync constructions' failures. No case carries key bytes, a root, a code's secret or
/// plaintext: a message names what was wrong with a value's shape, never the value.
public enum SyncCryptoError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A box did not open under the keys and the context the caller expected: another group's
    /// keys, a blob moved to another record, version, group or deleted state, an altered clock,
    /// altered bytes. Deliberately one case: telling which check failed would help no one but
    /// an attacker probing the server's copy.
    case doesNotAuthenticate
    /// A value has the wrong shape (a length, a character outside the alphabet); the string
    /// says which shape was expected, never what was found.
    case malformed(String)
    /// A blob, recovery code or box of a format this code does not know (newer, or damaged).
    case unsupportedFormat(UInt8)
    /// A ThisDeviceOnly class has no sync key: such items never leave the device, so asking
    /// for one is a programming error of the caller.
    case noKeyForClass(Accessibility)
    /// A recovery code whose checksum does not match its other characters: a typo.
    case checksumMismatch
    /// A pairing public key that is not a usable X25519 point (wrong length, or one that
    /// gives an all-zero shared secret), or a transcript this party is not part of.
    case invalidPairingKey(String)
    /// libsodium failed (allocation, initialisation).
    case unavailable(String)

    public var description: String {
        switch self {
        case .doesNotAuthenticate:
            "sync data does not authenticate: it was altered, moved to another record, version or group, or sealed under another group's keys"
        case .malformed(let what): "malformed sync data: \(what)"
        case .unsupportedFormat(let v): "unsupported sync format \(v) (written by a newer keychainfs, or damaged)"
        case .noKeyForClass(let c):
            "protection class \(c.name) does not sync (ThisDeviceOnly): it has no sync key"
        case .checksumMismatch:
            "the recovery code's checksum does not match: a character is mistyped (nothing was derived from it)"
        case .invalidPairingKey(let what): "pairing refused: \(what)"
        case .unavailable(let what): "cryptography unavailable: \(what)"
        }
    }

    /// The KeychainCrypto layer's failures in this layer's words: any failure to open is one
    /// `doesNotAuthenticate`.
    static func from(_ error: any Error, otherwise: SyncCryptoError = .doesNotAuthenticate) -> SyncCryptoError {
        switch error {
        case let e as SyncCryptoError: e
        case CryptoError.unavailable(let what): .unavailable(what)
        default: otherwise
        }
    }
}

/// BLAKE2b (libsodium `crypto_generichash`) where KeychainCrypto's `KeyedHash` does not fit:
/// an output that is a key (written straight into guarded memory), a key made of two secrets,
/// and the plain hash of a blob.
enum SyncHash {
    /// BLAKE2b-256 of `message`, unkeyed (for public data: a blob's tie-breaker, a checksum).
    static func plain(_ message: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        _ = crypto_generichash(&out, 32, message, UInt64(message.count), nil, 0)
        return out
    }

    /// BLAKE2b keyed by the concatenation of `keys` (16 to 64 bytes in all), `outputBytes` long,
    /// into guarded memory. The concatenated key is itself assembled in guarded memory.
    static func keyed(_ message: [UInt8], keys: [SecureBytes], outputBytes: Int = 32) throws -> SecureBytes {
        let key = try SecureBytes(count: keys.reduce(0) { $0 + $1.count }) { buf in
            var offset = 0
            for part in keys {
                part.withUnsafeBytes { p in
                    if p.count > 0 { (buf.baseAddress! + offset).copyMemory(from: p.baseAddress!, byteCount: p.count) }
                    offset += p.count
                }
            }
        }
        precondition(key.count >= 16 && key.count <= 64, "BLAKE2b keys are 16 to 64 bytes")
        return try SecureBytes(count: outputBytes) { out in
            let rc = key.withUnsafeBytes { k in
                crypto_generichash(
                    out.baseAddress!.assumingMemoryBound(to: UInt8.self), outputBytes, message,
                    UInt64(message.count), k.baseAddress!.assumingMemoryBound(to: UInt8.self), k.count)
            }
            guard rc == 0 else { throw SyncCryptoError.unavailable("crypto_generichash failed") }
        }
    }
}
