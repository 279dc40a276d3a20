import Foundation
import KeychainImport
import PropertyBased
import Testing

/// The importers' RFC 4180 reader (Sources/Faces/Import/CSV.swift): round trips of random
/// records through the writer, and each malformation named by its line.
@Suite("CSV parser")
struct CSVParserTests {
    /// Characters a CSV field must survive: separators, quotes, every line break, a BOM inside
    /// a field, spaces at the edges, non-ASCII and astral scalars.
    static let pool: [Character] = [
        ",", "\"", "\n", "\r\n", "\r", " ", "a", "Z", "0", "=", ";", "\t", "\u{FEFF}", "é", "ß", "\u{1F600}", "'",
        "\\", "\u{0}",
    ]

    static let records = Generator { rng -> [[String]] in
        (0..<Int.random(in: 1...6, using: &rng)).map { _ in
            (0..<Int.random(in: 2...5, using: &rng)).map { _ in
                String((0..<Int.random(in: 0...8, using: &rng)).map { _ in pool.randomElement(using: &rng)! })
            }
        }
    }

    @Test(
        "random records survive the writer and the reader, quoted or not, with or without a BOM and a last line break")
    func roundTrip() async {
        await propertyCheck(count: 3000, input: Self.records) { records in
            for (quoteAll, bom, trailingBreak) in [(false, false, true), (true, true, false), (false, true, false)] {
                var text = CSV.write(records, quoteAll: quoteAll)
                if !trailingBreak { text.removeLast() }  // "\r\n" is one Character
                let bytes = (bom ? [0xEF, 0xBB, 0xBF] : []) + Array(text.utf8)
                let parsed = try? CSV.parse(bytes)
                #expect(parsed?.map(\.fields) == records, "quoteAll \(quoteAll), bom \(bom): \(records)")
            }
        }
    }

    @Test("each record knows the physical line it starts on, across quoted line breaks")
    func lineNumbers() throws {
        let text = "a,b\n\"multi\nline\",x\r\nc,\"d\r\ne\"\n\nlast,one"
        let parsed = try CSV.parse(Array(text.utf8))
        #expect(parsed.map(\.line) == [1, 2, 4, 7])
        #expect(parsed[1].fields == ["multi\nline", "x"])
        #expect(parsed[2].fields == ["c", "d\r\ne"])
    }

    @Test("malformed files: the line and field are named, never the text")
    func malformed() {
        let cases: [(String, CSVError)] = [
            (
                "a,b\n\"never closed,x\ny,z\n",
                CSVError(line: 2, "field 1 opens a quote that is never closed (the file ends inside it)")
            ),
            (
                "a,b\nse\"cret,x\n",
                CSVError(
                    line: 2,
                    "field 1 has a quote but does not start with one (a field holding quotes must be quoted, its quotes doubled)"
                )
            ),
            ("a,b\nx,\"secret\"tail\n", CSVError(line: 2, "field 2 has text after its closing quote")),
        ]
        for (text, expected) in cases {
            #expect(throws: expected) { try CSV.parse(Array(text.utf8)) }
        }
        #expect(throws: CSVError(line: 3, "field 2 is not valid UTF-8")) {
            try CSV.parse(Array("a,b\nc,d\ne,".utf8) + [0xFF, 0xFE])
        }
    }
}

/// pass's convention and the record → item mapping, without a vault.
@Suite("import mapping")
struct ImportMappingTests {
    @Test("a pass entry: first line the password, login/url lines taken, otpauth dropped, the rest notes")
    func passEntry() throws {
        let plaintext = Array(
            "s3cret pw\r\nLogin: alice\nurl: https://example.com:8443/sign/in\nPIN: 1234\notpauth://totp/x?secret=AAAA\n\nsecond note\n\n"
                .utf8)
        let record = try PassStore.record(entry: "web/example", plaintext: plaintext)
        #expect(record.password == Array("s3cret pw".utf8))
        #expect(record.account == "alice")
        #expect(record.url == "https://example.com:8443/sign/in")
        #expect(record.notes == "PIN: 1234\n\nsecond note")
        #expect(record.dropped.count == 1)
        let item = try record.item()
        #expect(item.itemClass == .internetPassword)
        #expect(
            item.description
                == "inet server=\"example.com\" account=\"alice\" protocol=\"htps\" port=8443 path=\"/sign/in\"")
    }

    @Test("without a URL host an entry is a generic password named by its title; with neither it is an error")
    func genericAndErrors() throws {
        let plain = ImportRecord(origin: "line 2", title: "router", account: "admin", password: [1], url: "not a url")
        let item = try plain.item()
        #expect(item.itemClass == .genericPassword)
        #expect(item.description == "genp service=\"router\" account=\"admin\"")
        let bare = ImportRecord(origin: "line 3", title: "x", url: "www.example.org/login")
        #expect(try bare.item().description == "inet server=\"www.example.org\" account=\"\" path=\"/login\"")
        let nameless = ImportRecord(origin: "line 4", password: [1])
        #expect(throws: ImportError.self) { try nameless.item() }
    }
}
