import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

// The signed access policy stored in the vault (which executables are in which groups).

extension Keychain {
    // MARK: Access policy

    static func policyKeyPair(master: SecureBytes) throws -> ([UInt8], SecureBytes) {
        try Signing.keyPair(
            seed: try KeyDerivation.subkey(of: master, id: Subkey.policySigning.rawValue, context: Subkey.context))
    }

    private var policyAD: [UInt8] { Framing.frame([Framing.text("kcfs/access-policy/v1"), vaultID]) }

    /// The stored access policy (empty when none was ever set). A policy whose signature or
    /// encryption does not verify is errSecDecode: it is never silently ignored.
    public func accessPolicy() throws -> AccessPolicy {
        let keys = try currentKeys()
        guard let stored = try storeCall({ try store.lookup { try $0.meta("access_policy") } }) else {
            return AccessPolicy()
        }
        guard let policy = openPolicy(stored, publicKey: keys.policyPublicKey, metadataKey: keys.metadata) else {
            throw KeychainError(.decode, "the access policy in the vault does not verify: it was altered")
        }
        return policy
    }

    /// The stored form of a policy: encrypted under the metadata key, then signed.
    func sealedPolicy(_ policy: AccessPolicy, metadataKey: SecureBytes, signingKey: SecureBytes) throws -> [UInt8] {
        let box = try AEAD.seal(policy.encoded, associatedData: policyAD, key: metadataKey)
        return Signing.sign(box, secretKey: signingKey) + box
    }

    /// The policy in a stored blob, if its signature verifies and its box opens.
    func openPolicy(_ stored: [UInt8], publicKey: [UInt8], metadataKey: SecureBytes) -> AccessPolicy? {
        guard stored.count > Signing.signatureBytes else { return nil }
        let signature = Array(stored[0..<Signing.signatureBytes]), box = Array(stored[Signing.signatureBytes...])
        guard Signing.verify(signature, box, publicKey: publicKey),
            let plain = try? AEAD.open(box, associatedData: policyAD, key: metadataKey)
        else { return nil }
        return AccessPolicy(encoded: plain)
    }

    /// Replaces the access policy. Needs the passphrase: the policy is signed with a key
    /// only the master key yields.
    public func setAccessPolicy(_ policy: AccessPolicy, passphrase: SecureBytes) throws {
        let keys = try currentKeys()
        let master = try refreshedHeader().unwrapMaster(passphrase: passphrase)
        let (_, secretKey) = try Self.policyKeyPair(master: master)
        let blob = try sealedPolicy(policy, metadataKey: keys.metadata, signingKey: secretKey)
        // The manifest covers the policy too (the transaction's writer records its entry), so
        // an older signed policy replayed into the file is detected at unlock.
        try writeTransaction(keys: keys.manifest) { try $0.setMeta("access_policy", blob) }
    }

    /// Remembers a presence prompt's "Always allow": `executable` may use item `itemID` without
    /// asking again. Needs the passphrase, as every policy change does: a process of the user
    /// that could write the vault file cannot grant itself an item.
    public func rememberPresence(executable: String, itemID: Int64, passphrase: SecureBytes) throws {
        var policy = try accessPolicy()
        policy.remember(executable: executable, itemID: itemID)
        try setAccessPolicy(policy, passphrase: passphrase)
    }
}
