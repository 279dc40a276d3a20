import Foundation
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
    public static let version: UInt8 = 1
    /// Large enough for an item of the CLI's 1 MiB limit with its attributes, small enough that
    /// a client cannot make the service hold much.
    public static let maxFrame = 4 << 20
    public static let nonceLength = 16
}

/// What a client asks. Each maps onto one verb of the door (`KeychainDoor`).
public enum APIRequest: Equatable, Sendable {
    case copyMatching(WireQuery)
    case add(ItemClass, Attributes, data: [UInt8])
    case update(WireQuery, Attributes, data: [UInt8]?)
    case delete(WireQuery)
    case addOrUpdate(ItemClass, Attributes, data: [UInt8])
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
    case failure(KeychainStatus, String)

    var kind: UInt8 {
        switch self {
        case .items: 1
        case .item: 2
        case .count: 3
        case .status: 4
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
            && a.item.data == b.item.data && a.item.dataLength == b.item.dataLength
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
    fileprivate var wire: UInt8 {
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
        case .add(let c, let a, let data), .addOrUpdate(let c, let a, let data):
            w.itemClass(c)
            w.attributes(a)
            w.part(data)
        case .update(let q, let a, let data):
            w.query(q.query)
            w.attributes(a)
            if let data = w.presence(data) { w.part(data) }
        case .status: break
        case .prove(let passphrase): w.part(passphrase)
        case .changePassphrase(let change):
            w.part(change.old)
            w.part(change.new)
            w.byte(change.rotate ? 1 : 0)
            if let ops = w.presence(change.opsLimit) { w.i64(Int64(bitPattern: ops)) }
            if let mem = w.presence(change.memLimit) { w.i64(Int64(bitPattern: mem)) }
        case .lock: break
        case .unlock(let passphrase): w.part(passphrase)
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
            request = kind == 2 ? .add(c, a, data: data) : .addOrUpdate(c, a, data: data)
        case 3:
            let q = try r.query()
            let a = try r.attributes(q.itemClass)
            let data = try r.optional { try $0.part() }
            request = .update(WireQuery(q), a, data: data)
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

struct WireWriter {
    var bytes: [UInt8] = []

    mutating func byte(_ b: UInt8) { bytes.append(b) }
    mutating func raw(_ b: [UInt8]) { bytes += b }
    mutating func u32(_ v: UInt32) { withUnsafeBytes(of: v.littleEndian) { bytes += $0 } }
    mutating func i64(_ v: Int64) { withUnsafeBytes(of: v.littleEndian) { bytes += $0 } }
    mutating func part(_ b: [UInt8]) {
        u32(UInt32(b.count))
        bytes += b
    }
    mutating func string(_ s: String) { part(Array(s.utf8)) }
    /// The presence byte of an optional; the caller writes the value when this returns it.
    mutating func presence<T>(_ value: T?) -> T? {
        byte(value == nil ? 0 : 1)
        return value
    }
    mutating func flag(_ value: Bool?) { if let v = presence(value) { byte(v ? 1 : 0) } }
    mutating func itemClass(_ c: ItemClass) { string(c.rawValue) }
    mutating func attributes(_ a: Attributes) { part(AttributeCodec.encode(a)) }

    mutating func query(_ q: Query) {
        itemClass(q.itemClass)
        attributes(q.attributes)
        if let limit = presence(q.matchLimit) {
            switch limit {
            case .one: i64(-1)
            case .all: i64(-2)
            case .count(let n): i64(Int64(n))
            }
        }
        flag(q.caseInsensitive)
        flag(q.returnData)
        flag(q.returnAttributes)
        byte(q.synchronizableAny ? 1 : 0)
        if let id = presence(q.persistentReference) { i64(id) }
        if let ui = presence(q.authenticationUI) { byte(ui.wire) }
    }

    mutating func item(_ item: KeychainItem) {
        i64(item.id)
        itemClass(item.itemClass)
        attributes(item.attributes)
        if let data = presence(item.data) { part(data) }
        i64(Int64(item.dataLength))
    }
}

struct WireReader {
    static let bad = KeychainError(.decode, "malformed message on the keychain service's socket")
    let bytes: [UInt8]
    var at = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    mutating func raw(_ n: Int) throws -> [UInt8] {
        guard n >= 0, n <= bytes.count - at else { throw Self.bad }
        defer { at += n }
        return Array(bytes[at..<(at + n)])
    }
    mutating func byte() throws -> UInt8 { try raw(1)[0] }
    mutating func flag() throws -> Bool {
        let b = try byte()
        guard b <= 1 else { throw Self.bad }
        return b == 1
    }
    mutating func u32() throws -> UInt32 { try raw(4).reversed().reduce(0) { ($0 << 8) | UInt32($1) } }
    mutating func i64() throws -> Int64 { try raw(8).reversed().reduce(0) { ($0 << 8) | Int64($1) } }
    mutating func part() throws -> [UInt8] { try raw(Int(try u32())) }
    mutating func string() throws -> String {
        guard let s = String(validating: try part(), as: UTF8.self) else { throw Self.bad }
        return s
    }
    mutating func optional<T>(_ read: (inout WireReader) throws -> T) throws -> T? {
        try flag() ? try read(&self) : nil
    }
    mutating func end() throws { guard at == bytes.count else { throw Self.bad } }

    mutating func itemClass() throws -> ItemClass {
        guard let c = ItemClass(rawValue: try string()) else { throw Self.bad }
        return c
    }
    mutating func attributes(_ c: ItemClass) throws -> Attributes {
        let decoded: Attributes
        do { decoded = try AttributeCodec.decode(try part(), itemClass: c) } catch { throw Self.bad }
        // A date is a finite number of seconds within ±10^11 (3,000 years around 1970): NaN, an
        // infinity or 1e300 would trap wherever a face turns it into an integer (a stat's time).
        for case .date(let d) in decoded.values where !(abs(d.timeIntervalSince1970) < 1e11) {
            throw KeychainError(.param, "a date attribute is out of range")
        }
        return decoded
    }

    mutating func query() throws -> Query {
        let c = try itemClass()
        var q = Query(c, try attributes(c))
        q.matchLimit = try optional { r -> MatchLimit in
            switch try r.i64() {
            case -1: return .one
            case -2: return .all
            case let n where n >= 0 && n <= Int64(Int32.max): return .count(Int(n))
            default: throw Self.bad
            }
        }
        q.caseInsensitive = try optional { try $0.flag() }
        q.returnData = try optional { try $0.flag() }
        q.returnAttributes = try optional { try $0.flag() }
        q.synchronizableAny = try flag()
        q.persistentReference = try optional { try $0.i64() }
        q.authenticationUI = try optional { r -> AuthenticationUI in
            switch try r.byte() {
            case 1: return .allow
            case 2: return .fail
            case 3: return .skip
            default: throw Self.bad
            }
        }
        return q
    }

    mutating func item() throws -> KeychainItem {
        let id = try i64()
        let c = try itemClass()
        let a = try attributes(c)
        let data = try optional { try $0.part() }
        let length = try i64()
        guard length >= 0, length <= Int64(APIWire.maxFrame) else { throw Self.bad }
        return KeychainItem(id: id, itemClass: c, attributes: a, data: data, dataLength: Int(length))
    }
}
