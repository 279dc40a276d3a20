import CSodium

/// Argon2id (libsodium crypto_pwhash) parameters, as stored in a vault header.
public struct PasswordHashParameters: Equatable, Sendable {
    public var opsLimit: UInt64
    public var memLimit: UInt64

    public init(opsLimit: UInt64, memLimit: UInt64) {
        self.opsLimit = opsLimit
        self.memLimit = memLimit
    }

    public static let interactive = PasswordHashParameters(
        opsLimit: UInt64(crypto_pwhash_opslimit_interactive()), memLimit: UInt64(crypto_pwhash_memlimit_interactive()))
    public static let moderate = PasswordHashParameters(
        opsLimit: UInt64(crypto_pwhash_opslimit_moderate()), memLimit: UInt64(crypto_pwhash_memlimit_moderate()))
    public static let sensitive = PasswordHashParameters(
        opsLimit: UInt64(crypto_pwhash_opslimit_sensitive()), memLimit: UInt64(crypto_pwhash_memlimit_sensitive()))

    /// Parameters below INTERACTIVE are refused: a header that asks for them was either
    /// written by something else or downgraded by an attacker to speed up guessing.
    public var isAtLeastInteractive: Bool {
        opsLimit >= Self.interactive.opsLimit && memLimit >= Self.interactive.memLimit
    }

    /// Parameters above SENSITIVE, the most `init --kdf` and `passwd --kdf` can choose, are
    /// refused too: a header edited to ask for more must not make an unlock spend minutes and
    /// gigabytes before it fails (SENSITIVE: opslimit 4, memlimit 1 GiB, ≈3–4 s here).
    public var isAtMostSensitive: Bool {
        opsLimit <= Self.sensitive.opsLimit && memLimit <= Self.sensitive.memLimit
    }

    public static let saltBytes = Int(crypto_pwhash_SALTBYTES)
}

public enum KeyDerivation {
    /// Derives a 32-byte key from a passphrase with Argon2id v1.3.
    public static func passwordKey(passphrase: SecureBytes, salt: [UInt8], parameters: PasswordHashParameters) throws
        -> SecureBytes
    {
        guard salt.count == PasswordHashParameters.saltBytes else { throw CryptoError.malformed }
        return try SecureBytes(count: AEAD.keyBytes) { out in
            let rc = passphrase.withUnsafeBytes { pw in
                salt.withUnsafeBufferPointer { s in
                    crypto_pwhash(
                        out.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(out.count),
                        pw.baseAddress!.assumingMemoryBound(to: CChar.self), UInt64(pw.count),
                        s.baseAddress!, parameters.opsLimit, Int(parameters.memLimit),
                        crypto_pwhash_ALG_ARGON2ID13)
                }
            }
            guard rc == 0 else { throw CryptoError.keyDerivationFailed }
        }
    }

    /// A subkey for one purpose, derived from a root key with BLAKE2b (crypto_kdf).
    /// `context` must be exactly 8 bytes; `id` separates the purposes within a context.
    public static func subkey(of root: SecureBytes, id: UInt64, context: String) throws -> SecureBytes {
        let ctx = Array(context.utf8)
        precondition(ctx.count == 8, "crypto_kdf context must be 8 bytes")
        return try SecureBytes(count: 32) { out in
            let rc = ctx.map { CChar(bitPattern: $0) }.withUnsafeBufferPointer { c in
                crypto_kdf_derive_from_key(
                    out.baseAddress!.assumingMemoryBound(to: UInt8.self), 32, id, c.baseAddress!, root.base)
            }
            guard rc == 0 else { throw CryptoError.unavailable("crypto_kdf_derive_from_key failed") }
        }
    }

    /// A key bound to two inputs: BLAKE2b keyed by `key` over a label and `material`.
    /// Used to bind the ThisDeviceOnly class keys to the device key as well as the master key.
    public static func combine(_ key: SecureBytes, label: String, with material: SecureBytes) throws -> SecureBytes {
        // crypto_generichash_state is an over-aligned struct Swift imports as opaque, so the
        // message is assembled in a scratch array that is wiped before returning.
        var message = Array(label.utf8)
        material.withUnsafeBytes { message.append(contentsOf: $0) }
        defer { Sodium.wipe(&message) }
        return try SecureBytes(count: 32) { out in
            _ = crypto_generichash(
                out.baseAddress!.assumingMemoryBound(to: UInt8.self), 32,
                message, UInt64(message.count), key.base, key.count)
        }
    }
}

/// Keyed BLAKE2b, for blind indexes (lookups without storing plaintext) and the manifest.
public enum KeyedHash {
    public static func hash(_ message: [UInt8], key: SecureBytes, outputBytes: Int = 32) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: outputBytes)
        _ = message.withUnsafeBufferPointer { m in
            crypto_generichash(&out, outputBytes, m.baseAddress, UInt64(m.count), key.base, key.count)
        }
        return out
    }

    /// Unkeyed BLAKE2b-256 over length-prefixed parts, for digests of ciphertext (public anyway).
    public static func digest(_ parts: [[UInt8]]) -> [UInt8] {
        var message: [UInt8] = []
        message.reserveCapacity(parts.reduce(0) { $0 + $1.count + 8 })
        for part in parts {
            withUnsafeBytes(of: UInt64(part.count).littleEndian) { message.append(contentsOf: $0) }
            message.append(contentsOf: part)
        }
        var out = [UInt8](repeating: 0, count: 32)
        crypto_generichash(&out, 32, message, UInt64(message.count), nil, 0)
        return out
    }
}

/// Ed25519 signatures (crypto_sign), for data only the passphrase holder may write but the
/// daemon must verify: the daemon keeps the public key, never the secret one.
public enum Signing {
    public static let signatureBytes = Int(crypto_sign_BYTES)

    /// A key pair from a 32-byte seed: (public key, secret key in guarded memory).
    public static func keyPair(seed: SecureBytes) throws -> ([UInt8], SecureBytes) {
        var pk = [UInt8](repeating: 0, count: Int(crypto_sign_PUBLICKEYBYTES))
        let sk = try SecureBytes(count: Int(crypto_sign_SECRETKEYBYTES)) { out in
            _ = crypto_sign_seed_keypair(&pk, out.baseAddress!.assumingMemoryBound(to: UInt8.self), seed.base)
        }
        return (pk, sk)
    }

    public static func sign(_ message: [UInt8], secretKey: SecureBytes) -> [UInt8] {
        var sig = [UInt8](repeating: 0, count: signatureBytes)
        crypto_sign_detached(&sig, nil, message, UInt64(message.count), secretKey.base)
        return sig
    }

    public static func verify(_ signature: [UInt8], _ message: [UInt8], publicKey: [UInt8]) -> Bool {
        guard signature.count == signatureBytes, publicKey.count == Int(crypto_sign_PUBLICKEYBYTES) else {
            return false
        }
        return crypto_sign_verify_detached(signature, message, UInt64(message.count), publicKey) == 0
    }
}
