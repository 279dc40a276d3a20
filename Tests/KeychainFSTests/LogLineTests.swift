import PropertyBased
import Testing

@testable import KeychainAccess

// The daemon log (Sources/KeychainAccess/Log.swift) is one event per line. Names in messages come
// from the vault and may hold any character: `Log.printable` spells what could break or disguise a
// line (`\xHH`, `\u{HHHH}`), so a line can neither be cut short by a NUL nor forge the next one
// with a line break.
@Suite("daemon log lines")
struct LogLineTests {
    /// Undoes `Log.printable`.
    static func unescape(_ out: [UInt8]) -> [UInt8]? {
        var back: [UInt8] = []
        var i = 0
        while i < out.count {
            guard out[i] == UInt8(ascii: "\\") else {
                back.append(out[i])
                i += 1
                continue
            }
            if i + 3 < out.count, out[i + 1] == UInt8(ascii: "x"),
                let byte = UInt8(String(decoding: out[(i + 2)...(i + 3)], as: UTF8.self), radix: 16)
            {
                back.append(byte)
                i += 4
            } else if i + 7 < out.count, out[i + 1] == UInt8(ascii: "u"), out[i + 2] == UInt8(ascii: "{"),
                out[i + 7] == UInt8(ascii: "}"),
                let v = UInt32(String(decoding: out[(i + 3)...(i + 6)], as: UTF8.self), radix: 16),
                let scalar = Unicode.Scalar(v)
            {
                UTF8.encode(scalar) { back.append($0) }
                i += 8
            } else {
                return nil
            }
        }
        return back
    }

    @Test("printable: no control or line-breaking character is left, and it reads back exactly (3,000 random names)")
    func printableKeepsLinesWhole() async {
        let input = Generator { rng -> String in Names.name(&rng) }
        await propertyCheck(count: 3000, input: input) { name in
            let out = Log.printable(name)
            #expect(!out.contains { $0 < 0x20 || $0 == 0x7F }, "\(name.debugDescription)")
            let text = String(decoding: out, as: UTF8.self)
            #expect(
                !text.unicodeScalars.contains {
                    (0x80...0x9F).contains($0.value) || $0 == "\u{2028}" || $0 == "\u{202E}"
                },
                "\(name.debugDescription)")
            // Without a `\` of the name's own (left as it is), the escapes read back exactly.
            guard !name.unicodeScalars.contains("\\") else { return }
            #expect(Self.unescape(out) == Array(name.utf8), "\(name.debugDescription)")
        }
    }

    @Test("a message holding a line break, a NUL, a C1 control and a bidi override is spelled out")
    func controlCharactersSpelled() {
        #expect(
            Log.printable("a\nb\u{0}c\td\u{7F}e\u{202E}f\u{85}")
                == Array(#"a\x0ab\x00c\x09d\x7fe\u{202e}f\u{0085}"#.utf8))
    }
}
