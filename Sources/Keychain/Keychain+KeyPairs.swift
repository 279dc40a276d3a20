import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

// Key pairs made in the vault (SecKeyCreateRandomKey), non-extractable keys
// (kSecAttrIsExtractable false), and using a key without handing it out (SecKeyCreateSignature):
// a non-extractable private key is decrypted only here, for one signature or to derive its
// public key, and never returned to a face.

extension KeychainItem {
    /// kSecAttrIsExtractable: a key's private bytes may be read. True unless set to false.
    public var isExtractable: Bool {
        if itemClass == .key, case .bool(false)? = attributes[Schema.isExtractable] { return false }
        return true
    }
}

extension Keychain {
    /// SecKeyCreateRandomKey: a new private key stored as a key item (PKCS#8 PEM), not
    /// extractable unless `attributes` says isExtractable = true. Returns the item (no data).
    @discardableResult
    public func createKeyPair(
        _ algorithm: KeyAlgorithm, _ given: Attributes, caller callerArgument: Caller? = nil
    ) throws -> KeychainItem {
        var attributes = given
        if attributes[Schema.isExtractable] == nil { attributes[Schema.isExtractable] = .bool(false) }
        for (name, value) in [("canSign", true), ("canVerify", false), ("isPermanent", true)]
        where attributes[Schema.named(name)] == nil {
            attributes[Schema.named(name)] = .bool(value)
        }
        var data = try SigningKey.generate(algorithm)
        defer { Sodium.wipe(&data) }
        return try add(.key, attributes, data: data, in: callContext(callerArgument))
    }

    /// What a read of a key's data returns: the bytes as stored, or for a non-extractable key
    /// its public key in OpenSSH form (one line). The private bytes are wiped here.
    func readableData(_ item: KeychainItem, _ data: [UInt8]) throws -> [UInt8] {
        guard !item.isExtractable else { return data }
        var data = data
        defer { Sodium.wipe(&data) }
        guard let key = SigningKey.parse(data) else {
            throw KeychainError(.decode, "\(item.summary) is not extractable and its key cannot be read")
        }
        return Array((key.publicLine(comment: item.string(Schema.label) ?? "") + "\n").utf8)
    }

    /// The length a read returns, known without decrypting (a file's size): the stored length,
    /// or for a non-extractable key the length of its public key line, which its attributes
    /// (key type, size, label) fix.
    static func readableLength(_ itemClass: ItemClass, _ attributes: Attributes, stored sealedLength: Int) -> Int {
        let stored = max(0, sealedLength - AEAD.overhead - SecretExtras.storedOverhead(attributes))
        let item = KeychainItem(id: 0, itemClass: itemClass, attributes: attributes, data: nil)
        guard !item.isExtractable, case .number(let bits)? = attributes[Schema.named("keySizeInBits")] else {
            return stored
        }
        let typeName: String
        let blob: Int
        switch attributes[Schema.named("keyType")] {
        case .number(KeyData.typeRSA)?:
            // string "ssh-rsa", mpint e (65537), mpint n (its top bit set: one zero byte more).
            typeName = "ssh-rsa"
            blob = 4 + 7 + 4 + 3 + 4 + Int(bits) / 8 + 1
        case .number(KeyData.typeEC)?:
            // string type, string curve, string Q (uncompressed point).
            typeName = "ecdsa-sha2-nistp\(bits)"
            blob = 4 + typeName.utf8.count + 4 + 8 + 4 + 1 + 2 * ((Int(bits) + 7) / 8)
        default:
            typeName = "ssh-ed25519"
            blob = 4 + 11 + 4 + 32
        }
        let label = (item.string(Schema.label) ?? "").filter { !$0.isNewline }
        return typeName.utf8.count + 1 + (blob + 2) / 3 * 4 + (label.isEmpty ? 0 : 1 + label.utf8.count) + 1
    }

    /// Refuses what would let a non-extractable key's private bytes out or replace them:
    /// new data, and isExtractable turned back on (once off, like Apple's, it stays off).
    static func checkNonExtractableUpdate(_ old: KeychainItem, changes: Attributes, newData: Bool) throws {
        guard !old.isExtractable else { return }
        if newData {
            throw KeychainError(.readOnly, "\(old.summary) is not extractable: its key cannot be replaced")
        }
        if case .bool(true)? = changes[Schema.isExtractable] {
            throw KeychainError(.readOnlyAttr, "\(old.summary) is not extractable and cannot be made extractable")
        }
    }

    /// A key added non-extractable must be one the core can use, or nothing could ever read
    /// or use it.
    static func checkNonExtractableAdd(_ attributes: Attributes, data: [UInt8]) throws {
        guard case .bool(false)? = attributes[Schema.isExtractable] else { return }
        guard SigningKey.parse(data) != nil else {
            throw KeychainError(
                .param,
                "a non-extractable key must be an unencrypted Ed25519, ECDSA P-256/P-384 or RSA private key; this one \(SigningKey.whyUnusable(data))"
            )
        }
    }
}
