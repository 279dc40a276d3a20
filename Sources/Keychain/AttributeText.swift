import FoundationEssentials
import Glibc

/// The readable text form of attribute values, shared by every front end (xattr values,
/// CLI options and output, JSON): strings as UTF-8, numbers in decimal, booleans as
/// `true`/`false`, dates in ISO 8601 (UTC), accessibility as the constant's lowerCamel
/// name, access control as its flag names, hashes and DER fields in hex, `generic` and
/// `applicationTag` as raw bytes, protocol as its name (`https`).
public enum AttributeText {
    /// Data attributes whose bytes are the user's own (shown raw); the others are binary
    /// identifiers (hashes, DER) and shown as lowercase hex.
    static let rawDataAttributes: Set<String> = ["generic", "applicationTag"]

    /// Number attributes that Apple spells as a FourCharCode (kSecAttrType, kSecAttrCreator).
    static let fourCharCodeAttributes: Set<String> = ["type", "creator"]

    /// The four characters of a FourCharCode value, as Apple's `security` prints them; nil
    /// (print the decimal) unless they read back as the same value: printable ASCII that does
    /// not also parse as a decimal number ('1234').
    static func fourCharCodeText(_ n: Int64) -> [UInt8]? {
        guard (0...Int64(UInt32.max)).contains(n) else { return nil }
        let bytes = (0..<4).map { UInt8(truncatingIfNeeded: n >> (24 - 8 * $0)) }
        guard fourCharCode(bytes) == n,
            Int64(String(decoding: bytes, as: UTF8.self).trimmingWhitespace()) == nil,
            bytes.contains(where: { $0 != 0x20 })
        else { return nil }
        return bytes
    }

    /// The big-endian value of four ASCII characters ('abcd' → 0x61626364), as a FourCharCode
    /// literal is; nil for anything else (non-ASCII bytes would be ambiguous).
    public static func fourCharCode(_ bytes: [UInt8]) -> Int64? {
        guard bytes.count == 4, bytes.allSatisfy({ (0x20..<0x7f).contains($0) }) else { return nil }
        return bytes.reduce(Int64(0)) { ($0 << 8) | Int64($1) }
    }

    public static func render(_ attribute: Attribute, _ value: AttributeValue) -> [UInt8] {
        switch value {
        case .string(let s):
            if attribute == Schema.protocolAttribute, let name = InternetProtocol.name(for: s) {
                return Array(name.utf8)
            }
            return Array(s.utf8)
        case .data(let d):
            return rawDataAttributes.contains(attribute.name) ? d : Array(hex(d).utf8)
        case .number(let n):
            if fourCharCodeAttributes.contains(attribute.name), let code = fourCharCodeText(n) { return code }
            return Array(String(n).utf8)
        case .bool(let b): return Array((b ? "true" : "false").utf8)
        case .date(let d): return Array(iso8601(d).utf8)
        case .accessibility(let a): return Array(a.name.utf8)
        case .accessControl(let ac): return Array(ac.flags.text.utf8)
        }
    }

    public static func renderString(_ attribute: Attribute, _ value: AttributeValue) -> String {
        String(decoding: render(attribute, value), as: UTF8.self)
    }

    /// Parses the text form. `current` supplies the protection class when an access control
    /// is given as flags only. Invalid text is errSecParam with the attribute named.
    public static func parse(_ attribute: Attribute, _ bytes: [UInt8], currentProtection: Accessibility = .whenUnlocked)
        throws -> AttributeValue
    {
        func text() throws -> String {
            // Validated as UTF-8 over every byte: NUL is a valid character of a value (a service
            // may hold one; the path spells it %00), not the end of a C string.
            guard let s = String(validating: bytes, as: UTF8.self) else {
                throw KeychainError(.param, "value of '\(attribute.name)' is not valid UTF-8 text")
            }
            return s
        }
        let bad = { (why: String) in KeychainError(.param, "invalid value for '\(attribute.name)': \(why)") }
        switch attribute.type {
        case .string:
            let s = try text()
            if attribute == Schema.protocolAttribute {
                if s.isEmpty { return .string("") }
                guard let code = InternetProtocol.code(for: s) else { throw bad("unknown protocol '\(s)'") }
                return .string(code)
            }
            return .string(s)
        case .data:
            if rawDataAttributes.contains(attribute.name) { return .data(bytes) }
            guard let d = unhex(try text()) else { throw bad("expected hexadecimal bytes") }
            return .data(d)
        case .number:
            let s = try text().trimmingWhitespace()
            if let n = Int64(s) { return .number(n) }
            // kSecAttrType and kSecAttrCreator are FourCharCodes ('aapl'): Apple's tools take
            // the four characters, untrimmed ('ftp ' ends in a space).
            if fourCharCodeAttributes.contains(attribute.name) {
                guard let code = fourCharCode(bytes) else {
                    throw bad("expected a four-character code (such as abcd) or a decimal integer")
                }
                return .number(code)
            }
            throw bad("expected a decimal integer")
        case .bool:
            switch try text().trimmingWhitespace().lowercased() {
            case "true", "1", "yes": return .bool(true)
            case "false", "0", "no": return .bool(false)
            default: throw bad("expected true or false")
            }
        case .date:
            guard let d = parseDate(try text()) else {
                throw bad("expected an ISO 8601 date such as 2026-01-31T12:00:00Z")
            }
            return .date(d)
        case .accessibility:
            guard let a = Accessibility(text: try text()) else {
                throw bad("expected one of \(Accessibility.allCases.map(\.name).joined(separator: ", "))")
            }
            return .accessibility(a)
        case .accessControl:
            let s = try text()
            guard let flags = AccessControlFlags(text: s) else {
                throw bad("expected flags such as userPresence or devicePasscode, comma-separated")
            }
            return .accessControl(AccessControl(protection: currentProtection, flags: flags))
        }
    }

    /// `value` in hex, zero-padded to `width` digits: `String(format: "%02x")` without
    /// Foundation (issue 28).
    public static func hex(_ value: some BinaryInteger, width: Int, uppercase: Bool = false) -> String {
        let digits = String(value, radix: 16, uppercase: uppercase)
        return digits.count < width ? String(repeating: "0", count: width - digits.count) + digits : digits
    }

    public static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for b in bytes { out.append(digits[Int(b >> 4)]); out.append(digits[Int(b & 15)]) }
        return String(decoding: out, as: UTF8.self)
    }

    public static func unhex(_ text: String) -> [UInt8]? {
        let chars = Array(text.utf8.filter { $0 != UInt8(ascii: ":") && $0 != UInt8(ascii: " ") })
        guard chars.count % 2 == 0 else { return nil }
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case 48...57: c - 48
            case 97...102: c - 87
            case 65...70: c - 55
            default: nil
            }
        }
        var out = [UInt8]()
        out.reserveCapacity(chars.count / 2)
        var i = 0
        while i < chars.count {
            guard let hi = nibble(chars[i]), let lo = nibble(chars[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }

    public static func iso8601(_ date: Date) -> String { InternetDate.format(date) }

    public static func parseDate(_ text: String) -> Date? {
        // The whole text must be a date-time with every field in range (`internetDateTime`):
        // a lenient reader takes "2026-01-31T12:00:00Zjunk" as a date and "2026-02-30" as
        // March 1st, and what the user wrote would be dropped or moved silently.
        guard let normalized = internetDateTime(text.trimmingWhitespace()) else { return nil }
        return InternetDate.parse(normalized)
    }

    /// An RFC 3339 date-time and nothing else, `t` and `z` upper-cased for the formatter:
    /// `YYYY-MM-DDTHH:MM:SS` (a year of four digits or more, as `iso8601` writes years past
    /// 9999), an optional fraction, then `Z` or an offset `±HH:MM`, `±HHMM` or `±HH`; the month,
    /// the day in that month, the hour, minute and second in range (no leap second, no 24:00).
    static func internetDateTime(_ text: String) -> String? {
        var b = Array(text.utf8)
        func number(_ from: Int, _ count: Int) -> Int? {
            guard from >= 0, from + count <= b.count, b[from..<(from + count)].allSatisfy({ $0 >= 0x30 && $0 <= 0x39 })
            else { return nil }
            return b[from..<(from + count)].reduce(0) { $0 * 10 + Int($1 - 0x30) }
        }
        func at(_ i: Int, _ c: Unicode.Scalar) -> Bool { i < b.count && b[i] == UInt8(ascii: c) }
        var yearDigits = 0
        while yearDigits < b.count, b[yearDigits] >= 0x30 && b[yearDigits] <= 0x39 { yearDigits += 1 }
        let y = yearDigits
        if y + 6 < b.count, b[y + 6] == UInt8(ascii: "t") { b[y + 6] = UInt8(ascii: "T") }
        guard yearDigits >= 4, yearDigits <= 9, let year = number(0, yearDigits), at(y, "-"),
            let month = number(y + 1, 2), (1...12).contains(month), at(y + 3, "-"), let day = number(y + 4, 2),
            day >= 1, day <= Self.days(inMonth: month, year: year), at(y + 6, "T"), let hour = number(y + 7, 2),
            hour <= 23, at(y + 9, ":"), let minute = number(y + 10, 2), minute <= 59, at(y + 12, ":"),
            let second = number(y + 13, 2), second <= 59
        else { return nil }
        var i = y + 15
        if at(i, ".") {
            i += 1
            guard number(i, 1) != nil else { return nil }
            while number(i, 1) != nil { i += 1 }
        }
        if i < b.count, b[i] == UInt8(ascii: "z") { b[i] = UInt8(ascii: "Z") }
        if at(i, "Z") { return i + 1 == b.count ? String(decoding: b, as: UTF8.self) : nil }
        guard at(i, "+") || at(i, "-"), let offsetHours = number(i + 1, 2), offsetHours <= 23 else { return nil }
        switch b.count - (i + 3) {
        case 0: break  // ±HH
        case 2: guard let m = number(i + 3, 2), m <= 59 else { return nil }  // ±HHMM
        case 3: guard at(i + 3, ":"), let m = number(i + 4, 2), m <= 59 else { return nil }  // ±HH:MM
        default: return nil
        }
        return String(decoding: b, as: UTF8.self)
    }

    static func days(inMonth month: Int, year: Int) -> Int {
        switch month {
        case 2: return year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }
}
