import FoundationEssentials
import Glibc
import Keychain

/// The keychain service's API socket protocol (docs/service.md, "The API socket"): what the
/// CLI, the credential helpers, `run` and `inject` send the one service that holds the unlocked
/// vault, and its answers. Binary, length-framed, strict: anything unexpected is a decode error,
/// never a guess.
///
/// A frame is a u32 little-endian length (at most `maxFrame`) and that many bytes. The server
/// speaks first with a hello (`APIHello`: version and a fresh 16-byte nonce); every request
/// carries the nonce back, so that no byte written before the server pinned its peer (a request
/// sent, then `execve` at once) can be taken as a request (docs/security.md, "The service's
/// callers").
public enum APIWire {
    public static let version: UInt8 = 2
    /// Large enough for an item of the CLI's 1 MiB limit with its attributes, small enough that
    /// a client cannot make the service hold much.
    public static let maxFrame = 4 << 20
    public static let nonceLength = 16
}

/// What a client asks. Each maps onto one verb of the door (`KeychainDoor`).
public enum APIRequest: Equatable, Sendable {
    case copyMatching(WireQuery)
    case add(ItemClass, Attributes, data: [UInt8], extras: [UInt8])
    case update(WireQuery, Attributes, data: [UInt8]?, extras: [UInt8])
    case delete(WireQuery)
    case addOrUpdate(ItemClass, Attributes, data: [UInt8], extras: [UInt8])
    /// The service's lock state and the vault it holds.
    case status
    /// The vault's passphrase, checked by the service (one KDF): the connection then acts as
    /// its holder, in every access group (what a command that opened the vault itself gets).
    case prove(passphrase: [UInt8])
    /// `keychainfs passwd [--rotate]` while a service holds the vault: the service changes it,
    /// so every face it hosts goes on with the new keys.
    case changePassphrase(PassphraseChange)
    /// `keychainfs lock --vault`: every face of the service loses the WhenUnlocked keys at once.
    case lock
    /// `keychainfs unlock --vault`, with the passphrase.
    case unlock(passphrase: [UInt8])
    /// Every identity the caller can see: replied as `items`, certificate then key, per identity.
    case identities
    /// `create-keypair`: a key pair made in the vault.
    case createKeyPair(KeyAlgorithm, Attributes)
    /// An import's all-or-nothing store (the core's `storeBatch`).
    case storeBatch([WireNewItem], updateExisting: Bool)
    /// The vault's access policy (`access-group list`, `presence list`).
    case accessPolicy
    /// A new access policy, with the passphrase that signs it (checked by the service).
    case setAccessPolicy(AccessPolicy, passphrase: [UInt8])
    /// `backup`: the service writes a consistent copy of its vault to a new file at this
    /// absolute path.
    case backup(destination: String)
    /// `keychainfs mount` joining this service: it mounts the vault itself (MountRequest.swift).
    case mount(MountRequest)
    /// `keychainfs watch`: the logged changes after `since` (nil: from now on; -1: from the
    /// oldest the log retains), then, with `follow`, each commit's as it commits, as `changes`
    /// replies until the client closes; without, the service closes the stream once it has sent
    /// what the log held (APIWireWatch.swift).
    case watch(since: Int64?, follow: Bool)

    var kind: UInt8 {
        switch self {
        case .copyMatching: 1
        case .add: 2
        case .update: 3
        case .delete: 4
        case .addOrUpdate: 5
        case .status: 6
        case .prove: 7
        case .changePassphrase: 8
        case .lock: 9
        case .unlock: 10
        case .identities: 11
        case .createKeyPair: 12
        case .storeBatch: 13
        case .accessPolicy: 14
        case .setAccessPolicy: 15
        case .backup: 16
        case .watch: 17
        case .mount: 32
        }
    }
}

/// A passphrase change (and, with `rotate`, a new master key), with the Argon2id cost to use
/// from now on (nil: keep the vault's).
public struct PassphraseChange: Equatable, Sendable {
    public var old: [UInt8]
    public var new: [UInt8]
    public var rotate: Bool
    public var opsLimit: UInt64?
    public var memLimit: UInt64?
    public init(old: [UInt8], new: [UInt8], rotate: Bool, opsLimit: UInt64? = nil, memLimit: UInt64? = nil) {
        self.old = old
        self.new = new
        self.rotate = rotate
        self.opsLimit = opsLimit
        self.memLimit = memLimit
    }
}

/// A `Query` as it crosses the socket (`Query` itself is not Equatable: its fields are).
public struct WireQuery: Equatable, Sendable {
    public var query: Query
    public init(_ query: Query) { self.query = query }

    public static func == (a: WireQuery, b: WireQuery) -> Bool {
        let x = a.query, y = b.query
        return x.itemClass == y.itemClass && x.attributes == y.attributes && x.matchLimit == y.matchLimit
            && x.caseInsensitive == y.caseInsensitive && x.returnData == y.returnData
            && x.returnAttributes == y.returnAttributes && x.synchronizableAny == y.synchronizableAny
            && x.persistentReference == y.persistentReference && x.authenticationUI == y.authenticationUI
    }
}

/// What the service answers.
public enum APIReply: Equatable, Sendable {
    case items([WireItem])
    case item(WireItem, added: Bool)
    case count(Int)
    /// `status`: the vault's path as the service opened it, and its lock state's text.
    case status(vault: String, state: String)
    /// `createKeyPair`: the key item and its public key in OpenSSH form.
    case keyPair(WireItem, publicKey: String)
    /// `storeBatch`: per item, whether it was added (else updated).
    case stored([Bool])
    /// `storeBatch` refused: nothing stored; each refused item by its place, status and message.
    case refused([WireRefusal])
    /// `accessPolicy`.
    case policy(AccessPolicy)
    /// `backup`: what the copy holds.
    case backup(items: Int, format: Int64, counter: Int64?)
    /// A `watch` stream's frame: the log's last sequence number so far and the changes since the
    /// previous frame (the first frame may hold none: the stream has started).
    case changes(last: Int64, [WireChange])
    case failure(KeychainStatus, String)

    var kind: UInt8 {
        switch self {
        case .items: 1
        case .item: 2
        case .count: 3
        case .status: 4
        case .keyPair: 5
        case .stored: 6
        case .refused: 7
        case .policy: 8
        case .backup: 9
        case .changes: 10
        case .failure: 0
        }
    }
}

/// A `KeychainItem` as it crosses the socket.
public struct WireItem: Equatable, Sendable {
    public var item: KeychainItem
    public init(_ item: KeychainItem) { self.item = item }

    public static func == (a: WireItem, b: WireItem) -> Bool {
        a.item.id == b.item.id && a.item.itemClass == b.item.itemClass && a.item.attributes == b.item.attributes
            && a.item.data == b.item.data && a.item.dataLength == b.item.dataLength && a.item.extras == b.item.extras
    }
}

/// The server's first frame.
public struct APIHello: Equatable, Sendable {
    public var version: UInt8
    public var nonce: [UInt8]
    public init(version: UInt8 = APIWire.version, nonce: [UInt8]) {
        self.version = version
        self.nonce = nonce
    }
}

extension AuthenticationUI {
    var wire: UInt8 {
        switch self {
        case .allow: 1
        case .fail: 2
        case .skip: 3
        }
    }
}

/// Encoding. Every variable-length part is u32-length-prefixed, every optional has a presence byte.
public enum APICodec {
    public static func encode(_ hello: APIHello) -> [UInt8] {
        var w = WireWriter()
        w.byte(0)
        w.byte(hello.version)
        w.raw(hello.nonce)
        return w.bytes
    }

    public static func decodeHello(_ bytes: [UInt8]) throws -> APIHello {
        var r = WireReader(bytes)
        guard try r.byte() == 0 else { throw WireReader.bad }
        let version = try r.byte()
        let nonce = try r.raw(APIWire.nonceLength)
        try r.end()
        return APIHello(version: version, nonce: nonce)
    }

    public static func encode(_ request: APIRequest, nonce: [UInt8]) -> [UInt8] {
        var w = WireWriter()
        w.byte(request.kind)
        w.raw(nonce)
        switch request {
        case .copyMatching(let q), .delete(let q): w.query(q.query)
        case .add(let c, let a, let data, let extras), .addOrUpdate(let c, let a, let data, let extras):
            w.itemClass(c)
            w.attributes(a)
            w.part(data)
            w.part(extras)
        case .update(let q, let a, let data, let extras):
            w.query(q.query)
            w.attributes(a)
            if let data = w.presence(data) { w.part(data) }
            w.part(extras)
        case .status: break
        case .prove(let passphrase): w.part(passphrase)
        case .changePassphrase(let change):
            w.part(change.old)
            w.part(change.new)
            w.byte(change.rotate ? 1 : 0)
            if let ops = w.presence(change.opsLimit) { w.i64(Int64(bitPattern: ops)) }
            if let mem = w.presence(change.memLimit) { w.i64(Int64(bitPattern: mem)) }
        case .lock, .identities, .accessPolicy: break
        case .unlock(let passphrase): w.part(passphrase)
        case .createKeyPair(let algorithm, let a):
            w.string(algorithm.rawValue)
            w.attributes(a)
        case .storeBatch(let items, let updateExisting):
            w.byte(updateExisting ? 1 : 0)
            w.u32(UInt32(items.count))
            for new in items {
                w.itemClass(new.item.itemClass)
                w.attributes(new.item.attributes)
                w.part(new.item.data)
            }
        case .setAccessPolicy(let policy, let passphrase):
            w.part(policy.encoded)
            w.part(passphrase)
        case .backup(let destination): w.string(destination)
        case .watch(let since, let follow):
            if let since = w.presence(since) { w.i64(since) }
            w.byte(follow ? 1 : 0)
        case .mount(let m): w.mountRequest(m)
        }
        return w.bytes
    }

    /// The request and the nonce it carried.
    public static func decodeRequest(_ bytes: [UInt8]) throws -> (APIRequest, nonce: [UInt8]) {
        var r = WireReader(bytes)
        let kind = try r.byte()
        let nonce = try r.raw(APIWire.nonceLength)
        let request: APIRequest
        switch kind {
        case 1: request = .copyMatching(WireQuery(try r.query()))
        case 2, 5:
            let c = try r.itemClass()
            let a = try r.attributes(c)
            let data = try r.part()
            let extras = try r.part()
            request =
                kind == 2 ? .add(c, a, data: data, extras: extras) : .addOrUpdate(c, a, data: data, extras: extras)
        case 3:
            let q = try r.query()
            let a = try r.attributes(q.itemClass)
            let data = try r.optional { try $0.part() }
            request = .update(WireQuery(q), a, data: data, extras: try r.part())
        case 4: request = .delete(WireQuery(try r.query()))
        case 6: request = .status
        case 7: request = .prove(passphrase: try r.part())
        case 8:
            let old = try r.part()
            let new = try r.part()
            let rotate = try r.flag()
            let ops = try r.optional { UInt64(bitPattern: try $0.i64()) }
            let mem = try r.optional { UInt64(bitPattern: try $0.i64()) }
            request = .changePassphrase(
                PassphraseChange(old: old, new: new, rotate: rotate, opsLimit: ops, memLimit: mem))
        case 9: request = .lock
        case 10: request = .unlock(passphrase: try r.part())
        case 11: request = .identities
        case 12:
            guard let algorithm = KeyAlgorithm(rawValue: try r.string()) else { throw WireReader.bad }
            request = .createKeyPair(algorithm, try r.attributes(.key))
        case 13: request = try r.storeBatch(frame: bytes.count)
        case 14: request = .accessPolicy
        case 15: request = .setAccessPolicy(try r.policy(), passphrase: try r.part())
        case 16: request = .backup(destination: try r.string())
        case 17: request = .watch(since: try r.optional { try $0.i64() }, follow: try r.flag())
        case 32: request = .mount(try r.mountRequest())
        default: throw WireReader.bad
        }
        try r.end()
        return (request, nonce)
    }

    public static func encode(_ reply: APIReply) -> [UInt8] {
        var w = WireWriter()
        w.byte(reply.kind)
        switch reply {
        case .items(let items):
            w.u32(UInt32(items.count))
            for item in items { w.item(item.item) }
        case .item(let item, let added):
            w.item(item.item)
            w.byte(added ? 1 : 0)
        case .count(let n): w.i64(Int64(n))
        case .status(let vault, let state):
            w.string(vault)
            w.string(state)
        case .keyPair(let item, let publicKey):
            w.item(item.item)
            w.string(publicKey)
        case .stored(let added):
            w.u32(UInt32(added.count))
            for a in added { w.byte(a ? 1 : 0) }
        case .refused(let refusals):
            w.u32(UInt32(refusals.count))
            for refusal in refusals {
                w.i64(Int64(refusal.index))
                w.i64(Int64(refusal.status.rawValue))
                w.string(refusal.message)
            }
        case .policy(let policy): w.part(policy.encoded)
        case .backup(let items, let format, let counter):
            w.i64(Int64(items))
            w.i64(format)
            if let counter = w.presence(counter) { w.i64(counter) }
        case .changes(let last, let changes): w.changes(last: last, changes)
        case .failure(let status, let message):
            w.i64(Int64(status.rawValue))
            w.string(message)
        }
        return w.bytes
    }

    public static func decodeReply(_ bytes: [UInt8]) throws -> APIReply {
        var r = WireReader(bytes)
        let reply: APIReply
        switch try r.byte() {
        case 1:
            let n = Int(try r.u32())
            // Each item takes at least 30 bytes: a count beyond what the frame holds is a lie.
            guard n <= bytes.count / 30 else { throw WireReader.bad }
            var items: [WireItem] = []
            items.reserveCapacity(n)
            for _ in 0..<n { items.append(WireItem(try r.item())) }
            reply = .items(items)
        case 2:
            let item = try r.item()
            let added = try r.byte()
            guard added <= 1 else { throw WireReader.bad }
            reply = .item(WireItem(item), added: added == 1)
        case 3:
            let n = try r.i64()
            guard n >= 0, n <= Int64(Int32.max) else { throw WireReader.bad }
            reply = .count(Int(n))
        case 4: reply = .status(vault: try r.string(), state: try r.string())
        case 5: reply = .keyPair(WireItem(try r.item()), publicKey: try r.string())
        case 6:
            let n = Int(try r.u32())
            guard n <= bytes.count else { throw WireReader.bad }
            reply = .stored(try (0..<n).map { _ in try r.flag() })
        case 7:
            let n = Int(try r.u32())
            // Each refusal takes at least 20 bytes.
            guard n <= bytes.count / 20 else { throw WireReader.bad }
            reply = .refused(try (0..<n).map { _ in try r.refusal() })
        case 8: reply = .policy(try r.policy())
        case 9:
            let items = try r.i64()
            guard items >= 0, items <= Int64(Int32.max) else { throw WireReader.bad }
            reply = .backup(items: Int(items), format: try r.i64(), counter: try r.optional { try $0.i64() })
        case 10: reply = try r.changes(frame: bytes.count)
        case 0:
            let raw = try r.i64()
            guard let status = Int32(exactly: raw) else { throw WireReader.bad }
            reply = .failure(KeychainStatus(rawValue: status), try r.string())
        default: throw WireReader.bad
        }
        try r.end()
        return reply
    }
}
