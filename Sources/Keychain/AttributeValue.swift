import FoundationEssentials
import Glibc

/// One attribute value. The case must match the attribute's `AttributeType`. Strings are
/// equal when their UTF-8 bytes are (not Swift's canonical equivalence): the NFC and NFD
/// spellings of `é` are two accounts, as in the byte-keyed indexes and in Apple's keychain.
public enum AttributeValue: Hashable, Sendable {
    case string(String)
    case data([UInt8])
    case number(Int64)
    case bool(Bool)
    case date(Date)
    case accessibility(Accessibility)
    case accessControl(AccessControl)

    /// The value of a key attribute that was not given: key attributes are never null,
    /// a missing account *is* the empty account.
    static func defaultValue(for type: AttributeType) -> AttributeValue {
        switch type {
        case .string: .string("")
        case .data: .data([])
        case .number: .number(0)
        case .bool: .bool(false)
        case .date: .date(Date(timeIntervalSince1970: 0))
        case .accessibility: .accessibility(.whenUnlocked)
        case .accessControl: .accessControl(AccessControl(protection: .whenUnlocked, flags: []))
        }
    }

    func fits(_ type: AttributeType) -> Bool {
        switch (self, type) {
        case (.string, .string), (.data, .data), (.number, .number), (.bool, .bool), (.date, .date),
            (.accessibility, .accessibility), (.accessControl, .accessControl):
            true
        default: false
        }
    }

    /// Size of the value in bytes, for the per-attribute limit.
    var byteCount: Int {
        switch self {
        case .string(let s): s.utf8.count
        case .data(let d): d.count
        default: 8
        }
    }

    /// Equality as a query sees it: strings optionally ignoring case (kSecMatchCaseInsensitive).
    /// Strings compare by their UTF-8 bytes (Swift's `==` would equate NFC and NFD
    /// spellings, which the byte-keyed indexes keep apart: Apple compares exactly too).
    func matches(_ other: AttributeValue, caseInsensitive: Bool) -> Bool {
        if case .string(let a) = self, case .string(let b) = other {
            if caseInsensitive { return a.equalsIgnoringCase(b) }
            return a.utf8.elementsEqual(b.utf8)
        }
        return self == other
    }
}

/// An item's attributes, keyed by schema attribute.
public typealias Attributes = [Attribute: AttributeValue]

/// A compact, versioned binary encoding of an attribute set, sealed as one AEAD box per item.
/// Layout: version byte, then per attribute: code (u8 length + bytes), type tag (u8),
/// value (u32 length + bytes). Decoding is strict: anything unexpected is errSecDecode.
/// Also the attribute part of the service's API messages (Sources/KeychainAPI).
public enum AttributeCodec {
    static let version: UInt8 = 1

    public static func encode(_ attributes: Attributes) -> [UInt8] {
        var out: [UInt8] = [version]
        for (attribute, value) in attributes.sorted(by: { $0.key < $1.key }) {
            let code = Array(attribute.code.utf8)
            out.append(UInt8(code.count)); out += code
            let (tag, bytes) = encode(value)
            out.append(tag)
            withUnsafeBytes(of: UInt32(bytes.count).littleEndian) { out += $0 }
            out += bytes
        }
        return out
    }

    /// A value's type tag and bytes (also the name lists' value encoding, NameList.swift).
    static func encode(_ value: AttributeValue) -> (UInt8, [UInt8]) {
        func int(_ v: Int64) -> [UInt8] { withUnsafeBytes(of: v.littleEndian) { Array($0) } }
        switch value {
        case .string(let s): return (1, Array(s.utf8))
        case .data(let d): return (2, d)
        case .number(let n): return (3, int(n))
        case .bool(let b): return (4, [b ? 1 : 0])
        case .date(let d): return (5, int(Int64(bitPattern: d.timeIntervalSince1970.bitPattern)))
        case .accessibility(let a): return (6, Array(a.rawValue.utf8))
        case .accessControl(let ac):
            return (7, Array(ac.protection.rawValue.utf8) + [0] + int(Int64(ac.flags.rawValue)))
        }
    }

    public static func decode(_ bytes: [UInt8], itemClass: ItemClass) throws -> Attributes {
        let bad = KeychainError(.decode, "item attributes are malformed")
        guard bytes.first == version else { throw bad }
        var i = 1
        var out: Attributes = [:]
        // Items carry 10–20 attributes: growing the dictionary 1, 2, 4, 8, 16 cost a tenth of a decode.
        out.reserveCapacity(16)
        func take(_ n: Int) throws -> ArraySlice<UInt8> {
            guard n >= 0, i + n <= bytes.count else { throw bad }
            defer { i += n }
            return bytes[i..<(i + n)]
        }
        while i < bytes.count {
            let codeLen = Int(try take(1).first!)
            let code = try take(codeLen)
            let tag = try take(1).first!
            let lenBytes = try take(4)
            let len = Int(lenBytes.reversed().reduce(UInt32(0)) { ($0 << 8) | UInt32($1) })
            let v = try take(len)
            guard let attribute = Schema.attribute(codeBytes: code, in: itemClass),
                let value = value(tag: tag, v), value.fits(attribute.type)
            else { throw bad }
            out[attribute] = value
        }
        return out
    }

    /// The value a type tag and its bytes encode, or nil when they are malformed.
    static func value(tag: UInt8, _ v: ArraySlice<UInt8>) -> AttributeValue? {
        func int64(_ s: ArraySlice<UInt8>) -> Int64? {
            guard s.count == 8 else { return nil }
            return s.reversed().reduce(Int64(0)) { ($0 << 8) | Int64($1) }
        }
        switch tag {
        case 1:
            // The standard library's validating decode: Foundation's String(bytes:encoding:) was
            // half of this function (6% of a getxattr) and dropped a leading U+FEFF that the
            // encoder had stored, so such a value did not read back as written.
            return String(validating: v, as: UTF8.self).map { .string($0) }
        case 2: return .data(Array(v))
        case 3: return int64(v).map { .number($0) }
        case 4: return .bool(v.first == 1)
        case 5: return int64(v).map { .date(Date(timeIntervalSince1970: Double(bitPattern: UInt64(bitPattern: $0)))) }
        case 6: return Accessibility(rawValue: String(decoding: v, as: UTF8.self)).map { .accessibility($0) }
        case 7:
            guard let zero = v.firstIndex(of: 0),
                let a = Accessibility(rawValue: String(decoding: v[v.startIndex..<zero], as: UTF8.self)),
                let raw = int64(v[(zero + 1)...])
            else { return nil }
            return .accessControl(
                AccessControl(protection: a, flags: AccessControlFlags(rawValue: UInt32(truncatingIfNeeded: raw))))
        default: return nil
        }
    }
}

/// Length-prefixed concatenation, so that no two different lists of parts encode alike.
/// Used for AEAD associated data and for blind-index inputs.
enum Framing {
    static func frame(_ parts: [[UInt8]]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(parts.reduce(0) { $0 + 4 + $1.count })
        for part in parts {
            withUnsafeBytes(of: UInt32(part.count).littleEndian) { out += $0 }
            out += part
        }
        return out
    }

    /// Appends one framed part (its length, then its bytes) to `out`: `frame` built in place,
    /// for ADs made on every open.
    static func append<Part: Collection>(_ part: Part, to out: inout [UInt8]) where Part.Element == UInt8 {
        withUnsafeBytes(of: UInt32(part.count).littleEndian) { out += $0 }
        out += part
    }

    static func append(_ v: Int64, to out: inout [UInt8]) {
        withUnsafeBytes(of: v.littleEndian) { append($0, to: &out) }
    }

    static func int(_ v: Int64) -> [UInt8] { withUnsafeBytes(of: v.littleEndian) { Array($0) } }
    static func text(_ s: String) -> [UInt8] { Array(s.utf8) }
}

extension AttributeValue {
    public static func == (a: AttributeValue, b: AttributeValue) -> Bool {
        switch (a, b) {
        case (.string(let x), .string(let y)): x.utf8.elementsEqual(y.utf8)
        case (.data(let x), .data(let y)): x == y
        case (.number(let x), .number(let y)): x == y
        case (.bool(let x), .bool(let y)): x == y
        case (.date(let x), .date(let y)): x == y
        case (.accessibility(let x), .accessibility(let y)): x == y
        case (.accessControl(let x), .accessControl(let y)): x == y
        default: false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .string(let s):
            hasher.combine(0)
            hasher.combine(s.utf8.count)
            for b in s.utf8 { hasher.combine(b) }
        case .data(let d): hasher.combine(1); hasher.combine(d)
        case .number(let n): hasher.combine(2); hasher.combine(n)
        case .bool(let v): hasher.combine(3); hasher.combine(v)
        case .date(let d): hasher.combine(4); hasher.combine(d)
        case .accessibility(let a): hasher.combine(5); hasher.combine(a)
        case .accessControl(let c): hasher.combine(6); hasher.combine(c)
        }
    }
}
