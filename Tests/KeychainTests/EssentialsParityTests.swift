import Foundation
import Keychain
import Testing

/// Issue 28: the product links FoundationEssentials only, so what it used of Foundation's
/// internationalised API is done by hand; each must give what Foundation gave, byte for byte
/// (dates and text that scripts and stored items depend on). Foundation is the oracle here.
@Suite("FoundationEssentials replacements agree with Foundation")
struct EssentialsParityTests {
    let utc: ISO8601DateFormatter = {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime]
        f.timeZone = TimeZone(identifier: "UTC")
        return f
    }()

    @Test("iso8601 writes what ISO8601DateFormatter wrote (rounding, Julian dates before 1582, years past 9999)")
    func iso8601Format() {
        var rng = SystemRandomNumberGenerator()
        for i in 0..<20000 {
            let t: Double =
                switch i % 4 {
                case 0: Double.random(in: -62_135_596_800...800_000_000_000, using: &rng)
                case 1: Double(Int64.random(in: -13_000_000_000...4_000_000_000, using: &rng))
                case 2: Double.random(in: -12_219_724_800 ... -12_218_860_800, using: &rng)
                default: Double.random(in: -100...100, using: &rng)
                }
            let date = Date(timeIntervalSince1970: t)
            #expect(AttributeText.iso8601(date) == utc.string(from: date), "\(t)")
        }
    }

    @Test("parseDate reads an RFC 3339 text as ISO8601DateFormatter did (fraction to the millisecond, offsets)")
    func iso8601Parse() {
        let fractional = ISO8601DateFormatter()
        fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        var rng = SystemRandomNumberGenerator()
        for i in 0..<20000 {
            let t = Double(Int64.random(in: -15_000_000_000...253_402_300_799, using: &rng))
            var text = utc.string(from: Date(timeIntervalSince1970: t))
            text.removeLast()
            let fraction = ["", ".5", ".123456", ".9999", ".0", ".07"][i % 6]
            text += fraction + ["Z", "+02:00", "-0530", "+23", "-00:30"][i % 5]
            let expected = fraction.isEmpty ? utc.date(from: text) : fractional.date(from: text)
            #expect(AttributeText.parseDate(text) == expected, "\(text)")
        }
    }

    @Test("trimming, case-insensitive comparison and hex agree with Foundation")
    func text() {
        let samples = [
            "  a b \t", "\u{3000}x\u{a0}", "", "   ", "\n a \r\n", "\u{85}q\u{2028}", "straße", "STRASSE", "ς", "Σ",
            "e\u{301}", "\u{e9}", "K", "\u{212a}", "ﬁ", "FI", "whenUnlocked", "WHENunlocked",
        ]
        for a in samples {
            #expect(a.trimmingWhitespace() == a.trimmingCharacters(in: .whitespaces), "\(a.debugDescription)")
            #expect(
                a.trimmingWhitespaceAndNewlines() == a.trimmingCharacters(in: .whitespacesAndNewlines),
                "\(a.debugDescription)")
            for b in samples {
                #expect(
                    a.equalsIgnoringCase(b) == (a.compare(b, options: [.caseInsensitive, .literal]) == .orderedSame),
                    "\(a.debugDescription) \(b.debugDescription)")
                #expect(a.containsIgnoringCase(b) == a.localizedCaseInsensitiveContains(b), "\(a) \(b)")
            }
        }
        for v in [0, 1, 15, 16, 0x7f, 0xff] as [UInt32] {
            #expect(AttributeText.hex(v, width: 2) == String(format: "%02x", v))
            #expect(AttributeText.hex(v, width: 2, uppercase: true) == String(format: "%02X", v))
            #expect(AttributeText.hex(v, width: 4) == String(format: "%04x", v))
        }
    }
}
