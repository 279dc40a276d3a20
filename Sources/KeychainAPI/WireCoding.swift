import FoundationEssentials
import Glibc
import Keychain

// The byte-level writer and reader of the API socket's messages (APIWire.swift says the
// layout): u32 little-endian lengths before every variable part, a presence byte before every
// optional, and a reader that refuses anything missing, malformed or left over.

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
        if let extras = presence(item.extras) { part(extras) }
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
        let extras = try optional { try $0.part() }
        return KeychainItem(id: id, itemClass: c, attributes: a, data: data, dataLength: Int(length), extras: extras)
    }
}
