import Foundation
import Keychain
import PropertyBased
import Testing

// Random names for the path codec's property tests: strings of Unicode scalars that favour what
// the codec must get right — its separators and escape characters (`/ % ; : . ~ [ ] =`),
// control bytes, combining marks, canonically equivalent NFC/NFD pairs (é / e + U+0301,
// Å / U+212B / A + U+030A, Hangul syllables and their jamo), U+037E (GREEK QUESTION MARK, whose
// canonical decomposition is `;`), astral scalars — and sometimes very long ones. Never NUL-free
// by accident: NUL is in the pool too (the codec escapes it; the store keeps it).

enum Names {
    /// Scalars the codec treats specially, or that Unicode treats as equal to something else.
    static let tricky: [Unicode.Scalar] = [
        "/", "%", ";", ":", ".", "~", "[", "]", "=", " ", "\\", "\u{0}", "\u{1}", "\n", "\t", "\u{7F}",
        "e", "E", "A", "2", "F", "a", "\u{E9}", "\u{301}", "\u{C5}", "\u{212B}", "\u{30A}", "\u{37E}", "\u{387}",
        "\u{B7}", "\u{AC00}", "\u{1100}", "\u{1161}", "\u{FF1B}", "\u{2215}", "\u{200B}", "\u{FEFF}", "\u{1F600}",
        "\u{10FFFF}", "\u{FFFD}",
    ]

    static func scalar(_ rng: inout any SeededRandomNumberGenerator) -> Unicode.Scalar {
        switch Int.random(in: 0..<100, using: &rng) {
        case 0..<35: return tricky.randomElement(using: &rng)!
        case 35..<60: return Unicode.Scalar(UInt8.random(in: 0x20...0x7E, using: &rng))
        case 60..<70: return Unicode.Scalar(UInt32.random(in: 0x300...0x36F, using: &rng))!  // combining marks
        case 70..<85: return Unicode.Scalar(UInt32.random(in: 0xA0...0x2FFF, using: &rng))!
        case 85..<95:
            let v = UInt32.random(in: 0x3000...0xFFFD, using: &rng)
            return Unicode.Scalar(v) ?? "\u{3000}"  // skips surrogates
        default: return Unicode.Scalar(UInt32.random(in: 0x10000...0x10FFFF, using: &rng))!
        }
    }

    /// A string of `count` random scalars.
    static func string(_ count: Int, _ rng: inout any SeededRandomNumberGenerator) -> String {
        var s = String.UnicodeScalarView()
        for _ in 0..<count { s.append(scalar(&rng)) }
        return String(s)
    }

    /// Mostly short (0–24 scalars, empty included), sometimes 60–300 (past 255 bytes), and
    /// sometimes a leading dot or a trailing tilde, rsync's temp shape `.….XXXXXX`, or an NFC/NFD
    /// twin of a common word.
    static func name(_ rng: inout any SeededRandomNumberGenerator) -> String {
        switch Int.random(in: 0..<100, using: &rng) {
        case 0..<8: return ""
        case 8..<70: return string(Int.random(in: 1...24, using: &rng), &rng)
        case 70..<78: return string(Int.random(in: 60...300, using: &rng), &rng)
        case 78..<84: return "." + string(Int.random(in: 0...8, using: &rng), &rng)
        case 84..<88: return string(Int.random(in: 0...8, using: &rng), &rng) + "~"
        case 88..<90: return "." + string(Int.random(in: 0...8, using: &rng), &rng) + "." + tempSuffix(&rng)
        default:
            let word = [
                "caf\u{E9}", "cafe\u{301}", "\u{C5}ngstr\u{F6}m", "\u{212B}ngstro\u{308}m", "\u{AC00}",
                "\u{1100}\u{1161}", "a\u{37E}b", "a;b", "x;accessGroup=team", "x\u{37E}accessGroup=team",
            ]
            return word.randomElement(using: &rng)!
        }
    }

    /// Six letters or digits: the `XXXXXX` of rsync's temp names (mkstemp's alphabet).
    static func tempSuffix(_ rng: inout any SeededRandomNumberGenerator) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
        return String((0..<6).map { _ in alphabet.randomElement(using: &rng)! })
    }

    /// Its canonical twin: NFD if `s` is NFC, else NFC (often `s` itself).
    static func twin(_ s: String) -> String {
        let nfc = s.precomposedStringWithCanonicalMapping
        return Array(nfc.utf8) == Array(s.utf8) ? s.decomposedStringWithCanonicalMapping : nfc
    }

    /// Whether a scalar is a combining mark (general category M*): Swift's `Character` glues
    /// it to the scalar before it.
    static func isCombining(_ u: Unicode.Scalar) -> Bool {
        switch u.properties.generalCategory {
        case .nonspacingMark, .spacingMark, .enclosingMark: true
        default: false
        }
    }

    static func startsWithCombining(_ s: String) -> Bool { s.unicodeScalars.first.map(isCombining) ?? false }

    /// ASCII bytes the codec splits or brackets on.
    static let separators: Set<Unicode.Scalar> = [";", "=", ":", "[", "]"]
}

extension Array where Element == UInt8 {
    var utf8Text: String { String(decoding: self, as: UTF8.self) }
}

/// The UTF-8 bytes of a string attribute, nil when absent or not a string.
func stringBytes(_ attributes: Attributes?, _ attribute: Attribute) -> [UInt8]? {
    if case .string(let s)? = attributes?[attribute] { return Array(s.utf8) }
    return nil
}

/// A readable, unambiguous rendering of a name for failure messages: scalars as U+XXXX.
func scalars(_ s: String) -> String {
    s.unicodeScalars.map { $0.value < 0x80 && $0.value >= 0x20 ? String($0) : String(format: "<U+%04X>", $0.value) }
        .joined()
}
