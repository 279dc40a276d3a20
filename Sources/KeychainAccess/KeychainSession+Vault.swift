import FoundationEssentials
import Glibc
import Keychain
import KeychainCrypto

// The door's vault verbs (docs/service.md): what the CLI's certificate, key, import, access
// policy and backup verbs need beyond find, add, update and delete. Each is the core's own verb
// for the session's caller; the keychain rules stay in `Keychain`.

extension KeychainDoor {
    /// What an identity is as one file: the certificate as PEM followed by the private key's
    /// bytes, both read through the door (visibility, lock state, user presence), as the core's
    /// `identityBundle` reads them.
    public func identityBundle(_ identity: Keychain.Identity) throws -> [UInt8] {
        let certificate = try item(id: identity.certificate.id, itemClass: .certificate, withData: true)
        let key = try item(id: identity.key.id, itemClass: .key, withData: true)
        return CertificateData.pem(certificate.data ?? []) + (key.data ?? [])
    }
}

extension KeychainSession {
    /// A listing names no secret: like a search that found several, it is audited as one search.
    public func identities() throws -> [Keychain.Identity] {
        do {
            let found = try keychain.identities(caller: caller)
            record(nil, .search, allowed: true, count: found.count)
            return found
        } catch let e as KeychainError {
            record(nil, .search, e)
            throw e
        }
    }

    public func createKeyPair(_ algorithm: KeyAlgorithm, _ attributes: Attributes) throws -> (
        item: KeychainItem, publicKey: String
    ) {
        let item: KeychainItem
        do {
            item = try keychain.createKeyPair(algorithm, attributes, caller: caller)
            record(item.id, .create, allowed: true)
        } catch let e as KeychainError {
            record(nil, .create, e)
            throw e
        }
        let publicKey = try keychain.sshIdentities(caller: caller).identities.first { $0.id == item.id }?.publicLine
        return (item, publicKey ?? "")
    }

    /// Audited as one create line and one update line for the batch, with their counts; a
    /// refused batch stored nothing and is audited as refused with the first refusal's status.
    public func storeBatch(_ items: [NewItem], updateExisting: Bool) throws -> [Bool] {
        try storeBatch(items, updateExisting: updateExisting, progress: nil)
    }

    /// `storeBatch`, telling `progress` how many items are done (a command's progress line).
    public func storeBatch(_ items: [NewItem], updateExisting: Bool, progress: ((Int) -> Void)?) throws -> [Bool] {
        do {
            let added = try keychain.storeBatch(
                items, updateExisting: updateExisting, caller: caller, progress: progress)
            let adds = added.filter { $0 }.count
            if adds > 0 { record(nil, .create, allowed: true, count: adds) }
            if adds < added.count { record(nil, .update, allowed: true, count: added.count - adds) }
            return added
        } catch let refused as BatchRefused {
            if let first = refused.refusals.first { record(nil, .create, first.error) }
            throw refused
        } catch let e as KeychainError {
            record(nil, .create, e)
            throw e
        }
    }

    public func accessPolicy() throws -> AccessPolicy { try keychain.accessPolicy() }

    public func setAccessPolicy(_ policy: AccessPolicy, passphrase: SecureBytes) throws {
        try keychain.setAccessPolicy(policy, passphrase: passphrase)
    }

    /// The copy is made from the vault as this process opened it (`VACUUM INTO` on its own
    /// connection to the same file name), so every commit this process made is in it.
    public func backup(to destination: String) throws -> BackupSummary {
        try Keychain.backup(from: keychain.path, to: destination)
    }
}
