import FoundationEssentials
import Glibc
@_spi(CallerRule) import Keychain
import KeychainCrypto
import Synchronization

/// The verbs a face uses to reach the keychain (docs/architecture.md, "The door"). Two doors
/// answer them: `KeychainSession`, over a vault this process holds (the service, and a command
/// that opened the vault itself because no service runs), and the service's socket client
/// (`ServiceClient` in KeychainAPI). A face written against `KeychainDoor` works through either.
public protocol KeychainDoor {
    /// Where the answers come from, for messages: the vault's path, and "(service pid N)"
    /// when a service answers.
    var vaultDescription: String { get }
    /// The vault's path as the one answering opened it (what `ItemPrinter` prints).
    var vaultPath: String { get }
    /// With data, each item's `data` is its secret, the same bytes through every face, and
    /// `extras` what a face kept beside it (git's expiry and refresh token; SecretExtras.swift).
    func copyMatching(_ query: Query) throws -> [KeychainItem]
    /// `extras`: kept beside the secret, sealed with it, handed back only as `extras`.
    @discardableResult func add(_ itemClass: ItemClass, _ attributes: Attributes, data: [UInt8], extras: [UInt8])
        throws -> KeychainItem
    /// New data replaces the extras too (none when `extras` is empty).
    @discardableResult func update(_ query: Query, attributes: Attributes, data: [UInt8]?, extras: [UInt8]) throws
        -> Int
    @discardableResult func delete(_ query: Query) throws -> Int
    @discardableResult func addOrUpdate(
        _ itemClass: ItemClass, _ attributes: Attributes, data: [UInt8], extras: [UInt8]
    ) throws -> (item: KeychainItem, added: Bool)
    // The vault verbs (KeychainSession+Vault.swift): what the CLI's other verbs need.
    /// Every identity the caller can see (a certificate joined with its private key).
    func identities() throws -> [Keychain.Identity]
    /// A key pair made in the vault, and its public key in OpenSSH form ("" when it has none).
    @discardableResult func createKeyPair(_ algorithm: KeyAlgorithm, _ attributes: Attributes) throws -> (
        item: KeychainItem, publicKey: String
    )
    /// An import's store: the core's `storeBatch`, all or nothing (`BatchRefused` names each
    /// refused item); per item, whether it was added.
    func storeBatch(_ items: [NewItem], updateExisting: Bool) throws -> [Bool]
    /// The vault's signed access policy.
    func accessPolicy() throws -> AccessPolicy
    /// Replaces the access policy; the passphrase signs it (and is the authority for it).
    func setAccessPolicy(_ policy: AccessPolicy, passphrase: SecureBytes) throws
    /// A consistent copy of the vault at `destination` (a new file, 0600), checked.
    func backup(to destination: String) throws -> BackupSummary
}

extension KeychainDoor {
    /// The verbs without extras (every face but git's helper).
    @discardableResult public func add(_ itemClass: ItemClass, _ attributes: Attributes, data: [UInt8]) throws
        -> KeychainItem
    { try add(itemClass, attributes, data: data, extras: []) }

    @discardableResult public func update(_ query: Query, attributes: Attributes, data: [UInt8]?) throws -> Int {
        try update(query, attributes: attributes, data: data, extras: [])
    }

    @discardableResult public func addOrUpdate(_ itemClass: ItemClass, _ attributes: Attributes, data: [UInt8]) throws
        -> (item: KeychainItem, added: Bool)
    { try addOrUpdate(itemClass, attributes, data: data, extras: []) }

    /// The one item a query names (match limit one), with data if the query asks.
    public func find(_ query: Query) throws -> KeychainItem {
        var q = query
        q.matchLimit = .one
        guard let first = try copyMatching(q).first else {
            throw KeychainError(.itemNotFound, "the specified item could not be found in the keychain")
        }
        return first
    }

    /// One item by its persistent reference, whatever its synchronizable flag.
    public func item(id: Int64, itemClass: ItemClass, withData: Bool) throws -> KeychainItem {
        try find(Query(itemClass, returnData: withData, synchronizableAny: true, persistentReference: id))
    }
}

/// The one door to the keychain for a caller: a face opens it per request (or per connection)
/// with the `Caller` the access layer built for who is asking, and every verb it calls is
/// decided by the core for that caller and audited here, from the core's own status, so no
/// face chooses what is audited.
public struct KeychainSession: KeychainDoor {
    /// Never handed to a face: a face asks the session's verbs.
    let keychain: Keychain
    public let caller: Caller
    let audit: AuditLog?
    /// What the audit line says after the decision: `via=api`, `via=cli`.
    let via: String
    /// Why this caller has fewer groups than its executable would give it (a socket another
    /// process sent on, an exec since it connected, a traced process): then an answer that
    /// found nothing is audited as a refusal, with this reason.
    let lessened: String?
    /// The words the face's audit lines use for the door's verbs (`.door`: read, search, …;
    /// the Secret Service's `dbus-get-secret`, …).
    let names: AuditNames
    /// `via=… vault=…`, the words every line of this session ends with (spelled once per face
    /// and vault: `VaultWord`).
    let line: String

    public init(
        keychain: Keychain, caller: Caller, audit: AuditLog?, via: String, lessened: String? = nil,
        names: AuditNames = .door
    ) {
        self.init(
            keychain: keychain, caller: caller, audit: audit, via: via, lessened: lessened, names: names,
            line: VaultWord.line(via: via, path: keychain.path))
    }

    init(
        keychain: Keychain, caller: Caller, audit: AuditLog?, via: String, lessened: String?, names: AuditNames,
        line: String
    ) {
        self.line = line
        self.keychain = keychain
        // Its changes carry the face they were made through (ItemChange.origin).
        self.caller = caller.origin == via ? caller : caller.originating(via)
        self.audit = audit
        self.via = via
        self.lessened = lessened
        self.names = names
    }

    public var vaultPath: String { keychain.path }
    public var vaultDescription: String { keychain.path }

    public func copyMatching(_ query: Query) throws -> [KeychainItem] {
        let operation: AuditOperation = query.returnData == true ? .read : .search
        do {
            let items = try keychain.copyMatching(query, caller: caller)
            // One line per item whose secret was handed out; one line for a search.
            if query.returnData == true {
                for item in items { record(item.id, operation, allowed: true) }
            } else {
                record(items.count == 1 ? items[0].id : nil, operation, allowed: true)
            }
            return items
        } catch let e as KeychainError {
            record(query.persistentReference, operation, e)
            throw e
        }
    }

    public func add(_ itemClass: ItemClass, _ attributes: Attributes, data: [UInt8], extras: [UInt8]) throws
        -> KeychainItem
    {
        do {
            let item = try keychain.add(itemClass, attributes, data: data, extras: extras, caller: caller)
            record(item.id, .create, allowed: true)
            return item
        } catch let e as KeychainError {
            record(nil, .create, e)
            throw e
        }
    }

    public func update(_ query: Query, attributes: Attributes, data: [UInt8]?, extras: [UInt8]) throws -> Int {
        do {
            let n = try keychain.update(query, attributes: attributes, data: data, extras: extras, caller: caller)
            record(query.persistentReference, .update, allowed: true, count: n)
            return n
        } catch let e as KeychainError {
            record(query.persistentReference, .update, e)
            throw e
        }
    }

    public func delete(_ query: Query) throws -> Int {
        do {
            let n = try keychain.delete(query, caller: caller)
            record(query.persistentReference, .delete, allowed: true, count: n)
            return n
        } catch let e as KeychainError {
            record(query.persistentReference, .delete, e)
            throw e
        }
    }

    public func addOrUpdate(_ itemClass: ItemClass, _ attributes: Attributes, data: [UInt8], extras: [UInt8]) throws
        -> (item: KeychainItem, added: Bool)
    {
        do {
            let result = try keychain.addOrUpdate(itemClass, attributes, data: data, extras: extras, caller: caller)
            record(result.item.id, result.added ? .create : .update, allowed: true)
            return result
        } catch let e as KeychainError {
            record(nil, .update, e)
            throw e
        }
    }

    func record(
        _ item: Int64?, _ operation: AuditOperation, allowed: Bool, count: Int? = nil, detail extra: String? = nil
    ) {
        audit?.record(caller, item: item, names.word(for: operation), allowed: allowed, detail: detail(count, extra))
    }

    /// A refusal is audited as a deny with the status's name; "not found" is an answer, not a
    /// decision against the caller, and is audited as an allow that found nothing.
    func record(_ item: Int64?, _ operation: AuditOperation, _ error: KeychainError, detail extra: String? = nil) {
        let denied = lessened != nil || (error.status != .itemNotFound && error.status != .duplicateItem)
        let why = error.status.name + (lessened.map { " (" + $0 + ")" } ?? "")
        audit?.record(
            caller, item: item, names.word(for: operation), allowed: !denied, why: why, detail: detail(nil, extra))
    }

    /// What follows the decision on its audit line: a face's own detail first (the ssh agent's
    /// `host=… forwarded=…`), then `via=`, `vault=` and a count.
    func detail(_ count: Int?, _ extra: String?) -> String {
        let counted = count.map { line + " count=\($0)" } ?? line
        return extra.map { $0 + " " + counted } ?? counted
    }
}

/// `via=FACE vault=PATH` as an audit line ends, spelled once per face and vault (the mount
/// writes one per open: spelling the path each time was a third of the line's cost).
enum VaultWord {
    private static let spelled = Mutex<[String: String]>([:])

    static func line(via: String, path: String) -> String {
        let key = via + "\u{0}" + path
        if let line = spelled.withLock({ $0[key] }) { return line }
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        let line = "via=\(via) vault=" + AuditLog.spelled(absolute)
        spelled.withLock { if $0.count < 64 { $0[key] = line } }
        return line
    }
}

/// The operation a face's audit lines name for each door verb: the door's own words by default;
/// the Secret Service's D-Bus words (`dbus-get-secret`, `dbus-search`, `dbus-create`,
/// `dbus-set-secret` or `dbus-set-property`, `dbus-delete`), so its lines read as before it went
/// through the door.
public struct AuditNames: Sendable {
    public var read: AuditOperation = .read
    public var search: AuditOperation = .search
    public var create: AuditOperation = .create
    public var update: AuditOperation = .update
    public var delete: AuditOperation = .delete

    public static let door = AuditNames()

    /// The Secret Service's, with `update` the method that changes (SetSecret, or a property).
    public static func secretService(update: AuditOperation = .dbusSetSecret) -> AuditNames {
        AuditNames(read: .dbusGetSecret, search: .dbusSearch, create: .dbusCreate, update: update, delete: .dbusDelete)
    }

    func word(for operation: AuditOperation) -> AuditOperation {
        switch operation {
        case .read: read
        case .search: search
        case .create: create
        case .update: update
        case .delete: delete
        default: operation
        }
    }
}
