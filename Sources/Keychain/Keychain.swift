import Foundation
import KeychainCrypto
import KeychainStore

/// Where the keychain is in its lock cycle.
public enum LockState: Equatable, Sendable {
    /// Opened without a passphrase: nothing is readable, not even attributes.
    case neverUnlocked
    case unlocked(since: Date)
    /// Locked again: WhenUnlocked data is unreadable; AfterFirstUnlock data and all
    /// attributes stay available, as on iOS.
    case locked(since: Date)
}

/// The keychain core: Apple's SecItem semantics (add, copyMatching, update, delete) over an
/// encrypted vault file. The only place keychain rules live; front ends translate to it.
/// Thread-safe: the daemon calls it from many FUSE threads at once.
public final class Keychain: @unchecked Sendable {
    // @unchecked: mutable state (`keys`, `state`) is only touched with `stateLock` held;
    // the store serialises its own connection.

    /// Largest secret accepted (errSecDataTooLarge above it).
    public static let maxDataSize = 1 << 20
    /// Largest single attribute value (the xattr value limit).
    public static let maxAttributeSize = 64 << 10

    public let path: String
    let store: VaultStore
    /// The header as last read or written; re-read at unlock so another process's
    /// passphrase change is seen. Guarded by `stateLock`.
    private var header: VaultHeader
    private let deviceKeyPath: String

    /// Keys held while the vault is (or was) unlocked.
    private final class Keys: @unchecked Sendable {
        let metadata: SecureBytes
        let index: SecureBytes
        let manifest: SecureBytes
        var classKeys: [Accessibility: SecureBytes]
        /// ThisDeviceOnly class keys could not be opened because the device key differs.
        let deviceMismatch: Bool
        /// Verifies the access policy's signature (the signing half needs the passphrase).
        let policyPublicKey: [UInt8]
        init(metadata: SecureBytes, index: SecureBytes, manifest: SecureBytes,
             classKeys: [Accessibility: SecureBytes], deviceMismatch: Bool, policyPublicKey: [UInt8]) {
            self.metadata = metadata; self.index = index; self.manifest = manifest
            self.classKeys = classKeys; self.deviceMismatch = deviceMismatch; self.policyPublicKey = policyPublicKey
        }
    }

    private let stateLock = NSLock()
    private var keys: Keys?
    private var defaultCallerValue = Caller.default

    /// The caller assumed when a call names none: `default` unless the front end says
    /// otherwise (the CLI, holding the passphrase, acts in every group of the policy).
    public var defaultCaller: Caller {
        get { stateLock.withLock { defaultCallerValue } }
        set { stateLock.withLock { defaultCallerValue = newValue } }
    }
    private var state: LockState = .neverUnlocked

    /// Never changes for the life of a vault; bound into every associated data.
    private let vaultID: [UInt8]

    private init(path: String, store: VaultStore, header: VaultHeader, deviceKeyPath: String) {
        self.vaultID = header.vaultID
        self.path = path
        self.store = store
        self.header = header
        self.deviceKeyPath = deviceKeyPath
    }

    // MARK: Creating, opening, locking

    /// Creates a new vault at `path` (refusing to overwrite anything) and returns it unlocked.
    public static func create(at path: String, passphrase: SecureBytes, parameters: PasswordHashParameters = .moderate,
                              deviceKeyPath: String = KeychainPaths.deviceKey()) throws -> Keychain {
        guard parameters.isAtLeastInteractive else {
            throw KeychainError(.param, "Argon2id parameters below INTERACTIVE are not allowed")
        }
        guard passphrase.count > 0 else { throw KeychainError(.param, "the passphrase is empty") }
        if FileManager.default.fileExists(atPath: path) {
            throw KeychainError(.duplicateKeychain, "a file already exists at \(path); refusing to overwrite it")
        }
        let store: VaultStore
        do { store = try VaultStore.create(at: path) } catch { throw mapStoreError(error, path: path) }
        do {
            let device = try DeviceKey.loadOrCreate(at: deviceKeyPath)
            let master = try SecureBytes.random()
            var header = VaultHeader(format: VaultHeader.formatVersion, vaultID: Sodium.randomBytes(16),
                                     parameters: parameters, salt: [], wrappedMaster: [],
                                     deviceKeyID: DeviceKey.identifier(of: device))
            try VaultHeader.wrapMaster(master, header: &header, passphrase: passphrase)
            try store.write {
                try header.write(to: store)
                for protection in Accessibility.allCases {
                    let classKey = try SecureBytes.random()
                    let wrapKey = try classWrapKey(master: master, device: device, protection)!
                    let wrapped = try classKey.withUnsafeBytes {
                        try AEAD.seal($0, associatedData: classKeyAssociatedData(vaultID: header.vaultID, protection), key: wrapKey)
                    }
                    try store.setClassKey(protection.rawValue, wrapped: wrapped)
                }
                try store.setMeta("manifest", Manifest.empty.encoded)
            }
            let keychain = Keychain(path: path, store: store, header: header, deviceKeyPath: deviceKeyPath)
            try keychain.unlock(master: master)
            return keychain
        } catch {
            for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) }
            throw error
        }
    }

    /// Opens an existing vault, locked. Checks that it is a vault of a version we read.
    public static func open(at path: String, deviceKeyPath: String = KeychainPaths.deviceKey()) throws -> Keychain {
        let store: VaultStore
        do { store = try VaultStore.open(at: path) } catch { throw mapStoreError(error, path: path) }
        let header: VaultHeader
        do { header = try VaultHeader.read(from: store) } catch let e as KeychainError { throw e } catch {
            throw mapStoreError(error, path: path)
        }
        return Keychain(path: path, store: store, header: header, deviceKeyPath: deviceKeyPath)
    }

    /// Unlocks with the passphrase: unwraps the class keys and verifies the manifest.
    public func unlock(passphrase: SecureBytes) throws {
        let master = try refreshedHeader().unwrapMaster(passphrase: passphrase)
        try unlock(master: master)
    }

    /// Reads the header from the file again (a passphrase change by another process
    /// rewrites it) and keeps it.
    private func refreshedHeader() throws -> VaultHeader {
        let fresh = try storeCall { try VaultHeader.read(from: store) }
        stateLock.withLock { header = fresh }
        return fresh
    }

    private var currentHeader: VaultHeader { stateLock.withLock { header } }

    private func unlock(master: SecureBytes) throws {
        let device = try DeviceKey.load(at: deviceKeyPath)
        let header = currentHeader
        let deviceMatches = device.map { DeviceKey.identifier(of: $0) == header.deviceKeyID } ?? false
        let wrapped = try storeCall { try store.classKeys() }
        var classKeys: [Accessibility: SecureBytes] = [:]
        for protection in Accessibility.allCases {
            if protection.isThisDeviceOnly && !deviceMatches { continue }
            guard let box = wrapped[protection.rawValue],
                  let wrapKey = try classWrapKey(master: master, device: device, protection) else {
                throw KeychainError(.decode, "vault is damaged: the \(protection.name) class key is missing")
            }
            do {
                classKeys[protection] = try AEAD.openKey(box, associatedData: classKeyAssociatedData(vaultID: header.vaultID, protection), key: wrapKey)
            } catch {
                throw KeychainError(.decode, "vault is damaged: the \(protection.name) class key does not authenticate")
            }
        }
        let newKeys = Keys(metadata: try KeyDerivation.subkey(of: master, id: Subkey.metadata.rawValue, context: Subkey.context),
                           index: try KeyDerivation.subkey(of: master, id: Subkey.index.rawValue, context: Subkey.context),
                           manifest: try KeyDerivation.subkey(of: master, id: Subkey.manifest.rawValue, context: Subkey.context),
                           classKeys: classKeys, deviceMismatch: !deviceMatches,
                           policyPublicKey: try Self.policyKeyPair(master: master).0)
        try verifyManifest(keys: newKeys)
        stateLock.withLock {
            keys = newKeys
            state = .unlocked(since: Date())
        }
    }

    /// Locks: drops the class keys of WhenUnlocked-type classes. Attributes and
    /// AfterFirstUnlock data stay available (Apple's behaviour after first unlock).
    public func lock() {
        stateLock.withLock {
            guard let keys, case .unlocked = state else { return }
            for protection in Accessibility.allCases where !protection.readableWhileLocked {
                keys.classKeys[protection] = nil
            }
            state = .locked(since: Date())
        }
    }

    public var lockState: LockState { stateLock.withLock { state } }

    /// Changes the passphrase (and optionally the KDF parameters). Only the master-key wrap
    /// changes: no item is re-encrypted.
    public func changePassphrase(old: SecureBytes, new: SecureBytes, parameters: PasswordHashParameters? = nil) throws {
        let current = try refreshedHeader()
        let master = try current.unwrapMaster(passphrase: old)
        var newHeader = current
        if let parameters {
            guard parameters.isAtLeastInteractive else {
                throw KeychainError(.param, "Argon2id parameters below INTERACTIVE are not allowed")
            }
            newHeader.parameters = parameters
        }
        guard new.count > 0 else { throw KeychainError(.param, "the new passphrase is empty") }
        try VaultHeader.wrapMaster(master, header: &newHeader, passphrase: new)
        try storeCall { try newHeader.write(to: store) }
        stateLock.withLock { header = newHeader }
    }

    /// Checks a passphrase without changing anything (devicePasscode prompts).
    public func verifyPassphrase(_ passphrase: SecureBytes) throws {
        _ = try refreshedHeader().unwrapMaster(passphrase: passphrase)
    }

    public var kdfParameters: PasswordHashParameters { currentHeader.parameters }

    private func currentKeys() throws -> Keys {
        try stateLock.withLock {
            guard let keys else {
                throw KeychainError(.interactionNotAllowed, "the keychain has not been unlocked since it was opened")
            }
            return keys
        }
    }

    // MARK: Access policy

    static func policyKeyPair(master: SecureBytes) throws -> ([UInt8], SecureBytes) {
        try Signing.keyPair(seed: try KeyDerivation.subkey(of: master, id: Subkey.policySigning.rawValue, context: Subkey.context))
    }

    private var policyAD: [UInt8] { Framing.frame([Framing.text("kcfs/access-policy/v1"), vaultID]) }

    /// The stored access policy (empty when none was ever set). A policy whose signature or
    /// encryption does not verify is errSecDecode: it is never silently ignored.
    public func accessPolicy() throws -> AccessPolicy {
        let keys = try currentKeys()
        guard let stored = try storeCall({ try store.meta("access_policy") }) else { return AccessPolicy() }
        let bad = KeychainError(.decode, "the access policy in the vault does not verify: it was altered")
        guard stored.count > Signing.signatureBytes else { throw bad }
        let signature = Array(stored[0..<Signing.signatureBytes]), box = Array(stored[Signing.signatureBytes...])
        guard Signing.verify(signature, box, publicKey: keys.policyPublicKey),
              let plain = try? AEAD.open(box, associatedData: policyAD, key: keys.metadata),
              let policy = AccessPolicy(encoded: plain) else { throw bad }
        return policy
    }

    /// Replaces the access policy. Needs the passphrase: the policy is signed with a key
    /// only the master key yields.
    public func setAccessPolicy(_ policy: AccessPolicy, passphrase: SecureBytes) throws {
        let keys = try currentKeys()
        let master = try refreshedHeader().unwrapMaster(passphrase: passphrase)
        let (_, secretKey) = try Self.policyKeyPair(master: master)
        let box = try AEAD.seal(policy.encoded, associatedData: policyAD, key: keys.metadata)
        let blob = Signing.sign(box, secretKey: secretKey) + box
        try storeCall {
            try store.write {
                // The manifest covers the policy too, so an older signed policy replayed into
                // the file is detected at unlock like a replayed row.
                guard let stored = try store.meta("manifest"), var manifest = Manifest(encoded: stored) else {
                    throw KeychainError(.decode, "vault integrity check failed: the manifest is missing or malformed")
                }
                if let old = try store.meta("access_policy") { manifest.toggle(Manifest.policyEntry(old, key: keys.manifest)) }
                manifest.toggle(Manifest.policyEntry(blob, key: keys.manifest))
                try store.setMeta("access_policy", blob)
                try store.setMeta("manifest", manifest.encoded)
            }
        }
    }

    // MARK: Integrity

    /// Recomputes the manifest over every row and compares it with the stored one.
    public func verifyIntegrity() throws { try verifyManifest(keys: try currentKeys()) }

    private func verifyManifest(keys: Keys) throws {
        try storeCall {
            try store.read {
                guard let stored = try store.meta("manifest"), let expected = Manifest(encoded: stored) else {
                    throw KeychainError(.decode, "vault integrity check failed: the manifest is missing or malformed")
                }
                var actual = Manifest.empty
                try store.forEachItem { actual.insert(Manifest.entry($0, key: keys.manifest)) }
                if let policy = try store.meta("access_policy") { actual.toggle(Manifest.policyEntry(policy, key: keys.manifest)) }
                guard actual.count == expected.count, Sodium.constantTimeEqual(actual.accumulator, expected.accumulator) else {
                    throw KeychainError(.decode, "vault integrity check failed: the item table does not match its authenticated manifest (\(actual.count) rows found, \(expected.count) expected): rows were deleted, altered, swapped or replayed")
                }
            }
        }
    }

    public func itemCount() throws -> Int { try storeCall { try store.itemCount() } }

    // MARK: SecItemAdd

    /// SecItemAdd. Returns the stored item (attributes as stored, no data).
    @discardableResult
    public func add(_ itemClass: ItemClass, _ given: Attributes, data: [UInt8], caller callerArgument: Caller? = nil) throws -> KeychainItem {
        let caller = callerArgument ?? defaultCaller
        guard itemClass != .identity else {
            throw KeychainError(.param, "identities cannot be added directly: add the certificate and the private key")
        }
        let keys = try currentKeys()
        let (attributes, data) = try newItem(itemClass, given, data: data, caller: caller)
        let protection = Self.accessibility(of: attributes)
        let classKey = try self.classKey(protection, keys: keys, for: Self.describe(itemClass, attributes))

        return try storeCall {
            try store.write {
                let id = try store.nextItemID()
                let row = try seal(id: id, itemClass: itemClass, attributes: attributes, data: data, version: 1,
                                   keys: keys, classKey: classKey)
                do { try store.insert(row, id: id) } catch StoreError.duplicate {
                    throw KeychainError(.duplicateItem, "\(Self.describe(itemClass, attributes)) already exists")
                }
                try updateManifest(keys: keys, removing: nil, adding: row)
                return KeychainItem(id: id, itemClass: itemClass, attributes: attributes, data: nil, dataLength: data.count)
            }
        }
    }

    /// The attributes and data an add stores for `given`: checked against the class, with
    /// everything the system sets filled in (derived certificate and key attributes, the key
    /// tag, access group, protection class, dates, primary-key defaults). Touches no row.
    private func newItem(_ itemClass: ItemClass, _ given: Attributes, data: [UInt8],
                         caller: Caller) throws -> (attributes: Attributes, data: [UInt8]) {
        try validate(given, in: itemClass, forUpdate: false)
        try checkDataSize(data, itemClass, given)
        var attributes = given
        var data = data
        switch itemClass {
        case .certificate:
            // Apple's value for a certificate is its DER; its key attributes come from it.
            data = try CertificateData.der(from: data)
            for (k, v) in try CertificateData.derivedAttributes(data) { attributes[k] = v }
            if attributes[Schema.label] == nil, let cn = CertificateData.commonName(data) { attributes[Schema.label] = .string(cn) }
        case .key:
            for (k, v) in KeyData.derivedAttributes(data, given: given) { attributes[k] = v }
            // A key's label is not in its primary key, so two keys added under different names
            // with the same key material would collide. Its tag (which is in the key) defaults
            // to the label: keys added under different names are different items.
            if case .string(let label)? = attributes[Schema.label], attributes[Schema.applicationTag] == nil {
                attributes[Schema.applicationTag] = .data(Array(label.utf8))
            }
        default: break
        }
        let now = Date()
        // Defaults set by the system.
        if attributes[Schema.accessGroup] == nil {
            guard let first = caller.accessGroups.first else {
                throw KeychainError(.missingEntitlement, "the caller has no access group to add \(Self.describe(itemClass, given)) to")
            }
            attributes[Schema.accessGroup] = .string(first)
        }
        try checkEntitlement(attributes, caller: caller)
        if let ac = accessControl(of: attributes) {
            guard attributes[Schema.accessible] == nil else {
                throw KeychainError(.param, "accessControl and accessible cannot both be given for \(Self.describe(itemClass, given)): the access control carries the protection class")
            }
            attributes[Schema.accessible] = .accessibility(ac.protection)
        } else if attributes[Schema.accessible] == nil {
            attributes[Schema.accessible] = .accessibility(.whenUnlocked)
        }
        if attributes[Schema.creationDate] == nil { attributes[Schema.creationDate] = .date(now) }
        if attributes[Schema.modificationDate] == nil { attributes[Schema.modificationDate] = .date(now) }
        for key in Schema.primaryKey(of: itemClass) where attributes[key] == nil {
            attributes[key] = AttributeValue.defaultValue(for: key.type)
        }
        try checkSynchronizable(attributes, itemClass)
        return (attributes, data)
    }

    /// SecItemAdd, and when the item exists (errSecDuplicateItem) SecItemUpdate of exactly the
    /// one item whose whole primary key equals the new item's, with the defaults add applies
    /// (empty account, the caller's first access group, not synchronizable, a key's tag): its
    /// data and the given non-key attributes are replaced. `security add-…-password -U`.
    /// Returns the item (attributes as stored, no data) and whether it was added.
    @discardableResult
    public func addOrUpdate(_ itemClass: ItemClass, _ attributes: Attributes, data: [UInt8],
                            caller callerArgument: Caller? = nil) throws -> (item: KeychainItem, added: Bool) {
        let caller = callerArgument ?? defaultCaller
        do {
            return (try add(itemClass, attributes, data: data, caller: caller), true)
        } catch KeychainStatus.duplicateItem {
            let (full, _) = try newItem(itemClass, attributes, data: data, caller: caller)
            let keyAttributes = Set(Schema.primaryKey(of: itemClass))
            let primaryKey = full.filter { keyAttributes.contains($0.key) }
            let existing = try find(Query(itemClass, primaryKey), caller: caller)
            // By persistent reference: exactly that item, synchronizable or not.
            try update(Query(itemClass, synchronizableAny: true, persistentReference: existing.id),
                       attributes: attributes.filter { !keyAttributes.contains($0.key) }, data: data, caller: caller)
            return (try item(id: existing.id, itemClass: itemClass, synchronizable: true, withData: false, caller: caller), false)
        }
    }

    /// The value add gives a primary-key attribute that was not given.
    public static func defaultValue(of attribute: Attribute, caller: Caller) -> AttributeValue {
        if attribute == Schema.accessGroup { return .string(caller.accessGroups.first ?? "") }
        return AttributeValue.defaultValue(for: attribute.type)
    }

    // MARK: SecItemCopyMatching

    /// SecItemCopyMatching. Throws errSecItemNotFound when nothing matches.
    public func copyMatching(_ query: Query, caller callerArgument: Caller? = nil) throws -> [KeychainItem] {
        let caller = callerArgument ?? defaultCaller
        if case .count(let n)? = query.matchLimit, n < 1 {
            throw KeychainError(.param, "match limit must be at least 1")
        }
        let keys = try currentKeys()
        let candidates = try matches(query, caller: caller, keys: keys, withData: query.returnData == true)
        var results: [KeychainItem] = []
        let limit: Int
        switch query.matchLimit ?? .one {
        case .one: limit = 1
        case .all: limit = .max
        case .count(let n): limit = n
        }
        for (row, attributes) in candidates {
            if results.count >= limit { break }
            var data: [UInt8]?
            if query.returnData == true {
                let item = KeychainItem(id: row.id, itemClass: query.itemClass, attributes: attributes, data: nil)
                do {
                    data = try openData(row, item: item, keys: keys, caller: caller, ui: query.authenticationUI ?? caller.authenticationUI)
                } catch SkipItem.skip { continue }
            }
            results.append(KeychainItem(id: row.id, itemClass: query.itemClass, attributes: attributes, data: data,
                                        dataLength: max(0, row.sealedDataLength - AEAD.overhead)))
        }
        guard !results.isEmpty else {
            throw KeychainError(.itemNotFound, "\(Self.describe(query)) not found")
        }
        return results
    }

    /// The one item a query names (match limit one), with data if asked.
    public func find(_ query: Query, caller callerArgument: Caller? = nil) throws -> KeychainItem {
        let caller = callerArgument ?? defaultCaller
        var q = query
        q.matchLimit = .one
        return try copyMatching(q, caller: caller)[0]
    }

    /// Reads one item by persistent reference, checking visibility and access like a query
    /// by kSecValuePersistentRef (which, like every query without kSecAttrSynchronizableAny,
    /// sees non-synchronizable items only). One row fetch by id; no matcher.
    public func item(id: Int64, itemClass: ItemClass, withData: Bool, caller callerArgument: Caller? = nil, ui: AuthenticationUI? = nil) throws -> KeychainItem {
        try item(id: id, itemClass: itemClass, synchronizable: false, withData: withData,
                 caller: callerArgument ?? defaultCaller, ui: ui)
    }

    private func item(id: Int64, itemClass: ItemClass, synchronizable: Bool, withData: Bool,
                      caller: Caller, ui: AuthenticationUI? = nil) throws -> KeychainItem {
        let keys = try currentKeys()
        let (row, attributes) = try visibleRow(id: id, itemClass: itemClass, synchronizable: synchronizable,
                                               withData: withData, caller: caller, keys: keys)
        var data: [UInt8]?
        if withData {
            let item = KeychainItem(id: row.id, itemClass: itemClass, attributes: attributes, data: nil)
            do {
                data = try openData(row, item: item, keys: keys, caller: caller, ui: ui ?? caller.authenticationUI)
            } catch SkipItem.skip {
                // kSecUseAuthenticationUISkip leaves the item out: nothing is left.
                throw KeychainError(.itemNotFound, "item \(id) not found")
            }
        }
        return KeychainItem(id: row.id, itemClass: itemClass, attributes: attributes, data: data,
                            dataLength: max(0, row.sealedDataLength - AEAD.overhead))
    }

    /// The row with this id and its attributes, if the caller may see it: of this class, in
    /// one of the caller's access groups, and non-synchronizable unless `synchronizable`
    /// allows both. Anything else is errSecItemNotFound, as for a query that matches nothing.
    private func visibleRow(id: Int64, itemClass: ItemClass, synchronizable: Bool, withData: Bool,
                            caller: Caller, keys: Keys) throws -> (StoredItem, Attributes) {
        guard itemClass != .identity else {
            throw KeychainError(.unimplemented, "identity queries are not supported yet")
        }
        let notFound = KeychainError(.itemNotFound, "item \(id) not found")
        guard let row = try storeCall({ try store.item(id: id, withData: withData) }),
              row.itemClass == itemClass.rawValue else { throw notFound }
        let attributes = try openAttributes(row, itemClass: itemClass, keys: keys)
        guard case .string(let group)? = attributes[Schema.accessGroup], caller.canSee(accessGroup: group),
              case .bool(let isSynchronizable)? = attributes[Schema.synchronizable], synchronizable || !isSynchronizable
        else { throw notFound }
        return (row, attributes)
    }

    /// The access check of a read without decrypting the data: the item is visible to the
    /// caller, its class key is available (lock state, device), and user presence, if the item
    /// needs it, is given. Returns the item's attributes. The filesystem decides at open with
    /// this and decrypts on each read.
    public func authorizeRead(id: Int64, itemClass: ItemClass, caller callerArgument: Caller? = nil, ui: AuthenticationUI? = nil) throws -> KeychainItem {
        let caller = callerArgument ?? defaultCaller
        let keys = try currentKeys()
        let (row, attributes) = try visibleRow(id: id, itemClass: itemClass, synchronizable: true, withData: false,
                                               caller: caller, keys: keys)
        let item = KeychainItem(id: row.id, itemClass: itemClass, attributes: attributes, data: nil,
                                dataLength: max(0, row.sealedDataLength - AEAD.overhead))
        _ = try classKey(item.accessibility, keys: keys, for: item.summary)
        try checkPresence(item, caller: caller, ui: ui ?? caller.authenticationUI)
        return item
    }

    /// Whether the caller can see any item whose grouping attribute (service, server, label)
    /// has this value: one index probe per access group, no decryption. For directory lookups.
    public func hasItems(_ itemClass: ItemClass, grouping value: AttributeValue, caller callerArgument: Caller? = nil) throws -> Bool {
        let caller = callerArgument ?? defaultCaller
        let keys = try currentKeys()
        return try storeCall {
            try caller.accessGroups.contains { try store.exists(secondaryIndex: secondaryIndex(itemClass, group: $0, value, keys: keys)) }
        }
    }

    /// A value that changes whenever anything in the vault changes (here or in another
    /// process): front ends key caches of derived views (directory listings) on it.
    public func changeStamp() throws -> [Int64] { try storeCall { try store.changeStamp() } }

    // MARK: Identities

    /// An identity: a certificate joined with the private key whose applicationLabel equals
    /// the certificate's publicKeyHash. It has no row of its own.
    public struct Identity: Sendable {
        public let certificate: KeychainItem
        public let key: KeychainItem
        public var id: Int64 { certificate.id }
        public var label: String { certificate.string(Schema.label) ?? "" }
    }

    /// Every identity the caller can see (a certificate with a matching private key).
    public func identities(caller callerArgument: Caller? = nil) throws -> [Identity] {
        let caller = callerArgument ?? defaultCaller
        func all(_ c: ItemClass) throws -> [KeychainItem] {
            do { return try copyMatching(Query(c, matchLimit: .all, synchronizableAny: true), caller: caller) }
            catch KeychainStatus.itemNotFound { return [] }
        }
        var privateKeys: [[UInt8]: KeychainItem] = [:]
        for key in try all(.key) {
            guard case .number(KeyData.classPrivate)? = key[Schema.named("keyClass")],
                  case .data(let label)? = key[Schema.named("applicationLabel")], !label.isEmpty else { continue }
            if privateKeys[label] == nil { privateKeys[label] = key }
        }
        return try all(.certificate).compactMap { cert in
            guard case .data(let hash)? = cert[Schema.named("publicKeyHash")], let key = privateKeys[hash] else { return nil }
            return Identity(certificate: cert, key: key)
        }
    }

    /// The identity of one certificate, with both halves' data if asked (each read goes
    /// through the usual access checks).
    public func identity(certificateID: Int64, withData: Bool, caller callerArgument: Caller? = nil) throws -> Identity {
        let caller = callerArgument ?? defaultCaller
        guard let found = try identities(caller: caller).first(where: { $0.id == certificateID }) else {
            throw KeychainError(.itemNotFound, "identity of certificate item \(certificateID) not found")
        }
        guard withData else { return found }
        return Identity(certificate: try item(id: found.certificate.id, itemClass: .certificate, withData: true, caller: caller),
                        key: try item(id: found.key.id, itemClass: .key, withData: true, caller: caller))
    }

    /// What an identity is as one file: the certificate as PEM followed by the private key's
    /// bytes as stored. Both halves are read through the usual access checks (visibility, lock
    /// state, user presence).
    public func identityBundle(certificateID: Int64, caller callerArgument: Caller? = nil) throws -> [UInt8] {
        let full = try identity(certificateID: certificateID, withData: true, caller: callerArgument ?? defaultCaller)
        return CertificateData.pem(full.certificate.data ?? []) + (full.key.data ?? [])
    }

    // MARK: SecItemUpdate

    /// SecItemUpdate: applies `changes` (and new data, if given) to every match, atomically.
    /// Returns how many items were updated.
    @discardableResult
    public func update(_ query: Query, attributes changes: Attributes, data: [UInt8]? = nil, caller callerArgument: Caller? = nil) throws -> Int {
        let caller = callerArgument ?? defaultCaller
        guard query.matchLimit == nil, query.returnData == nil, query.returnAttributes == nil, query.caseInsensitive == nil else {
            throw KeychainError(.param, "an update query may not hold kSecReturn… or kSecMatch… keys")
        }
        guard !changes.isEmpty || data != nil else {
            throw KeychainError(.param, "nothing to update for \(Self.describe(query))")
        }
        try validate(changes, in: query.itemClass, forUpdate: true)
        try checkEntitlement(changes, caller: caller)
        var data = data
        var derived = Attributes()
        if let given = data {
            try checkDataSize(given, query.itemClass, query.attributes)
            switch query.itemClass {
            case .certificate:
                data = try CertificateData.der(from: given)
                derived = try CertificateData.derivedAttributes(data!)
            case .key:
                derived = KeyData.derivedAttributes(given, given: changes)
            default: break
            }
        }
        let keys = try currentKeys()
        var all = query
        all.matchLimit = .all
        // User presence is asked before the write transaction: a prompt can take a minute,
        // and the vault must not be held against every other request meanwhile.
        // Only changes to the data or its protection ask; renaming or relabelling a protected
        // item does not (xattrs never prompt). Nested in another write (rename, replaceData)
        // the caller has asked already, before its own transaction.
        func needsPresence(_ attributes: Attributes) -> Bool {
            guard case .accessControl(let ac)? = attributes[Schema.accessControl], ac.requiresPresence else { return false }
            if data != nil { return true }
            return [Schema.accessible, Schema.accessControl, Schema.accessGroup].contains { changes[$0] != nil && changes[$0] != attributes[$0] }
        }
        var granted = caller
        for (row, attributes) in try matches(all, caller: caller, keys: keys, withData: false) where needsPresence(attributes) {
            try checkPresence(KeychainItem(id: row.id, itemClass: query.itemClass, attributes: attributes, data: nil),
                              caller: caller, ui: caller.authenticationUI)
            granted = granted.granting(presenceFor: row.id)
        }
        return try storeCall {
            try store.write {
                let found = try matches(all, caller: caller, keys: keys, withData: true)
                guard !found.isEmpty else { throw KeychainError(.itemNotFound, "\(Self.describe(query)) not found") }
                for (old, oldAttributes) in found {
                    let oldItem = KeychainItem(id: old.id, itemClass: query.itemClass, attributes: oldAttributes, data: nil)
                    if needsPresence(oldAttributes) && !granted.presenceGrants.contains(old.id) {
                        throw KeychainError(.interactionRequired, "\(oldItem.summary) changed while its update waited for user presence; try again")
                    }
                    var attributes = oldAttributes
                    for (k, v) in changes { attributes[k] = v }
                    for (k, v) in derived { attributes[k] = v }
                    if let ac = accessControl(of: changes) {
                        guard changes[Schema.accessible] == nil else {
                            throw KeychainError(.param, "accessControl and accessible cannot both be given")
                        }
                        attributes[Schema.accessible] = .accessibility(ac.protection)
                    } else if case .accessibility(let p)? = changes[Schema.accessible],
                              var ac = accessControl(of: oldAttributes) {
                        ac.protection = p
                        attributes[Schema.accessControl] = .accessControl(ac)
                    }
                    attributes[Schema.modificationDate] = .date(Date())
                    try checkSynchronizable(attributes, query.itemClass)
                    let name = Self.describe(query.itemClass, attributes, id: old.id)
                    let protectionChanged = Self.accessibility(of: attributes) != Self.accessibility(of: oldAttributes)
                        || attributes[Schema.accessGroup] != oldAttributes[Schema.accessGroup]
                    let row: StoredItem
                    if data != nil || protectionChanged {
                        // New data, or a new protection class / access group: the data is sealed
                        // again (the old data is needed only when it is kept).
                        let plaintext = try data ?? openData(old, item: oldItem, keys: keys, caller: granted,
                                                             ui: caller.authenticationUI)
                        let classKey = try self.classKey(Self.accessibility(of: attributes), keys: keys, for: name)
                        row = try seal(id: old.id, itemClass: query.itemClass, attributes: attributes, data: plaintext,
                                       version: old.version + 1, keys: keys, classKey: classKey)
                    } else {
                        row = try resealAttributes(old, itemClass: query.itemClass, attributes: attributes, keys: keys)
                    }
                    do { try store.replace(row) } catch StoreError.duplicate {
                        throw KeychainError(.duplicateItem, "cannot update \(Self.describe(query.itemClass, oldAttributes)): \(Self.describe(query.itemClass, attributes)) already exists")
                    }
                    try updateManifest(keys: keys, removing: old, adding: row)
                }
                return found.count
            }
        }
    }

    // MARK: Rename (an update of key attributes that may replace an existing item)

    /// Changes the key attributes of the one item `source` names to `changes`. If another
    /// item already has the new key it is replaced when `replacing` is true (the old target
    /// is deleted in the same transaction), else errSecDuplicateItem. This is what a
    /// filesystem rename onto an existing name means; it is atomic.
    /// `victim`: an item that the new name already denotes although its primary key differs
    /// (certificates and keys are named by label, which is not in their key); it is deleted in
    /// the same transaction.
    public func rename(_ source: Query, to changes: Attributes, replacing: Bool, victim: Int64? = nil,
                       caller callerArgument: Caller? = nil) throws {
        let caller = callerArgument ?? defaultCaller
        let keys = try currentKeys()
        try storeCall {
            try store.write {
                var one = source
                one.matchLimit = .all
                let found = try matches(one, caller: caller, keys: keys, withData: false)
                guard let (row, attributes) = found.first else {
                    throw KeychainError(.itemNotFound, "\(Self.describe(source)) not found")
                }
                guard found.count == 1 else {
                    throw KeychainError(.param, "\(Self.describe(source)) names \(found.count) items; a rename moves one")
                }
                if let victim, victim != row.id, let doomed = try store.item(id: victim) {
                    try store.delete(id: victim)
                    try updateManifest(keys: keys, removing: doomed, adding: nil)
                }
                var target = attributes
                for (k, v) in changes { target[k] = v }
                let keyOnly = Schema.primaryKey(of: source.itemClass)
                var targetQuery = Query(source.itemClass, synchronizableAny: true)
                for k in keyOnly { targetQuery.attributes[k] = target[k] ?? AttributeValue.defaultValue(for: k.type) }
                targetQuery.matchLimit = .all
                let existing = try matches(targetQuery, caller: caller, keys: keys, withData: true).filter { $0.0.id != row.id }
                if !existing.isEmpty {
                    guard replacing else {
                        throw KeychainError(.duplicateItem, "\(Self.describe(source.itemClass, target)) already exists")
                    }
                    for (victim, _) in existing {
                        try store.delete(id: victim.id)
                        try updateManifest(keys: keys, removing: victim, adding: nil)
                    }
                }
                try update(Query(source.itemClass, synchronizableAny: true, persistentReference: row.id), attributes: changes, caller: caller)
            }
        }
    }

    /// Gives `target` the data of `source` and deletes `source`, in one transaction: what a
    /// temp file renamed over an item means (the item keeps its attributes).
    public func replaceData(of target: Query, withDataOf source: Query, caller callerArgument: Caller? = nil) throws {
        let caller = callerArgument ?? defaultCaller
        let keys = try currentKeys()
        // Both halves' user presence is asked before the transaction (see update).
        var one = source
        one.matchLimit = .all
        var targets = target
        targets.matchLimit = .all
        var granted = caller
        for (row, attributes) in try matches(one, caller: caller, keys: keys, withData: false)
            + matches(targets, caller: caller, keys: keys, withData: false) {
            try checkPresence(KeychainItem(id: row.id, itemClass: source.itemClass, attributes: attributes, data: nil),
                              caller: caller, ui: caller.authenticationUI)
            granted = granted.granting(presenceFor: row.id)
        }
        try storeCall {
            try store.write {
                let found = try matches(one, caller: caller, keys: keys, withData: true)
                guard found.count == 1, let (row, attributes) = found.first else {
                    throw KeychainError(found.isEmpty ? .itemNotFound : .param, "\(Self.describe(source)) must name exactly one item")
                }
                let item = KeychainItem(id: row.id, itemClass: source.itemClass, attributes: attributes, data: nil)
                let data = try openData(row, item: item, keys: keys, caller: granted, ui: caller.authenticationUI)
                try update(target, attributes: [:], data: data, caller: granted)
                try store.delete(id: row.id)
                try updateManifest(keys: keys, removing: row, adding: nil)
            }
        }
    }

    // MARK: SecItemDelete

    /// SecItemDelete: deletes every match. Returns how many were deleted.
    @discardableResult
    public func delete(_ query: Query, caller callerArgument: Caller? = nil) throws -> Int {
        let caller = callerArgument ?? defaultCaller
        guard query.matchLimit == nil else {
            throw KeychainError(.param, "a delete query may not hold kSecMatchLimit")
        }
        let keys = try currentKeys()
        var all = query
        all.matchLimit = .all
        return try storeCall {
            try store.write {
                let found = try matches(all, caller: caller, keys: keys, withData: true)
                guard !found.isEmpty else { throw KeychainError(.itemNotFound, "\(Self.describe(query)) not found") }
                for (row, _) in found {
                    try store.delete(id: row.id)
                    try updateManifest(keys: keys, removing: row, adding: nil)
                }
                return found.count
            }
        }
    }

    // MARK: Matching

    private enum SkipItem: Error { case skip }

    /// Candidate rows for a query, decrypted attributes, filtered. Uses the primary index
    /// when the query names the whole primary key, the secondary index when it names the
    /// grouping attribute, and a class scan otherwise (or when matching ignores case).
    private func matches(_ query: Query, caller: Caller, keys: Keys, withData: Bool) throws -> [(StoredItem, Attributes)] {
        let itemClass = query.itemClass
        guard itemClass != .identity else {
            throw KeychainError(.unimplemented, "identity queries are not supported yet")
        }
        for (attribute, value) in query.attributes {
            guard Schema.belongs(attribute, to: itemClass) else {
                throw KeychainError(.noSuchAttr, "attribute '\(attribute.name)' does not belong to class \(itemClass)")
            }
            guard value.fits(attribute.type) else {
                throw KeychainError(.param, "attribute '\(attribute.name)' has a value of the wrong type")
            }
        }
        let groups: [String]
        if case .string(let g)? = query.attributes[Schema.accessGroup] {
            guard caller.canSee(accessGroup: g) else {
                throw KeychainError(.missingEntitlement, "the caller is not entitled to access group '\(g)'")
            }
            groups = [g]
        } else {
            groups = caller.accessGroups
        }
        let syncValues: [Bool]
        if query.synchronizableAny { syncValues = [false, true] }
        else if case .bool(let s)? = query.attributes[Schema.synchronizable] { syncValues = [s] }
        else { syncValues = [false] }
        let caseInsensitive = query.caseInsensitive == true

        var rows: [StoredItem] = []
        if let id = query.persistentReference {
            if let row = try store.item(id: id, withData: withData) { rows = [row] }
        } else if !caseInsensitive, Schema.primaryKey(of: itemClass).allSatisfy({ $0 == Schema.accessGroup || $0 == Schema.synchronizable || query.attributes[$0] != nil }) {
            for g in groups {
                for s in syncValues {
                    var key = query.attributes
                    key[Schema.accessGroup] = .string(g)
                    key[Schema.synchronizable] = .bool(s)
                    if let row = try store.item(primaryIndex: primaryIndex(itemClass, key, keys: keys), withData: withData) {
                        rows.append(row)
                    }
                }
            }
        } else if !caseInsensitive, let grouping = query.attributes[Schema.groupingAttribute(of: itemClass)] {
            for g in groups {
                rows += try store.items(secondaryIndex: secondaryIndex(itemClass, group: g, grouping, keys: keys), withData: withData)
            }
            rows.sort { $0.id < $1.id }
        } else {
            rows = try store.items(itemClass: itemClass.rawValue, withData: withData)
        }

        var out: [(StoredItem, Attributes)] = []
        for row in rows where row.itemClass == itemClass.rawValue {
            let attributes = try openAttributes(row, itemClass: itemClass, keys: keys)
            guard case .string(let g)? = attributes[Schema.accessGroup], caller.canSee(accessGroup: g), groups.contains(g) else { continue }
            guard case .bool(let s)? = attributes[Schema.synchronizable], syncValues.contains(s) else { continue }
            let all = query.attributes.allSatisfy { attribute, wanted in
                guard let have = attributes[attribute] ?? (Schema.isPrimaryKey(attribute, in: itemClass) ? AttributeValue.defaultValue(for: attribute.type) : nil) else { return false }
                return have.matches(wanted, caseInsensitive: caseInsensitive)
            }
            if all { out.append((row, attributes)) }
        }
        return out
    }

    // MARK: Sealing

    private func primaryIndex(_ itemClass: ItemClass, _ attributes: Attributes, keys: Keys) -> [UInt8] {
        var parts: [[UInt8]] = [Framing.text("kcfs/pidx/v1"), Framing.text(itemClass.rawValue)]
        for key in Schema.primaryKey(of: itemClass) {
            let value = attributes[key] ?? AttributeValue.defaultValue(for: key.type)
            parts.append(AttributeCodec.encode([key: value]))
        }
        return KeyedHash.hash(Framing.frame(parts), key: keys.index)
    }

    private func secondaryIndex(_ itemClass: ItemClass, group: String, _ value: AttributeValue, keys: Keys) -> [UInt8] {
        let attribute = Schema.groupingAttribute(of: itemClass)
        return KeyedHash.hash(Framing.frame([Framing.text("kcfs/sidx/v1"), Framing.text(itemClass.rawValue),
                                             Framing.text(group), AttributeCodec.encode([attribute: value])]), key: keys.index)
    }

    private func attributesAD(id: Int64, itemClass: ItemClass, version: Int64) -> [UInt8] {
        Framing.frame([Framing.text("kcfs/item-attrs/v1"), vaultID, Framing.int(id),
                       Framing.text(itemClass.rawValue), Framing.int(version)])
    }

    /// AD of the wrapped item key and of the data: binds vault, item, field, protection
    /// class, access group and the generation at which they were sealed.
    private func dataAD(_ field: String, id: Int64, itemClass: ItemClass, attributes: Attributes, generation: Int64) -> [UInt8] {
        var group = ""
        if case .string(let g)? = attributes[Schema.accessGroup] { group = g }
        return Framing.frame([Framing.text("kcfs/item-\(field)/v1"), vaultID, Framing.int(id),
                              Framing.text(itemClass.rawValue), Framing.text(Self.accessibility(of: attributes).rawValue),
                              Framing.text(group), Framing.int(generation)])
    }

    private func seal(id: Int64, itemClass: ItemClass, attributes: Attributes, data: [UInt8], version: Int64,
                      keys: Keys, classKey: SecureBytes) throws -> StoredItem {
        // A fresh random item key, in guarded scratch memory for the length of this call.
        let (wrappedKey, sealedData) = try KeyScratch.shared.withKey { itemKey in
            itemKey.fillRandom()
            let wrapped = try itemKey.withBytes {
                try AEAD.seal($0, associatedData: dataAD("key", id: id, itemClass: itemClass, attributes: attributes, generation: version), key: classKey)
            }
            return (wrapped, try AEAD.seal(data, associatedData: dataAD("data", id: id, itemClass: itemClass, attributes: attributes, generation: version), key: itemKey))
        }
        return try resealAttributes(StoredItem(id: id, itemClass: itemClass.rawValue, primaryIndex: [], secondaryIndex: [], version: version - 1,
                                                  dataGeneration: version, sealedAttributes: [], wrappedItemKey: wrappedKey, sealedData: sealedData),
                                       itemClass: itemClass, attributes: attributes, keys: keys)
    }

    /// A new row version with new attributes and indexes; data and item key unchanged.
    private func resealAttributes(_ old: StoredItem, itemClass: ItemClass, attributes: Attributes, keys: Keys) throws -> StoredItem {
        var row = old
        row.version = old.version + 1
        var group = ""
        if case .string(let g)? = attributes[Schema.accessGroup] { group = g }
        row.primaryIndex = primaryIndex(itemClass, attributes, keys: keys)
        row.secondaryIndex = secondaryIndex(itemClass, group: group,
                                            attributes[Schema.groupingAttribute(of: itemClass)] ?? .string(""), keys: keys)
        row.sealedAttributes = try AEAD.seal(AttributeCodec.encode(attributes),
                                             associatedData: attributesAD(id: old.id, itemClass: itemClass, version: row.version),
                                             key: keys.metadata)
        return row
    }

    private func openAttributes(_ row: StoredItem, itemClass: ItemClass, keys: Keys) throws -> Attributes {
        do {
            let plain = try AEAD.open(row.sealedAttributes, associatedData: attributesAD(id: row.id, itemClass: itemClass, version: row.version), key: keys.metadata)
            return try AttributeCodec.decode(plain, itemClass: itemClass)
        } catch {
            throw KeychainError(.decode, "item \(row.id) is damaged or was tampered with: its attributes do not authenticate")
        }
    }

    private func checkPresence(_ item: KeychainItem, caller: Caller, ui: AuthenticationUI) throws {
        guard let ac = item.accessControl, ac.requiresPresence else { return }
        // Asked already (before this write transaction, or at open for a file handle).
        if caller.presenceGrants.contains(item.id) { return }
        switch ui {
        case .skip: throw SkipItem.skip
        case .fail:
            // kSecUseAuthenticationUIFail. Apple answers errSecInteractionNotAllowed; keychainfs
            // says errSecInteractionRequired, so that a non-blocking open can tell "would have
            // to ask" (EAGAIN) from "locked" (EACCES).
            throw KeychainError(.interactionRequired, "\(item.summary) needs user presence, and prompting is not allowed here")
        case .allow:
            guard let presence = caller.presence else {
                throw KeychainError(.interactionNotAllowed, "\(item.summary) needs user presence, and there is no way to ask")
            }
            try presence.verify(item: item, flags: ac.flags, caller: caller)
        }
    }

    private func openData(_ row: StoredItem, item: KeychainItem, keys: Keys, caller: Caller, ui: AuthenticationUI) throws -> [UInt8] {
        let classKey = try self.classKey(item.accessibility, keys: keys, for: item.summary)
        try checkPresence(item, caller: caller, ui: ui)
        let gen = row.dataGeneration
        do {
            return try KeyScratch.shared.withKey { itemKey in
                try AEAD.openKey(row.wrappedItemKey, associatedData: dataAD("key", id: row.id, itemClass: item.itemClass, attributes: item.attributes, generation: gen),
                                 key: classKey, into: itemKey)
                return try AEAD.open(row.sealedData, associatedData: dataAD("data", id: row.id, itemClass: item.itemClass, attributes: item.attributes, generation: gen), key: itemKey)
            }
        } catch {
            throw KeychainError(.decode, "item \(row.id) is damaged or was tampered with: its data does not authenticate")
        }
    }

    private func classKey(_ protection: Accessibility, keys: Keys, for name: String) throws -> SecureBytes {
        if let key = stateLock.withLock({ keys.classKeys[protection] }) { return key }
        if protection.isThisDeviceOnly && keys.deviceMismatch {
            throw KeychainError(.interactionNotAllowed, "\(name) is \(protection.name), and this vault's device key is not on this machine")
        }
        throw KeychainError(.interactionNotAllowed, "\(name) is \(protection.name), and the keychain is locked")
    }

    private func updateManifest(keys: Keys, removing old: StoredItem?, adding new: StoredItem?) throws {
        guard let stored = try store.meta("manifest"), var manifest = Manifest(encoded: stored) else {
            throw KeychainError(.decode, "vault integrity check failed: the manifest is missing or malformed")
        }
        if let old { manifest.remove(Manifest.entry(old, key: keys.manifest)) }
        if let new { manifest.insert(Manifest.entry(new, key: keys.manifest)) }
        try store.setMeta("manifest", manifest.encoded)
    }

    // MARK: Validation

    private func validate(_ attributes: Attributes, in itemClass: ItemClass, forUpdate: Bool) throws {
        for (attribute, value) in attributes {
            guard Schema.belongs(attribute, to: itemClass) else {
                throw KeychainError(.noSuchAttr, "attribute '\(attribute.name)' does not belong to class \(itemClass)")
            }
            guard value.fits(attribute.type) else {
                throw KeychainError(.param, "attribute '\(attribute.name)' has a value of the wrong type")
            }
            if forUpdate && attribute.access != .readWrite {
                throw KeychainError(.readOnlyAttr, "attribute '\(attribute.name)' is read-only")
            }
            guard value.byteCount <= Self.maxAttributeSize else {
                throw KeychainError(.dataTooLarge, "attribute '\(attribute.name)' is \(value.byteCount) bytes, over the limit of \(Self.maxAttributeSize) bytes")
            }
            if case .accessControl(let ac) = value, !AccessControlFlags.supported.isSuperset(of: ac.flags) {
                throw KeychainError(.unimplemented, "access-control flags '\(ac.flags.subtracting(.supported).text)' cannot be enforced on Linux")
            }
        }
    }

    private func checkDataSize(_ data: [UInt8], _ itemClass: ItemClass, _ attributes: Attributes) throws {
        guard data.count <= Self.maxDataSize else {
            throw KeychainError(.dataTooLarge, "the secret for \(Self.describe(itemClass, attributes)) is \(data.count) bytes, over the limit of \(Self.maxDataSize) bytes (1 MiB)")
        }
    }

    private func checkEntitlement(_ attributes: Attributes, caller: Caller) throws {
        if case .string(let g)? = attributes[Schema.accessGroup], !caller.canSee(accessGroup: g) {
            throw KeychainError(.missingEntitlement, "the caller is not entitled to access group '\(g)'")
        }
    }

    private func checkSynchronizable(_ attributes: Attributes, _ itemClass: ItemClass) throws {
        if case .bool(true)? = attributes[Schema.synchronizable], Self.accessibility(of: attributes).isThisDeviceOnly {
            throw KeychainError(.param, "a synchronizable item cannot be \(Self.accessibility(of: attributes).name)")
        }
    }

    private func accessControl(of attributes: Attributes) -> AccessControl? {
        if case .accessControl(let ac)? = attributes[Schema.accessControl] { return ac }
        return nil
    }

    static func accessibility(of attributes: Attributes) -> Accessibility {
        if case .accessibility(let a)? = attributes[Schema.accessible] { return a }
        return .whenUnlocked
    }

    private func storeCall<R>(_ body: () throws -> R) throws -> R {
        do { return try body() } catch let e as KeychainError { throw e } catch {
            throw Self.mapStoreError(error, path: path)
        }
    }

    static func mapStoreError(_ error: any Error, path: String) -> KeychainError {
        switch error {
        case let e as KeychainError: return e
        case StoreError.noSuchFile(let p): return KeychainError(.noSuchKeychain, "no vault at \(p)")
        case StoreError.notAVault(let why): return KeychainError(.decode, "\(path) is not a keychainfs vault (\(why))")
        case StoreError.newerFormat(let found, let supported):
            return KeychainError(.unimplemented, "vault \(path) has schema version \(found), newer than this keychainfs supports (\(supported)); upgrade keychainfs")
        case StoreError.busy: return KeychainError(.notAvailable, "vault \(path) is busy: another process held it for more than 30 s")
        case StoreError.duplicate: return KeychainError(.duplicateItem, "duplicate item")
        case StoreError.sqlite(let code, let message): return KeychainError(.io, "vault \(path): SQLite error \(code): \(message)")
        default: return KeychainError(.io, "vault \(path): \(error)")
        }
    }

    // MARK: Naming items in messages

    /// A secret-free one-line name: class and the attributes that identify the item.
    static func describe(_ itemClass: ItemClass, _ attributes: Attributes, id: Int64? = nil) -> String {
        let shown: [Attribute]
        switch itemClass {
        case .genericPassword: shown = [Schema.service, Schema.account]
        case .internetPassword: shown = [Schema.server, Schema.account, Schema.protocolAttribute, Schema.port, Schema.path]
        default: shown = [Schema.label]
        }
        var parts = [itemClass.rawValue]
        for attribute in shown {
            switch attributes[attribute] {
            case .string(let s)?: if !s.isEmpty || attribute == Schema.account { parts.append("\(attribute.name)=\(quoted(s))") }
            case .number(let n)?: if n != 0 { parts.append("\(attribute.name)=\(n)") }
            default: break
            }
        }
        if let id { parts.append("(item \(id))") }
        return parts.joined(separator: " ")
    }

    static func describe(_ query: Query) -> String {
        query.persistentReference.map { "item \($0)" } ?? describe(query.itemClass, query.attributes)
    }

    /// Quotes a name for a message, escaping control characters so a message stays one line.
    static func quoted(_ s: String) -> String {
        var out = "\""
        for scalar in s.unicodeScalars.prefix(200) {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case _ where scalar.value < 0x20 || scalar.value == 0x7f: out += String(format: "\\x%02x", scalar.value)
            default: out.unicodeScalars.append(scalar)
            }
        }
        if s.unicodeScalars.count > 200 { out += "…" }
        return out + "\""
    }
}

/// The authenticated manifest: a count and the XOR of a keyed hash per row over
/// (id, version, digest of every stored column). XOR makes it updatable in O(1) per change;
/// without the manifest key nobody can compute the entry of a row, so rows cannot be
/// deleted, swapped, altered or replayed without the total changing.
struct Manifest {
    var count: Int64
    var accumulator: [UInt8]

    static let empty = Manifest(count: 0, accumulator: [UInt8](repeating: 0, count: 32))

    init(count: Int64, accumulator: [UInt8]) {
        self.count = count
        self.accumulator = accumulator
    }

    init?(encoded: [UInt8]) {
        guard encoded.count == 40 else { return nil }
        count = encoded[0..<8].reversed().reduce(Int64(0)) { ($0 << 8) | Int64($1) }
        accumulator = Array(encoded[8...])
    }

    var encoded: [UInt8] { Framing.int(count) + accumulator }

    static func entry(_ row: StoredItem, key: SecureBytes) -> [UInt8] {
        let digest = KeyedHash.digest([Framing.text(row.itemClass), row.primaryIndex, row.secondaryIndex,
                                       Framing.int(row.version), Framing.int(row.dataGeneration),
                                       row.sealedAttributes, row.wrappedItemKey, row.sealedData])
        return KeyedHash.hash(Framing.frame([Framing.text("kcfs/manifest/v1"), Framing.int(row.id), Framing.int(row.version), digest]), key: key)
    }

    /// The access policy's entry: XORed in without counting as a row.
    static func policyEntry(_ blob: [UInt8], key: SecureBytes) -> [UInt8] {
        KeyedHash.hash(Framing.frame([Framing.text("kcfs/manifest-policy/v1"), KeyedHash.digest([blob])]), key: key)
    }

    mutating func toggle(_ entry: [UInt8]) { xor(entry) }
    mutating func insert(_ entry: [UInt8]) { xor(entry); count += 1 }
    mutating func remove(_ entry: [UInt8]) { xor(entry); count -= 1 }
    private mutating func xor(_ entry: [UInt8]) {
        for i in 0..<32 { accumulator[i] ^= entry[i] }
    }
}

/// Default locations, after the XDG base directory spec.
public enum KeychainPaths {
    static func xdg(_ variable: String, _ fallback: String) -> String {
        if let v = ProcessInfo.processInfo.environment[variable], v.hasPrefix("/") { return v }
        let home = ProcessInfo.processInfo.environment["HOME"] ?? NSHomeDirectory()
        return home + "/" + fallback
    }

    /// `$KEYCHAINFS_VAULT`, else `$XDG_DATA_HOME/keychainfs/default.vault`.
    public static func defaultVault() -> String {
        if let v = ProcessInfo.processInfo.environment["KEYCHAINFS_VAULT"], !v.isEmpty { return v }
        return xdg("XDG_DATA_HOME", ".local/share") + "/keychainfs/default.vault"
    }

    /// The directory part of a path, without touching the filesystem. (Foundation's
    /// NSString.deletingLastPathComponent crashes on a one-character relative path.)
    public static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        let dir = String(path[..<slash])
        return dir.isEmpty ? "/" : dir
    }

    /// The last component of a path.
    public static func lastComponent(of path: String) -> String {
        path.split(separator: "/").last.map(String.init) ?? path
    }

    /// `$XDG_STATE_HOME/keychainfs`: the device key, daemon logs.
    public static func stateDirectory() -> String {
        xdg("XDG_STATE_HOME", ".local/state") + "/keychainfs"
    }

    /// `$XDG_STATE_HOME/keychainfs/device.key`.
    public static func deviceKey() -> String { stateDirectory() + "/device.key" }
}
