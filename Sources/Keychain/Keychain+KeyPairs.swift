import Foundation
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

/// A key the ssh agent can offer: its id, label, access group and SSH public key blob.
public struct SSHIdentity: Sendable, Equatable {
    public let id: Int64
    public let label: String
    public let accessGroup: String
    public let publicBlob: [UInt8]
    public let publicLine: String
    /// The key's `sshHosts` attribute: the hosts it is offered to (empty: any).
    public let hosts: String
}

/// The keys the agent can offer, and the private keys it cannot use with why (for its log).
public struct SSHIdentityListing: Sendable {
    public var identities: [SSHIdentity] = []
    public var skipped: [(id: Int64, why: String)] = []
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
        let stored = max(0, sealedLength - AEAD.overhead)
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

    /// The private keys the caller can see that the ssh agent can use, with their public keys.
    /// Needs the vault unlocked and each key's class key, never user presence: a public key is
    /// not a secret, and listing must not prompt once per key.
    ///
    /// One key that cannot be used (damaged, encrypted, of a type the agent lacks) is skipped
    /// and named in `skipped`, never a failure of the whole listing.
    public func sshIdentities(caller callerArgument: Caller? = nil) throws -> SSHIdentityListing {
        let call = callContext(callerArgument)
        let caller = call.caller
        let keys = try call.unlockedKeys()
        let query = Query(
            .key, [Schema.named("keyClass"): .number(KeyData.classPrivate)], matchLimit: .all, synchronizableAny: true)
        var out = SSHIdentityListing()
        for (row, attributes) in try matches(query, caller: caller, keys: keys, withData: true) {
            let item = KeychainItem(id: row.id, itemClass: .key, attributes: attributes, data: nil)
            guard (try? classKey(item.accessibility, keys: keys, for: item.summary)) != nil else { continue }
            var data: [UInt8]
            do {
                data = try openData(
                    row, item: item, keys: keys, caller: caller.granting(presenceFor: row.id), ui: .fail)
            } catch let error as KeychainError where error.status == .decode {
                out.skipped.append((row.id, "\(item.summary) cannot be decrypted (damaged or tampered)"))
                continue
            }
            defer { Sodium.wipe(&data) }
            guard let key = SigningKey.parse(data) else {
                out.skipped.append((row.id, "\(item.summary): \(SigningKey.whyUnusable(data))"))
                continue
            }
            let label = item.string(Schema.label) ?? ""
            out.identities.append(
                SSHIdentity(
                    id: row.id, label: label, accessGroup: item.accessGroup, publicBlob: key.publicBlob,
                    publicLine: key.publicLine(comment: label), hosts: item.string(Schema.named("sshHosts")) ?? ""))
        }
        return out
    }

    /// SecKeyCreateSignature for the ssh agent: an SSH signature blob by the key with this id,
    /// after the checks of a read (visibility, lock state, user presence through `ui`).
    public func sshSign(
        keyID: Int64, data: [UInt8], flags: UInt32, caller callerArgument: Caller? = nil,
        ui: AuthenticationUI? = nil
    ) throws -> [UInt8] {
        let call = callContext(callerArgument)
        var privateBytes =
            try item(id: keyID, itemClass: .key, synchronizable: true, withData: true, in: call, ui: ui, raw: true).data
            ?? []
        defer { Sodium.wipe(&privateBytes) }
        guard let key = SigningKey.parse(privateBytes) else {
            throw KeychainError(.param, "key item \(keyID) is not a private key the agent can sign with")
        }
        return try key.sign(data, flags: flags)
    }
}
