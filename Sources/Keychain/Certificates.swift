import FoundationEssentials
import Glibc
import X509
import SwiftASN1
import Crypto
import _CryptoExtras

/// Certificates: Apple stores a certificate's DER as its data and derives the searchable
/// attributes from it. keychainfs does the same, accepting PEM or DER on the way in.
public enum CertificateData {
    /// CSSM_CERT_X_509v1/v3 and CSSM_CERT_ENCODING_DER, Apple's values for ctyp and cenc.
    static let x509v1: Int64 = 1, x509v3: Int64 = 3, encodingDER: Int64 = 3

    /// The DER of a certificate given as DER or as PEM (the first CERTIFICATE block).
    /// Anything else is errSecParam, and nothing is stored.
    public static func der(from input: [UInt8]) throws -> [UInt8] {
        if let text = String(validating: input, as: UTF8.self), text.contains("-----BEGIN") {
            guard let block = PEMBlocks.parse(text).first(where: { $0.label == "CERTIFICATE" }) else {
                throw KeychainError(.param, "not a certificate: no CERTIFICATE block in the PEM input")
            }
            _ = try parse(block.der)
            return block.der
        }
        _ = try parse(input)
        return input
    }

    static func parse(_ der: [UInt8]) throws -> Certificate {
        do { return try Certificate(derEncoded: der) } catch {
            throw KeychainError(.param, "not a certificate: the data is not a DER or PEM X.509 certificate")
        }
    }

    /// The attributes Apple derives from a certificate, all read-only.
    static func derivedAttributes(_ der: [UInt8]) throws -> Attributes {
        let cert = try parse(der)
        func serialize<T: DERSerializable>(_ value: T) throws -> [UInt8] {
            var s = DER.Serializer()
            try s.serialize(value)
            return s.serializedBytes
        }
        var out = Attributes()
        out[Schema.named("certificateType")] = .number(cert.version == .v1 ? x509v1 : x509v3)
        out[Schema.named("certificateEncoding")] = .number(encodingDER)
        out[Schema.named("subject")] = .data(try serialize(cert.subject))
        out[Schema.named("issuer")] = .data(try serialize(cert.issuer))
        out[Schema.named("serialNumber")] = .data(Array(cert.serialNumber.bytes))
        if let skid = try? cert.extensions.subjectKeyIdentifier {
            out[Schema.named("subjectKeyID")] = .data(Array(skid.keyIdentifier))
        }
        out[Schema.named("publicKeyHash")] = .data(sha1(Array(cert.publicKey.subjectPublicKeyInfoBytes)))
        return out
    }

    /// The subject's common name: the CLI's default label.
    public static func commonName(_ der: [UInt8]) -> String? {
        guard let cert = try? Certificate(derEncoded: der) else { return nil }
        for rdn in cert.subject {
            for attribute in rdn where attribute.type == .RDNAttributeType.commonName {
                return attribute.value.description
            }
        }
        return nil
    }

    /// The PEM form, which is what `openssl x509 -in`, `curl --cacert` and Python `ssl` read.
    public static func pem(_ der: [UInt8]) -> [UInt8] {
        PEMBlocks.encode(label: "CERTIFICATE", der: der)
    }

    /// SHA-1 of a certificate's DER: what `security find-certificate -Z` prints.
    public static func fingerprint(_ der: [UInt8]) -> [UInt8] { sha1(der) }

    static func sha1(_ bytes: [UInt8]) -> [UInt8] { Array(Insecure.SHA1.hash(data: bytes)) }
}

/// Private and public keys: the bytes written are the bytes read (so ssh and openssl accept
/// them); the attributes Apple would have are derived where the format allows.
public enum KeyData {
    /// kSecAttrKeyClass values.
    static let classPublic: Int64 = 0, classPrivate: Int64 = 1, classSymmetric: Int64 = 2
    /// kSecAttrKeyType values: RSA 42, EC (SECPrimeRandom) 73. Apple has no key type for
    /// Ed25519 in SecItem; keychainfs leaves keyType unset for it.
    static let typeRSA: Int64 = 42, typeEC: Int64 = 73

    struct Derived {
        var keyClass: Int64
        var keyType: Int64?
        var bits: Int64
        /// SHA-1 of the public key in the form a certificate's publicKeyHash uses, so that a key
        /// and its certificate pair up as an identity.
        var applicationLabel: [UInt8]
    }

    static func derive(_ bytes: [UInt8]) -> Derived? {
        guard let text = String(validating: bytes, as: UTF8.self), text.contains("-----BEGIN") else { return nil }
        for block in PEMBlocks.parse(text) {
            switch block.label {
            case "OPENSSH PRIVATE KEY":
                if let d = OpenSSHKey.derive(block.der) { return d }
            case "PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY":
                let pem = String(decoding: PEMBlocks.encode(label: block.label, der: block.der), as: UTF8.self)
                if let key = try? Certificate.PrivateKey(pemEncoded: pem) {
                    let pub = key.publicKey
                    let keyBytes = Array(pub.subjectPublicKeyInfoBytes)
                    var type: Int64? = nil
                    var bits: Int64 = 0
                    if let rsa = _RSA.Signing.PublicKey(pub) {
                        type = typeRSA; bits = Int64(rsa.keySizeInBits)
                    } else if P256.Signing.PublicKey(pub) != nil {
                        type = typeEC; bits = 256
                    } else if P384.Signing.PublicKey(pub) != nil {
                        type = typeEC; bits = 384
                    } else if P521.Signing.PublicKey(pub) != nil {
                        type = typeEC; bits = 521
                    } else if Curve25519.Signing.PublicKey(pub) != nil {
                        bits = 256
                    }
                    return Derived(
                        keyClass: classPrivate, keyType: type, bits: bits,
                        applicationLabel: CertificateData.sha1(keyBytes))
                }
            case "PUBLIC KEY":
                if let pub = try? Certificate.PublicKey(derEncoded: block.der) {
                    let keyBytes = Array(pub.subjectPublicKeyInfoBytes)
                    var type: Int64? = nil
                    var bits: Int64 = 256
                    if let rsa = _RSA.Signing.PublicKey(pub) {
                        type = typeRSA; bits = Int64(rsa.keySizeInBits)
                    } else if P256.Signing.PublicKey(pub) != nil {
                        type = typeEC
                    } else if P384.Signing.PublicKey(pub) != nil {
                        type = typeEC; bits = 384
                    }
                    return Derived(
                        keyClass: classPublic, keyType: type, bits: bits,
                        applicationLabel: CertificateData.sha1(keyBytes))
                }
            default: continue
            }
        }
        return nil
    }

    /// Attributes to add for key data, leaving alone any the caller set.
    static func derivedAttributes(_ bytes: [UInt8], given: Attributes) -> Attributes {
        guard let d = derive(bytes) else { return [:] }
        var out = Attributes()
        func setIfAbsent(_ name: String, _ value: AttributeValue) {
            let a = Schema.named(name)
            if given[a] == nil { out[a] = value }
        }
        setIfAbsent("keyClass", .number(d.keyClass))
        if let t = d.keyType { setIfAbsent("keyType", .number(t)) }
        setIfAbsent("keySizeInBits", .number(d.bits))
        setIfAbsent("effectiveKeySize", .number(d.bits))
        setIfAbsent("applicationLabel", .data(d.applicationLabel))
        return out
    }
}

/// The public half of an `openssh-key-v1` private key file: readable without the passphrase.
enum OpenSSHKey {
    static func derive(_ blob: [UInt8]) -> KeyData.Derived? {
        var r = Reader(blob)
        guard r.take(15) == Array("openssh-key-v1\0".utf8),
            r.string() != nil, r.string() != nil, r.string() != nil,  // cipher, kdf, kdf options
            let n = r.uint32(), n >= 1, let pub = r.string()
        else { return nil }
        var p = Reader(pub)
        guard let type = p.string().flatMap({ String(bytes: $0, encoding: .utf8) }) else { return nil }
        switch type {
        case "ssh-ed25519":
            guard let key = p.string(), key.count == 32 else { return nil }
            return .init(
                keyClass: KeyData.classPrivate, keyType: nil, bits: 256, applicationLabel: CertificateData.sha1(key))
        case "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521":
            guard p.string() != nil, let point = p.string() else { return nil }
            let bits: Int64 = type.hasSuffix("256") ? 256 : type.hasSuffix("384") ? 384 : 521
            return .init(
                keyClass: KeyData.classPrivate, keyType: KeyData.typeEC, bits: bits,
                applicationLabel: CertificateData.sha1(point))
        case "ssh-rsa":
            guard let e = p.string(), let n = p.string() else { return nil }
            // Apple's RSA applicationLabel: SHA-1 of the PKCS#1 RSAPublicKey DER.
            let der = DERBytes.sequence(DERBytes.integer(n) + DERBytes.integer(e))
            let modulusBits = Int64((n.drop { $0 == 0 }.count) * 8)
            return .init(
                keyClass: KeyData.classPrivate, keyType: KeyData.typeRSA, bits: modulusBits,
                applicationLabel: CertificateData.sha1(der))
        default:
            return nil
        }
    }

    struct Reader {
        let bytes: [UInt8]
        var i = 0
        init(_ b: [UInt8]) { bytes = b }
        mutating func take(_ n: Int) -> [UInt8]? {
            guard n >= 0, i + n <= bytes.count else { return nil }
            defer { i += n }
            return Array(bytes[i..<(i + n)])
        }
        mutating func uint32() -> Int? {
            guard let b = take(4) else { return nil }
            return b.reduce(0) { $0 << 8 | Int($1) }
        }
        mutating func string() -> [UInt8]? {
            guard let n = uint32() else { return nil }
            return take(n)
        }
    }
}

/// Minimal DER writing for the one structure built by hand (RSAPublicKey).
enum DERBytes {
    static func length(_ n: Int) -> [UInt8] {
        if n < 128 { return [UInt8(n)] }
        var bytes: [UInt8] = []
        var v = n
        while v > 0 { bytes.insert(UInt8(v & 0xff), at: 0); v >>= 8 }
        return [0x80 | UInt8(bytes.count)] + bytes
    }
    static func integer(_ mpint: [UInt8]) -> [UInt8] {
        var v = Array(mpint.drop { $0 == 0 })
        if v.isEmpty { v = [0] }
        if v[0] & 0x80 != 0 { v.insert(0, at: 0) }
        return [0x02] + length(v.count) + v
    }
    static func sequence(_ content: [UInt8]) -> [UInt8] { [0x30] + length(content.count) + content }
}

/// PEM blocks (RFC 7468): label and DER bytes.
public enum PEMBlocks {
    public struct Block { public let label: String; public let der: [UInt8] }

    public static func parse(_ text: String) -> [Block] {
        var blocks: [Block] = []
        var label: String?
        var body = ""
        for raw in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline) {
            let line = raw.trimmingWhitespace()
            if line.hasPrefix("-----BEGIN "), line.hasSuffix("-----") {
                label = String(line.dropFirst(11).dropLast(5))
                body = ""
            } else if let l = label, line == "-----END \(l)-----" {
                if let der = Data(base64Encoded: body) { blocks.append(Block(label: l, der: Array(der))) }
                label = nil
            } else if label != nil, !line.contains(":") {
                body += line
            }
        }
        return blocks
    }

    public static func encode(label: String, der: [UInt8]) -> [UInt8] {
        let b64 = Data(der).base64EncodedString()
        var out = "-----BEGIN \(label)-----\n"
        var i = b64.startIndex
        while i < b64.endIndex {
            let j = b64.index(i, offsetBy: 64, limitedBy: b64.endIndex) ?? b64.endIndex
            out += b64[i..<j] + "\n"
            i = j
        }
        out += "-----END \(label)-----\n"
        return Array(out.utf8)
    }
}
