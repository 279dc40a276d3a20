import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore
import Synchronization

// What the ssh agent asks of the vault: the keys a caller may use, listed from their stored
// public halves, and a signature by the one key a public key names, found through the
// attribute index. No private key is decrypted to list, and only the key that signs is
// decrypted to sign (docs/ssh.md, "What the agent stores").

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

extension KeyData {
    static let sshPublicKey = Schema.named("sshPublicKey")
    static let sshUnusable = Schema.named("sshUnusable")
    /// The attribute index's name for a key's public half: its tag's value is the key's
    /// fingerprint (`SHA256:…`), so a sign request finds the key by one indexed lookup.
    static let sshIndexName = "sshPublicKey"

    /// Sets a key item's ssh halves from its data: the SSH public key blob when the agent can
    /// sign with it, else why not. Whatever the caller gave for either is replaced: both are
    /// derived. The private bytes are parsed here and wiped with the parsed key.
    static func setSSHHalves(_ attributes: inout Attributes, data: [UInt8]) {
        attributes[sshPublicKey] = nil
        attributes[sshUnusable] = nil
        if let key = SigningKey.parse(data) {
            attributes[sshPublicKey] = .data(key.publicBlob)
        } else {
            attributes[sshUnusable] = .string(SigningKey.whyUnusable(data))
        }
    }

    /// Whether a key item's halves were set (every key stored since they exist; older items
    /// are filled in at their first listing).
    static func hasSSHHalves(_ attributes: Attributes) -> Bool {
        attributes[sshPublicKey] != nil || attributes[sshUnusable] != nil
    }

    /// The attribute-index tags of a key item: one for its public half, none without one.
    static func sshTags(_ attributes: Attributes, group: String, key: SecureBytes) -> [[UInt8]] {
        guard case .data(let blob)? = attributes[sshPublicKey], !blob.isEmpty else { return [] }
        return [
            Keychain.attributeTag(.key, group: group, name: sshIndexName, value: sshFingerprint(blob), key: key)
        ]
    }
}

/// The ssh agent's listings kept while the vault has not changed: ssh lists the keys on every
/// connection, and a listing decrypts every visible key's attributes. Kept per set of access
/// groups, with the vault's change stamp (`ItemStore.changeStamp`: any commit, by any process,
/// changes it) and the protection class of each key, which is checked again at every use (a lock
/// takes class keys away without a commit). Public keys and labels only; at most 16 sets.
final class SSHListings: Sendable {
    struct Entry {
        let stamp: [Int64]
        let identities: [(Accessibility, SSHIdentity)]
        let skipped: [(Accessibility, Int64, String)]
    }
    private let entries = Mutex<[[String]: Entry]>([:])

    func entry(_ groups: [String], stamp: [Int64]) -> Entry? {
        entries.withLock { $0[groups] }.flatMap { $0.stamp == stamp ? $0 : nil }
    }

    /// Forgets every listing (a key was committed: `commitBatch`).
    func removeAll() { entries.withLock { $0.removeAll() } }

    func keep(_ groups: [String], _ entry: Entry) {
        entries.withLock {
            if $0.count >= 16 { $0.removeAll() }
            $0[groups] = entry
        }
    }
}

extension Keychain {
    private static let privateKeys = Query(
        .key, [Schema.named("keyClass"): .number(KeyData.classPrivate)], matchLimit: .all, synchronizableAny: true)

    /// The private keys the caller can see that the ssh agent can use, with their public keys,
    /// from the public halves stored in their attributes: no private key is decrypted (except,
    /// once, a key stored before the halves existed, whose halves are then filled in). Needs
    /// the vault unlocked and each key's class key, never user presence.
    ///
    /// A key that cannot be used (encrypted, of a type the agent lacks, damaged) is skipped and
    /// named in `skipped`, never a failure of the whole listing.
    public func sshIdentities(caller callerArgument: Caller? = nil) throws -> SSHIdentityListing {
        let call = callContext(callerArgument)
        let keys = try call.unlockedKeys()
        let groups = call.caller.accessGroups
        // The stamp is read before the rows: a commit after it changes it, so a listing kept
        // under it is never older than the state the stamp names.
        let stamp = try changeStamp()
        var entry = sshListings.entry(groups, stamp: stamp)
        if entry == nil {
            try requireEveryBucketVerified()
            entry = try listSSHKeys(caller: call.caller, keys: keys)
            if let entry {
                sshListings.keep(
                    groups, SSHListings.Entry(stamp: stamp, identities: entry.identities, skipped: entry.skipped))
            }
        } else {
            try requireEveryBucketVerified()
        }
        var out = SSHIdentityListing()
        for (protection, identity) in entry!.identities where keys.classKeys[protection] != nil {
            out.identities.append(identity)
        }
        for (protection, id, why) in entry!.skipped where keys.classKeys[protection] != nil {
            out.skipped.append((id, why))
        }
        return out
    }

    /// The listing from the rows, each key's protection class beside it; a key stored before the
    /// halves existed is filled in first (a commit: the entry made here is then kept under a
    /// stamp that no longer holds, and is made again at the next listing).
    private func listSSHKeys(caller: Caller, keys: Keys) throws -> SSHListings.Entry {
        var found = try matches(Self.privateKeys, caller: caller, keys: keys, withData: false)
        let unfilled = found.filter { !KeyData.hasSSHHalves($0.1) }.map(\.0.id)
        var identities: [(Accessibility, SSHIdentity)] = []
        var skipped: [(Accessibility, Int64, String)] = []
        if !unfilled.isEmpty {
            for (id, why) in try fillSSHHalves(ids: Set(unfilled), caller: caller, keys: keys) {
                let protection = found.first { $0.0.id == id }.map { Self.accessibility(of: $0.1) } ?? .whenUnlocked
                skipped.append((protection, id, why))
            }
            found = try matches(Self.privateKeys, caller: caller, keys: keys, withData: false)
        }
        for (row, attributes) in found {
            let item = KeychainItem(id: row.id, itemClass: .key, attributes: attributes, data: nil)
            if case .data(let blob)? = attributes[KeyData.sshPublicKey], !blob.isEmpty {
                identities.append((item.accessibility, Self.identity(row.id, item, blob)))
            } else if case .string(let why)? = attributes[KeyData.sshUnusable] {
                skipped.append((item.accessibility, row.id, "\(item.summary): \(why)"))
            }
        }
        return SSHListings.Entry(stamp: [], identities: identities, skipped: skipped)
    }

    private static func identity(_ id: Int64, _ item: KeychainItem, _ blob: [UInt8]) -> SSHIdentity {
        let label = item.string(Schema.label) ?? ""
        var reader = OpenSSHKey.Reader(blob)
        let type = reader.string().map { String(decoding: $0, as: UTF8.self) } ?? "ssh"
        let comment = label.filter { !$0.isNewline }
        return SSHIdentity(
            id: id, label: label, accessGroup: item.accessGroup, publicBlob: blob,
            publicLine: "\(type) \(Data(blob).base64EncodedString())" + (comment.isEmpty ? "" : " \(comment)"),
            hosts: item.string(Schema.named("sshHosts")) ?? "")
    }

    /// Sets the ssh halves of key items stored before they existed, each decrypted once, in one
    /// write transaction; a row is re-read there and left alone if another writer filled it in
    /// meanwhile. A key whose data does not decrypt (damaged, its class key unavailable) is
    /// left as it is and reported; nothing else about any item changes (not even its
    /// modification date). Returns the keys it could not fill in, with why.
    func fillSSHHalves(ids: Set<Int64>, caller: Caller, keys: Keys) throws -> [(id: Int64, why: String)] {
        try writeTransaction(keys: keys.manifest, origin: caller.origin) { vault in
            var skipped: [(id: Int64, why: String)] = []
            for id in ids.sorted() {
                guard let row = try vault.item(id: id, withData: true), row.itemClass == ItemClass.key.rawValue else {
                    continue
                }
                // A row that no longer opens is the listing's to skip (it was read before).
                guard var attributes = try? openAttributes(row, itemClass: .key, keys: keys),
                    !KeyData.hasSSHHalves(attributes)
                else { continue }
                let item = KeychainItem(id: id, itemClass: .key, attributes: attributes, data: nil)
                guard (try? classKey(item.accessibility, keys: keys, for: item.summary)) != nil else { continue }
                var data: [UInt8]
                do {
                    data = try openData(
                        row, item: item, keys: keys, caller: caller.granting(presenceFor: id), ui: .fail)
                } catch let error as KeychainError where error.status == .decode {
                    skipped.append((id, "\(item.summary) cannot be decrypted (damaged or tampered)"))
                    continue
                }
                KeyData.setSSHHalves(&attributes, data: data)
                Sodium.wipe(&data)
                try vault.replace(resealAttributes(row, itemClass: .key, attributes: attributes, keys: keys))
            }
            return skipped
        }
    }

    /// The key item the ssh agent signs with for `publicKey`: the one private key the caller
    /// may see whose stored public half it is, found by its fingerprint's tag in the attribute
    /// index (one indexed lookup per access group of the caller), with nothing decrypted but
    /// the candidates' attributes. `hostsAllow` is asked with the key's `sshHosts`: a key not
    /// offered to this destination is not found, as it is not listed. errSecItemNotFound when
    /// there is none.
    public func sshKey(
        publicKey: [UInt8], caller callerArgument: Caller? = nil, hostsAllow: (String) -> Bool = { _ in true }
    ) throws -> Int64 {
        let call = callContext(callerArgument)
        let keys = try call.unlockedKeys()
        if let id = try sshKeyID(publicKey: publicKey, caller: call.caller, keys: keys, hostsAllow: hostsAllow) {
            return id
        }
        // A key stored before the halves existed has no tag yet: fill in and look again.
        let unfilled = try matches(Self.privateKeys, caller: call.caller, keys: keys, withData: false)
            .filter { !KeyData.hasSSHHalves($0.1) }.map(\.0.id)
        if !unfilled.isEmpty {
            _ = try fillSSHHalves(ids: Set(unfilled), caller: call.caller, keys: keys)
            if let id = try sshKeyID(publicKey: publicKey, caller: call.caller, keys: keys, hostsAllow: hostsAllow) {
                return id
            }
        }
        throw KeychainError(.itemNotFound, "no key this caller may use here has that public key")
    }

    /// SecKeyCreateSignature for the ssh agent: an SSH signature blob over `data` by the key item
    /// `keyID` (from `sshKey`), after the checks of a read (visibility, lock state, user
    /// presence through `ui`). Only this key is decrypted, and it must be the private half of
    /// `publicKey`.
    public func sshSign(
        keyID: Int64, publicKey: [UInt8], data: [UInt8], flags: UInt32, caller callerArgument: Caller? = nil,
        ui: AuthenticationUI? = nil
    ) throws -> [UInt8] {
        let call = callContext(callerArgument)
        var privateBytes =
            try item(id: keyID, itemClass: .key, synchronizable: true, withData: true, in: call, ui: ui, raw: true).data
            ?? []
        defer { Sodium.wipe(&privateBytes) }
        guard let key = SigningKey.parse(privateBytes), key.publicBlob == publicKey else {
            throw KeychainError(.param, "key item \(keyID) is not the private key of the public key asked for")
        }
        return try key.sign(data, flags: flags)
    }

    /// The id of the one private key the caller may see whose stored public half is
    /// `publicKey` and whose hosts `hostsAllow`, through the attribute index; nil if none.
    private func sshKeyID(publicKey: [UInt8], caller: Caller, keys: Keys, hostsAllow: (String) -> Bool) throws
        -> Int64?
    {
        let fingerprint = sshFingerprint(publicKey)
        let rows: [StoredItem] = try storeCall {
            try store.read { vault in
                var rows: [StoredItem] = []
                for group in caller.accessGroups {
                    let tag = Self.attributeTag(
                        .key, group: group, name: KeyData.sshIndexName, value: fingerprint, key: keys.attributeIndex)
                    for id in try vault.itemIDs(withAllAttributeTags: [tag]) {
                        if let row = try vault.item(id: id, withData: false) { rows.append(row) }
                    }
                }
                return rows
            }
        }
        if rows.isEmpty { try requireEveryBucketVerified() } else { try requireVerified(ids: rows.map(\.id)) }
        for row in rows.sorted(by: { $0.id < $1.id }) where row.itemClass == ItemClass.key.rawValue {
            // The tag only narrows: the row's own authenticated attributes decide.
            guard let attributes = try? openAttributes(row, itemClass: .key, keys: keys),
                case .string(let group)? = attributes[Schema.accessGroup], caller.canSee(accessGroup: group),
                caller.accessGroups.contains(group),
                attributes[Schema.named("keyClass")] == .number(KeyData.classPrivate),
                attributes[KeyData.sshPublicKey] == .data(publicKey)
            else { continue }
            let item = KeychainItem(id: row.id, itemClass: .key, attributes: attributes, data: nil)
            if hostsAllow(item.string(Schema.named("sshHosts")) ?? "") { return row.id }
        }
        return nil
    }
}
