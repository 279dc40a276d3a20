import Crypto
import FoundationEssentials
import Glibc
import KeychainCrypto
import _CryptoExtras

/// The key pairs `create-keypair` makes (and the ssh agent signs with).
public enum KeyAlgorithm: String, CaseIterable, Sendable {
    case ed25519, p256, p384, rsa3072, rsa4096

    /// Apple's kSecAttrKeyType (none for Ed25519) and the size in bits.
    var keyType: Int64? {
        switch self {
        case .ed25519: nil
        case .p256, .p384: KeyData.typeEC
        case .rsa3072, .rsa4096: KeyData.typeRSA
        }
    }
}

/// A private key parsed from a key item's data. It lives for one operation inside the core:
/// faces get public keys and signatures, never this.
enum SigningKey {
    case ed25519(Curve25519.Signing.PrivateKey)
    case p256(P256.Signing.PrivateKey)
    case p384(P384.Signing.PrivateKey)
    case rsa(_RSA.Signing.PrivateKey)

    /// The PKCS#8 prefix of an Ed25519 private key (RFC 8410): the 32-byte seed follows.
    static let ed25519PKCS8Prefix: [UInt8] = [
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
    ]

    /// A new key pair, as the PEM (PKCS#8, `PRIVATE KEY`) that is stored: what ssh, openssl and
    /// `KeyData.derive` read, so an extractable key made here works like an imported one.
    static func generate(_ algorithm: KeyAlgorithm) throws -> [UInt8] {
        var der: [UInt8]
        switch algorithm {
        case .ed25519:
            der = ed25519PKCS8Prefix + Array(Curve25519.Signing.PrivateKey().rawRepresentation)
        case .p256: der = Array(P256.Signing.PrivateKey().derRepresentation)
        case .p384: der = Array(P384.Signing.PrivateKey().derRepresentation)
        case .rsa3072, .rsa4096:
            let bits = algorithm == .rsa3072 ? 3072 : 4096
            der = Array(try _RSA.Signing.PrivateKey(keySize: .init(bitCount: bits)).pkcs8DERRepresentation)
        }
        defer { Sodium.wipe(&der) }
        return PEMBlocks.encode(label: "PRIVATE KEY", der: der)
    }

    /// Parses a stored private key: PEM (PKCS#8, SEC1, PKCS#1) or an unencrypted OpenSSH key.
    /// Nil for anything else (public keys, encrypted keys, other curves).
    static func parse(_ data: [UInt8]) -> SigningKey? {
        guard let text = String(validating: data, as: UTF8.self), text.contains("-----BEGIN") else { return nil }
        for block in PEMBlocks.parse(text) {
            var der = block.der
            defer { Sodium.wipe(&der) }
            switch block.label {
            case "PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY":
                if der.count == 48, Array(der.prefix(16)) == ed25519PKCS8Prefix,
                    let key = try? Curve25519.Signing.PrivateKey(rawRepresentation: der.suffix(32))
                {
                    return .ed25519(key)
                }
                if let key = try? P256.Signing.PrivateKey(derRepresentation: der) { return .p256(key) }
                if let key = try? P384.Signing.PrivateKey(derRepresentation: der) { return .p384(key) }
                if let key = try? _RSA.Signing.PrivateKey(derRepresentation: der) { return .rsa(key) }
            case "OPENSSH PRIVATE KEY":
                if let key = openSSH(der) { return key }
            default: continue
            }
        }
        return nil
    }

    /// Why `parse` found no key it can use in `data`, for an error message or a log line: what
    /// the data is and what keychainfs lacks for it. Never any of the key's bytes.
    static func whyUnusable(_ data: [UInt8]) -> String { unusable(data).why }

    /// A private key file that is encrypted with a passphrase, which keychainfs cannot open:
    /// what `import` refuses, with the reason (nil for anything else).
    static func encryptedKeyRefusal(_ data: [UInt8]) -> String? {
        let (why, encrypted) = unusable(data)
        return encrypted ? why : nil
    }

    private static func unusable(_ data: [UInt8]) -> (why: String, encrypted: Bool) {
        guard let text = String(validating: data, as: UTF8.self), text.contains("-----BEGIN") else {
            return ("is not a PEM or OpenSSH private key", false)
        }
        if text.contains("Proc-Type: 4,ENCRYPTED") || text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") {
            return (
                "is a passphrase-encrypted PEM key, which keychainfs does not decrypt: store a decrypted copy (openssl pkey -in KEY -out COPY), then delete the copy",
                true
            )
        }
        for block in PEMBlocks.parse(text) where block.label == "OPENSSH PRIVATE KEY" {
            var r = OpenSSHKey.Reader(block.der)
            guard r.take(15) == Array("openssh-key-v1\0".utf8), let cipher = r.string(), let kdf = r.string() else {
                return ("is a damaged OpenSSH private key", false)
            }
            let cipherName = String(decoding: cipher, as: UTF8.self), kdfName = String(decoding: kdf, as: UTF8.self)
            if cipherName != "none" {
                return (
                    "is encrypted with a passphrase (cipher \(cipherName), KDF \(kdfName)), and keychainfs cannot decrypt OpenSSH-encrypted keys (it has no \(kdfName)_pbkdf): remove the passphrase from a copy (ssh-keygen -p -N '' -f COPY), import the copy, then delete it",
                    true
                )
            }
            _ = r.string()
            guard r.uint32() == 1, let publicBlob = r.string() else {
                return ("is a damaged OpenSSH private key", false)
            }
            var p = OpenSSHKey.Reader(publicBlob)
            let type = p.string().map { String(decoding: $0, as: UTF8.self) } ?? "?"
            return (
                "is an OpenSSH \(type) key; the agent signs with Ed25519, ECDSA P-256/P-384 and RSA keys only", false
            )
        }
        return ("is not an Ed25519, ECDSA P-256/P-384 or RSA private key", false)
    }

    /// The private half of an unencrypted `openssh-key-v1` file (PROTOCOL.key).
    private static func openSSH(_ blob: [UInt8]) -> SigningKey? {
        var r = OpenSSHKey.Reader(blob)
        guard r.take(15) == Array("openssh-key-v1\0".utf8), r.string() == Array("none".utf8),
            r.string() != nil, r.string() != nil, r.uint32() == 1, r.string() != nil, let section = r.string()
        else { return nil }
        var p = OpenSSHKey.Reader(section)
        guard let check1 = p.uint32(), check1 == p.uint32(), let type = p.string() else { return nil }
        switch String(decoding: type, as: UTF8.self) {
        case "ssh-ed25519":
            guard p.string() != nil, var secret = p.string(), secret.count == 64 else { return nil }
            defer { Sodium.wipe(&secret) }
            return (try? Curve25519.Signing.PrivateKey(rawRepresentation: secret.prefix(32))).map { .ed25519($0) }
        case "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384":
            guard let curve = p.string(), p.string() != nil, var d = p.string() else { return nil }
            defer { Sodium.wipe(&d) }
            let size = curve == Array("nistp256".utf8) ? 32 : 48
            var scalar = Array(d.drop { $0 == 0 })
            defer { Sodium.wipe(&scalar) }
            guard scalar.count <= size else { return nil }
            scalar = [UInt8](repeating: 0, count: size - scalar.count) + scalar
            if size == 32 { return (try? P256.Signing.PrivateKey(rawRepresentation: scalar)).map { .p256($0) } }
            return (try? P384.Signing.PrivateKey(rawRepresentation: scalar)).map { .p384($0) }
        case "ssh-rsa":
            guard let n = p.string(), let e = p.string(), var d = p.string(), p.string() != nil,
                var prime1 = p.string(), var prime2 = p.string()
            else { return nil }
            defer { Sodium.wipe(&d); Sodium.wipe(&prime1); Sodium.wipe(&prime2) }
            return (try? _RSA.Signing.PrivateKey(n: n, e: e, d: d, p: prime1, q: prime2)).map { .rsa($0) }
        default:
            return nil
        }
    }

    /// The SSH key type name (RFC 4253, 5656, 8709).
    var sshType: String {
        switch self {
        case .ed25519: "ssh-ed25519"
        case .p256: "ecdsa-sha2-nistp256"
        case .p384: "ecdsa-sha2-nistp384"
        case .rsa: "ssh-rsa"
        }
    }

    /// The public key blob of the SSH wire format: what the agent lists and servers compare.
    var publicBlob: [UInt8] {
        var w = SSHWire()
        w.string(sshType)
        switch self {
        case .ed25519(let key): w.string(Array(key.publicKey.rawRepresentation))
        case .p256(let key):
            w.string("nistp256")
            w.string(Array(key.publicKey.x963Representation))
        case .p384(let key):
            w.string("nistp384")
            w.string(Array(key.publicKey.x963Representation))
        case .rsa(let key):
            // The primitives of a valid key are always available.
            let primitives = try? key.publicKey.getKeyPrimitives()
            w.mpint(Array(primitives?.publicExponent ?? Data()))
            w.mpint(Array(primitives?.modulus ?? Data()))
        }
        return w.bytes
    }

    /// One line of `authorized_keys` / `.pub` form: `ssh-ed25519 AAAA… comment`.
    func publicLine(comment: String) -> String {
        let oneLine = comment.filter { !$0.isNewline }
        return "\(sshType) \(Data(publicBlob).base64EncodedString())" + (oneLine.isEmpty ? "" : " \(oneLine)")
    }

    /// SSH agent signature flags (draft-miller-ssh-agent): the RSA hash to use.
    static let flagRSASHA256: UInt32 = 2, flagRSASHA512: UInt32 = 4

    /// An SSH signature blob (string algorithm, string signature) over `data`. RSA signs with
    /// SHA-512 or SHA-256 as the flags ask; plain `ssh-rsa` (SHA-1) is refused.
    func sign(_ data: [UInt8], flags: UInt32) throws -> [UInt8] {
        var w = SSHWire()
        switch self {
        case .ed25519(let key):
            w.string(sshType)
            w.string(Array(try key.signature(for: data)))
        case .p256(let key):
            w.string(sshType)
            w.string(Self.ecdsaSignature(Array(try key.signature(for: data).rawRepresentation)))
        case .p384(let key):
            w.string(sshType)
            w.string(Self.ecdsaSignature(Array(try key.signature(for: data).rawRepresentation)))
        case .rsa(let key):
            let signature: _RSA.Signing.RSASignature
            if flags & Self.flagRSASHA512 != 0 {
                w.string("rsa-sha2-512")
                signature = try key.signature(for: SHA512.hash(data: data), padding: .insecurePKCS1v1_5)
            } else if flags & Self.flagRSASHA256 != 0 {
                w.string("rsa-sha2-256")
                signature = try key.signature(for: SHA256.hash(data: data), padding: .insecurePKCS1v1_5)
            } else {
                throw KeychainError(.param, "ssh-rsa signatures (SHA-1) are not made: ask for rsa-sha2-256 or -512")
            }
            w.string(Array(signature.rawRepresentation))
        }
        return w.bytes
    }

    /// ECDSA's r||s as SSH wants it: mpint r, mpint s (RFC 5656 3.1.2).
    private static func ecdsaSignature(_ raw: [UInt8]) -> [UInt8] {
        var w = SSHWire()
        w.mpint(Array(raw.prefix(raw.count / 2)))
        w.mpint(Array(raw.suffix(raw.count / 2)))
        return w.bytes
    }
}

/// Why `import` refuses a private key file: it is encrypted with a passphrase keychainfs cannot
/// open (nil: not an encrypted key). The reason names the cipher and what to do, never a byte
/// of the key.
public func encryptedPrivateKeyRefusal(_ data: [UInt8]) -> String? { SigningKey.encryptedKeyRefusal(data) }

/// How OpenSSH names a public key: `SHA256:` and the unpadded base64 of the blob's SHA-256.
public func sshFingerprint(_ publicBlob: [UInt8]) -> String {
    "SHA256:" + Data(SHA256.hash(data: publicBlob)).base64EncodedString().replacing("=", with: "")
}

/// The SSH wire encoding (RFC 4251 5): uint32, string, mpint.
public struct SSHWire: Sendable {
    public private(set) var bytes: [UInt8] = []
    public init() {}

    public mutating func byte(_ b: UInt8) { bytes.append(b) }
    public mutating func uint32(_ v: UInt32) {
        bytes += [UInt8(v >> 24), UInt8((v >> 16) & 0xff), UInt8((v >> 8) & 0xff), UInt8(v & 0xff)]
    }
    public mutating func string(_ b: [UInt8]) {
        uint32(UInt32(b.count))
        bytes += b
    }
    public mutating func string(_ s: String) { string(Array(s.utf8)) }
    /// Unsigned big-endian magnitude: leading zeros dropped, a zero byte added when the top bit is set.
    public mutating func mpint(_ magnitude: [UInt8]) {
        var v = Array(magnitude.drop { $0 == 0 })
        if let first = v.first, first & 0x80 != 0 { v.insert(0, at: 0) }
        string(v)
    }
}

/// Checks an SSH signature blob by a public key blob (a server's host key signing the session
/// identifier in `session-bind@openssh.com`). Ed25519, ECDSA P-256/P-384, RSA SHA-256/512.
public func sshSignatureIsValid(publicKey: [UInt8], signature: [UInt8], data: [UInt8]) -> Bool {
    var key = OpenSSHKey.Reader(publicKey)
    var sig = OpenSSHKey.Reader(signature)
    guard let keyType = key.string().map({ String(decoding: $0, as: UTF8.self) }),
        let algorithm = sig.string().map({ String(decoding: $0, as: UTF8.self) }), let raw = sig.string()
    else { return false }
    switch (keyType, algorithm) {
    case ("ssh-ed25519", "ssh-ed25519"):
        guard let point = key.string(), let pub = try? Curve25519.Signing.PublicKey(rawRepresentation: point) else {
            return false
        }
        return pub.isValidSignature(raw, for: data)
    case ("ecdsa-sha2-nistp256", "ecdsa-sha2-nistp256"), ("ecdsa-sha2-nistp384", "ecdsa-sha2-nistp384"):
        let size = keyType.hasSuffix("256") ? 32 : 48
        var mpints = OpenSSHKey.Reader(raw)
        guard key.string() != nil, let point = key.string(), let r = mpints.string(), let s = mpints.string(),
            let rs = fixedWidth(r, size).flatMap({ r in fixedWidth(s, size).map { r + $0 } })
        else { return false }
        if size == 32 {
            guard let pub = try? P256.Signing.PublicKey(x963Representation: point),
                let signature = try? P256.Signing.ECDSASignature(rawRepresentation: rs)
            else { return false }
            return pub.isValidSignature(signature, for: data)
        }
        guard let pub = try? P384.Signing.PublicKey(x963Representation: point),
            let signature = try? P384.Signing.ECDSASignature(rawRepresentation: rs)
        else { return false }
        return pub.isValidSignature(signature, for: data)
    case ("ssh-rsa", "rsa-sha2-256"), ("ssh-rsa", "rsa-sha2-512"):
        guard let e = key.string(), let n = key.string(), let pub = try? _RSA.Signing.PublicKey(n: n, e: e) else {
            return false
        }
        let signature = _RSA.Signing.RSASignature(rawRepresentation: raw)
        return algorithm == "rsa-sha2-512"
            ? pub.isValidSignature(signature, for: SHA512.hash(data: data), padding: .insecurePKCS1v1_5)
            : pub.isValidSignature(signature, for: SHA256.hash(data: data), padding: .insecurePKCS1v1_5)
    default:
        return false
    }
}

/// An mpint's magnitude as exactly `width` big-endian bytes, or nil if it does not fit.
private func fixedWidth(_ mpint: [UInt8], _ width: Int) -> [UInt8]? {
    let magnitude = Array(mpint.drop { $0 == 0 })
    guard magnitude.count <= width else { return nil }
    return [UInt8](repeating: 0, count: width - magnitude.count) + magnitude
}
