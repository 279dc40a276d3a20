import Foundation
import Keychain
import PropertyBased
import Testing

// The text form of attribute values (Sources/Keychain/AttributeText.swift) is what an item's
// xattrs `user.keychain.<name>` hold (docs/xattrs.md). For every attribute of every class in the
// schema table: render → parse gives the value back (strings byte-exact), and parse refuses
// malformed text with KeychainError(.param), never another error and never a crash.

/// The classes with an attribute table of their own (identities borrow cert and keys).
let tableClasses: [ItemClass] = [.genericPassword, .internetPassword, .certificate, .key]

/// Every (class, attribute) of the schema table.
let schemaAttributes: [(ItemClass, Attribute)] = tableClasses.flatMap { c in Schema.attributes(of: c).map { (c, $0) } }

let accessControlFlags: [AccessControlFlags] = [
    .userPresence, .biometryAny, .biometryCurrentSet, .devicePasscode, .or, .and,
    .privateKeyUsage, .applicationPassword,
]

/// Equality as the store sees it: strings by their UTF-8 bytes, the rest by value.
func sameValue(_ a: AttributeValue, _ b: AttributeValue) -> Bool {
    if case .string(let x) = a, case .string(let y) = b { return Array(x.utf8) == Array(y.utf8) }
    return a == b
}

enum Values {
    static func bytes(_ rng: inout any SeededRandomNumberGenerator, _ count: ClosedRange<Int> = 0...48) -> [UInt8] {
        (0..<Int.random(in: count, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
    }

    /// A random valid value of `attribute`, of the kind its xattr can hold (strings may hold NUL,
    /// as `Names.name` makes them).
    static func random(_ attribute: Attribute, _ rng: inout any SeededRandomNumberGenerator) -> AttributeValue {
        switch attribute.type {
        case .string:
            if attribute == Schema.protocolAttribute {
                return .string(Bool.random(using: &rng) ? "" : InternetProtocol.table.randomElement(using: &rng)!.code)
            }
            return .string(Names.name(&rng))
        case .data: return .data(bytes(&rng))
        case .number:
            switch Int.random(in: 0..<4, using: &rng) {
            case 0: return .number(Int64.random(in: -1000...1000, using: &rng))
            case 1: return .number([Int64.min, Int64.max, 0, -1].randomElement(using: &rng)!)
            default: return .number(Int64.random(in: Int64.min...Int64.max, using: &rng))
            }
        case .bool: return .bool(Bool.random(using: &rng))
        case .date:
            // Whole seconds (the text form's precision), 1906 to 2096.
            return .date(
                Date(timeIntervalSince1970: Double(Int64.random(in: -2_000_000_000...4_000_000_000, using: &rng))))
        case .accessibility: return .accessibility(Accessibility.allCases.randomElement(using: &rng)!)
        case .accessControl:
            var flags: AccessControlFlags = []
            for f in accessControlFlags where Bool.random(using: &rng) { flags.insert(f) }
            return .accessControl(
                AccessControl(protection: Accessibility.allCases.randomElement(using: &rng)!, flags: flags))
        }
    }

    /// Text the attribute's type cannot parse.
    static func malformed(_ attribute: Attribute, _ rng: inout any SeededRandomNumberGenerator) -> [UInt8]? {
        let invalidUTF8: [[UInt8]] = [
            [0xFF], [0xC3], [0x61, 0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xC0, 0xAF], [0x80],
        ]
        let junk = [
            "x", "maybe", "1.5", "0x10", "--", "9223372036854775808", "2026-13-01T00:00:00Z", "yesterday",
            "whenever", "userPresence,faceScan", "gopher", "zz", "abc", "true false", "\u{E9}",
            "2026-01-31T12:00:00Zjunk", "2026-01-31T12:00:00Z\u{0}x", "2026-01-31T12:00:00", "2026-01-31T12:00:00.Z",
            "2026-02-30T00:00:00Z", "2026-01-31T24:00:00Z", "2026-01-31T12:60:00Z", "2026-01-31T12:00:60Z",
            "2026-01-31T12:00:00+2400", "2026-01-31T12:00:00+02:0", "2026-1-31T12:00:00Z", "2026-01-31 12:00:00Z",
        ]
        switch attribute.type {
        case .data where ["generic", "applicationTag"].contains(attribute.name): return nil  // raw bytes: anything goes
        case .string where attribute != Schema.protocolAttribute:
            return invalidUTF8.randomElement(using: &rng)!
                + Array(Names.string(Int.random(in: 0...4, using: &rng), &rng).utf8)
        default:
            if Bool.random(using: &rng) { return invalidUTF8.randomElement(using: &rng)! }
            var text = junk.randomElement(using: &rng)! + (Bool.random(using: &rng) ? Names.string(2, &rng) + "!" : "")
            // type and creator take any four printable ASCII characters as a FourCharCode
            // ("0x10" is 0x30783130): one more character makes such junk malformed again.
            if ["type", "creator"].contains(attribute.name), AttributeText.fourCharCode(Array(text.utf8)) != nil {
                text += "!"
            }
            return Array(text.utf8)
        }
    }
}

@Suite("xattr text: render → parse for every schema attribute")
struct XattrTextTests {
    @Test("every attribute of the schema table has a text form that parses back (200 values each)")
    func roundTrip() async {
        let input = Generator { rng -> (ItemClass, Attribute, AttributeValue) in
            let (c, a) = schemaAttributes.randomElement(using: &rng)!
            return (c, a, Values.random(a, &rng))
        }
        await propertyCheck(count: 200 * schemaAttributes.count, input: input) { triple in
            let (itemClass, attribute, value) = triple
            let text = AttributeText.render(attribute, value)
            let protection: Accessibility =
                if case .accessControl(let ac) = value { ac.protection } else { .whenUnlocked }
            do {
                let back = try AttributeText.parse(attribute, text, currentProtection: protection)
                #expect(sameValue(back, value), "\(itemClass).\(attribute): \(value) → \"\(text.utf8Text)\" → \(back)")
            } catch {
                Issue.record("\(itemClass).\(attribute): \(value) → \"\(text.utf8Text)\" does not parse: \(error)")
            }
        }
    }

    @Test("each attribute by itself: boundary values")
    func boundaries() throws {
        for (itemClass, attribute) in schemaAttributes {
            var values: [AttributeValue] = []
            switch attribute.type {
            case .string:
                values =
                    attribute == Schema.protocolAttribute
                    ? [.string("")] + InternetProtocol.table.map { .string($0.code) }
                    : [
                        .string(""), .string(" "), .string("caf\u{E9}"), .string("cafe\u{301}"), .string("\u{37E}"),
                        .string("a\nb"),
                        .string(String(repeating: "\u{1F600}", count: 300)),
                    ]
            case .data: values = [.data([]), .data([0]), .data(Array(0...255))]
            case .number: values = [.number(0), .number(.min), .number(.max), .number(-1)]
            case .bool: values = [.bool(true), .bool(false)]
            case .date:
                values = [.date(Date(timeIntervalSince1970: 0)), .date(Date(timeIntervalSince1970: 4_102_444_799))]
            case .accessibility: values = Accessibility.allCases.map { .accessibility($0) }
            case .accessControl:
                values = [
                    .accessControl(AccessControl(protection: .whenUnlocked, flags: [])),
                    .accessControl(
                        AccessControl(protection: .whenUnlocked, flags: AccessControlFlags(accessControlFlags))),
                ]
            }
            for value in values {
                let text = AttributeText.render(attribute, value)
                let back = try AttributeText.parse(attribute, text)
                #expect(sameValue(back, value), "\(itemClass).\(attribute): \(value) → \"\(text.utf8Text)\" → \(back)")
            }
        }
    }

    @Test("malformed text is KeychainError(.param) naming the attribute, for every attribute that can be malformed")
    func malformedIsParam() async {
        let input = Generator { rng -> (Attribute, [UInt8])? in
            let (_, a) = schemaAttributes.randomElement(using: &rng)!
            return Values.malformed(a, &rng).map { (a, $0) }
        }
        await propertyCheck(count: 3000, input: input) { pair in
            guard let (attribute, bytes) = pair else { return }
            do {
                let value = try AttributeText.parse(attribute, bytes)
                Issue.record("\(attribute) accepted malformed \(bytes) as \(value)")
            } catch let error as KeychainError {
                #expect(error.status == .param, "\(attribute) \(bytes): \(error.status) \(error.message)")
                #expect(error.message.contains(attribute.name), "message does not name \(attribute): \(error.message)")
            } catch {
                Issue.record("\(attribute) \(bytes): not a KeychainError: \(error)")
            }
        }
    }

    @Test("empty text is refused where the type has no empty value (number, bool, date, accessibility)")
    func emptyText() {
        for (itemClass, attribute) in schemaAttributes
        where [.number, .bool, .date, .accessibility].contains(attribute.type) {
            do {
                let value = try AttributeText.parse(attribute, [])
                Issue.record("\(itemClass).\(attribute) accepted empty text as \(value)")
            } catch {
                #expect((error as? KeychainError)?.status == .param, "\(itemClass).\(attribute): \(error)")
            }
        }
    }

    @Test("random bytes: parse either gives a value or KeychainError(.param), for every attribute")
    func randomBytesNeverCrash() async {
        let input = Generator { rng -> (Attribute, [UInt8]) in
            (schemaAttributes.randomElement(using: &rng)!.1, Values.bytes(&rng, 0...24))
        }
        await propertyCheck(count: 5000, input: input) { pair in
            let (attribute, bytes) = pair
            do {
                _ = try AttributeText.parse(attribute, bytes)
            } catch let error as KeychainError {
                #expect(error.status == .param, "\(attribute) \(bytes): \(error.status)")
            } catch {
                Issue.record("\(attribute) \(bytes): not a KeychainError: \(error)")
            }
        }
    }

    @Test("dates: every RFC 3339 form the user may write is the same instant; a date out of range is refused")
    func dateForms() throws {
        let attribute = Schema.named("startDate")
        let noon = try AttributeText.parse(attribute, Array("2026-01-31T12:00:00Z".utf8))
        for text in [
            "2026-01-31t12:00:00z", " 2026-01-31T12:00:00Z ", "2026-01-31T14:00:00+02:00", "2026-01-31T14:00:00+0200",
            "2026-01-31T14:00:00+02", "2026-01-31T11:30:00-00:30", "2026-01-31T12:00:00.000Z",
        ] {
            #expect(sameValue(try AttributeText.parse(attribute, Array(text.utf8)), noon), "\(text)")
        }
        #expect(throws: Never.self) { try AttributeText.parse(attribute, Array("2024-02-29T00:00:00Z".utf8)) }
        #expect(throws: KeychainError.self) { try AttributeText.parse(attribute, Array("2023-02-29T00:00:00Z".utf8)) }
        // Years past 9999, as `iso8601` renders them, read back.
        let far = AttributeValue.date(Date(timeIntervalSince1970: 253_402_387_200))  // 10000-01-02
        let text = AttributeText.render(attribute, far)
        #expect(text == Array("10000-01-02T00:00:00Z".utf8))
        #expect(sameValue(try AttributeText.parse(attribute, text), far))
    }

    @Test("a string holding NUL renders and its text parses back to the same value")
    func nulInString() throws {
        // The xattr value "a\0b" is three bytes and valid UTF-8: an item whose service holds NUL
        // (possible through the CLI and the store; PathCodec spells it %00) must be able to have
        // that attribute written back through setxattr. Bytes that are not UTF-8 are still refused.
        let value = AttributeValue.string("a\u{0}b")
        let text = AttributeText.render(Schema.service, value)
        #expect(text == [0x61, 0, 0x62])
        let back = try AttributeText.parse(Schema.service, text)
        #expect(sameValue(back, value))
        #expect(throws: KeychainError.self) { try AttributeText.parse(Schema.service, [0x61, 0, 0xFF]) }
    }
}
