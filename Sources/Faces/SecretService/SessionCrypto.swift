import CModpDH
import Crypto
import FoundationEssentials
import Glibc
import KeychainCrypto
import _CryptoExtras

/// How a session carries secrets: `plain` as they are (the bus is local and the peer is
/// identified), or `dh-ietf1024-sha256-aes128-cbc-pkcs7`: a Diffie-Hellman exchange in the
/// 1024-bit MODP group (RFC 2409 group 2; the shared secret left-padded to 128 bytes), HKDF-SHA256
/// with no salt and no info to a 16-byte key, and each secret AES-128-CBC with PKCS#7 padding
/// under a fresh IV sent as the secret's parameters.
enum SessionAlgorithm: Sendable {
    case plain
    case dh(SymmetricKey)

    static let plainName = "plain"
    static let dhName = "dh-ietf1024-sha256-aes128-cbc-pkcs7"

    /// The DH answer to a client's public value: this side's public value and the session.
    /// The peer's value must be in 1 < y < p-1; the private exponent lives only in this call.
    static func negotiate(peer: [UInt8]) throws(BusError) -> ([UInt8], SessionAlgorithm) {
        guard !peer.isEmpty, peer.count <= Int(KEYCHAINFS_MODP1024_BYTES) else {
            throw BusError.invalidArgs("the client's DH public value must be 1 to 128 bytes")
        }
        var privateKey = [UInt8](repeating: 0, count: Int(KEYCHAINFS_MODP1024_BYTES))
        var generator = SystemRandomNumberGenerator()
        for i in privateKey.indices { privateKey[i] = generator.next() }
        var ours = [UInt8](repeating: 0, count: Int(KEYCHAINFS_MODP1024_BYTES))
        var shared = [UInt8](repeating: 0, count: Int(KEYCHAINFS_MODP1024_BYTES))
        defer {
            Sodium.wipe(&privateKey)
            Sodium.wipe(&shared)
        }
        guard keychainfs_modp1024_public(privateKey, privateKey.count, &ours) == 0 else {
            throw BusError.failed("DH key generation failed")
        }
        guard keychainfs_modp1024_shared(privateKey, privateKey.count, peer, peer.count, &shared) == 0 else {
            throw BusError.invalidArgs("the client's DH public value is not in 1 < y < p-1")
        }
        let key = HKDF<SHA256>.deriveKey(inputKeyMaterial: SymmetricKey(data: shared), outputByteCount: 16)
        return (ours, .dh(key))
    }

    /// The secret as sent: (parameters, value).
    func seal(_ secret: [UInt8]) throws(BusError) -> ([UInt8], [UInt8]) {
        switch self {
        case .plain: return ([], secret)
        case .dh(let key):
            let iv = AES._CBC.IV()
            do {
                let sealed = try AES._CBC.encrypt(secret, using: key, iv: iv)
                return (Array(iv), Array(sealed))
            } catch {
                throw BusError.failed("cannot encrypt the secret for the session")
            }
        }
    }

    /// The secret a client sent: parameters (the IV) and value.
    func open(parameters: [UInt8], value: [UInt8]) throws(BusError) -> [UInt8] {
        switch self {
        case .plain: return value
        case .dh(let key):
            do {
                let iv = try AES._CBC.IV(ivBytes: parameters)
                return Array(try AES._CBC.decrypt(value, using: key, iv: iv))
            } catch {
                throw BusError.invalidArgs("the secret does not decrypt under this session (IV or padding)")
            }
        }
    }
}
