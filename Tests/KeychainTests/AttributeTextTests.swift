import Foundation
import Keychain
import Testing

@Suite("AttributeText")
struct AttributeTextTests {
    private func parse(_ name: String, _ text: String, in itemClass: ItemClass = .genericPassword) throws
        -> AttributeValue
    {
        try AttributeText.parse(try Schema.attribute(named: name, in: itemClass), Array(text.utf8))
    }

    private func render(_ name: String, _ value: AttributeValue, in itemClass: ItemClass = .genericPassword) throws
        -> String
    {
        AttributeText.renderString(try Schema.attribute(named: name, in: itemClass), value)
    }

    @Test("dates render as ISO 8601 UTC and parse back, with or without fractional seconds")
    func dates() throws {
        let date = Date(timeIntervalSince1970: 1_769_860_800)  // 2026-01-31T12:00:00Z
        #expect(try render("creationDate", .date(date)) == "2026-01-31T12:00:00Z")
        #expect(try parse("creationDate", "2026-01-31T12:00:00Z") == .date(date))
        #expect(try parse("modificationDate", "2026-01-31T13:00:00+01:00") == .date(date))
        #expect(try parse("creationDate", "2026-01-31T12:00:00.250Z") == .date(date.addingTimeInterval(0.25)))
        for d in [Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: 4_102_444_800), date] {
            #expect(try parse("creationDate", try render("creationDate", .date(d))) == .date(d))
        }
        for bad in ["2026-01-31", "yesterday", "", "2026-13-01T00:00:00Z"] {
            expectError(.param, containing: ["creationDate"]) { try parse("creationDate", bad) }
        }
    }

    @Test("accessibility renders as the constant's name and parses name or code, any case")
    func accessibility() throws {
        for a in Accessibility.allCases {
            #expect(try render("accessible", .accessibility(a)) == a.name)
            #expect(try parse("accessible", a.name) == .accessibility(a))
            #expect(try parse("accessible", a.rawValue) == .accessibility(a))
            #expect(try parse("accessible", a.name.uppercased()) == .accessibility(a))
        }
        #expect(try render("accessible", .accessibility(.afterFirstUnlock)) == "afterFirstUnlock")
        #expect(try parse("accessible", "ck") == .accessibility(.afterFirstUnlock))
        #expect(try parse("accessible", "aku") == .accessibility(.whenUnlockedThisDeviceOnly))
        expectError(.param, containing: ["accessible"]) { try parse("accessible", "whenever") }
    }

    @Test("numbers and booleans")
    func numbersAndBooleans() throws {
        #expect(try render("port", .number(443), in: .internetPassword) == "443")
        #expect(try parse("port", "443", in: .internetPassword) == .number(443))
        #expect(try parse("port", " 8443 ", in: .internetPassword) == .number(8443))
        #expect(try parse("creator", "-1") == .number(-1))
        #expect(try parse("creator", String(Int64.max)) == .number(.max))
        for bad in ["", "4x", "1.5", "99999999999999999999", "0x10"] {
            expectError(.param, containing: ["port"]) { try parse("port", bad, in: .internetPassword) }
        }
        for t in ["true", "TRUE", "1", "yes"] { #expect(try parse("isInvisible", t) == .bool(true)) }
        for f in ["false", "0", "no", " No "] { #expect(try parse("isInvisible", f) == .bool(false)) }
        expectError(.param) { try parse("isInvisible", "maybe") }
        #expect(try render("synchronizable", .bool(true)) == "true")
        #expect(try render("synchronizable", .bool(false)) == "false")
    }

    @Test("type and creator: FourCharCodes parse and render as Apple spells them, and round-trip")
    func fourCharCodes() throws {
        #expect(try parse("type", "abcd") == .number(0x6162_6364))
        #expect(try parse("creator", "ftp ") == .number(0x6674_7020), "a code keeps its trailing space")
        #expect(try parse("creator", "aapl", in: .key) == .number(0x6161_706c))
        #expect(try render("type", .number(0x6162_6364)) == "abcd")
        #expect(try render("creator", .number(0x6674_7020), in: .internetPassword) == "ftp ")
        // Values that are not four printable characters, or whose characters read as a number,
        // render as decimal so that they parse back to themselves.
        for value: Int64 in [0, 42, -1, 0x3132_3334, 0x2020_2020, 0x6162_6300, 0x1_6162_6364, .max] {
            let text = try render("type", .number(value))
            #expect(text == String(value), "\(value)")
            #expect(try parse("type", text) == .number(value))
        }
        for value: Int64 in [0x6162_6364, 0x4141_4141, 0x2161_2020, 0x7e7e_7e7e] {
            #expect(try parse("type", try render("type", .number(value))) == .number(value), "\(value)")
        }
        for bad in ["abc", "abcde", "ab\u{e9}", "ab\tc", ""] {
            expectError(.param, containing: ["type", "four-character code"]) { try parse("type", bad) }
        }
        // Other numbers take no codes: a port is a number.
        expectError(.param, containing: ["port"]) { try parse("port", "abcd", in: .internetPassword) }
        #expect(try render("port", .number(0x6162_6364), in: .internetPassword) == "1633837924")
    }

    @Test("protocol: the name 'https' is stored as the code 'htps' and rendered back as 'https'")
    func protocolNames() throws {
        #expect(try parse("protocol", "https", in: .internetPassword) == .string("htps"))
        #expect(try parse("protocol", "HTTPS", in: .internetPassword) == .string("htps"))
        #expect(try parse("protocol", "htps", in: .internetPassword) == .string("htps"))
        #expect(try parse("protocol", "ssh", in: .internetPassword) == .string("ssh "))
        #expect(try parse("protocol", "ftp ", in: .internetPassword) == .string("ftp "))
        #expect(try parse("protocol", "", in: .internetPassword) == .string(""))
        #expect(try render("protocol", .string("htps"), in: .internetPassword) == "https")
        #expect(try render("protocol", .string("ssh "), in: .internetPassword) == "ssh")
        for (name, code) in InternetProtocol.table {
            #expect(try parse("protocol", name, in: .internetPassword) == .string(code))
            #expect(try render("protocol", .string(code), in: .internetPassword) == name)
        }
        expectError(.param, containing: ["gopher"]) { try parse("protocol", "gopher", in: .internetPassword) }
        // Only the protocol attribute is translated.
        #expect(try render("server", .string("htps"), in: .internetPassword) == "htps")
    }

    @Test("strings are UTF-8; hashes and DER fields are hex; generic and applicationTag are raw bytes")
    func stringsAndData() throws {
        #expect(try parse("service", "ünï/%") == .string("ünï/%"))
        #expect(try render("account", .string("ключ")) == "ключ")
        expectError(.param, containing: ["UTF-8"]) {
            try AttributeText.parse(Schema.service, [0x66, 0xff, 0x66])
        }
        let issuer = try Schema.attribute(named: "issuer", in: .certificate)
        #expect(AttributeText.renderString(issuer, .data([0x00, 0xab, 0xff])) == "00abff")
        #expect(try AttributeText.parse(issuer, Array("00:AB:ff".utf8)) == .data([0x00, 0xab, 0xff]))
        expectError(.param) { try AttributeText.parse(issuer, Array("abc".utf8)) }
        expectError(.param) { try AttributeText.parse(issuer, Array("zz".utf8)) }
        let generic = try Schema.attribute(named: "generic", in: .genericPassword)
        let raw: [UInt8] = [0, 1, 0xff, 0x0a]
        #expect(AttributeText.render(generic, .data(raw)) == raw)
        #expect(try AttributeText.parse(generic, raw) == .data(raw))
        #expect(AttributeText.hex([]) == "" && AttributeText.unhex("") == [])
    }

    @Test("access control renders as flag names and parses with the current protection")
    func accessControl() throws {
        let attr = Schema.accessControl
        let ac = AccessControl(protection: .afterFirstUnlock, flags: [.userPresence, .or, .devicePasscode])
        let text = AttributeText.renderString(attr, .accessControl(ac))
        #expect(text == "userPresence,devicePasscode,or")
        #expect(
            try AttributeText.parse(attr, Array(text.utf8), currentProtection: .afterFirstUnlock) == .accessControl(ac))
        expectError(.param) { try AttributeText.parse(attr, Array("userPresence,faceScan".utf8)) }
    }
}
