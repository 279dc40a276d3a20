import PropertyBased
import Testing

@testable import KeychainAccess

// The daemon log (Sources/KeychainAccess/Log.swift) is one event per line. Names in messages come
// from the vault and may hold any character: `Log.printable` spells control characters `\xHH`, so
// a line can neither be cut short by a NUL nor forge the next one with a line break.
@Suite("daemon log lines")
struct LogLineTests {
    @Test("printable: no control byte is left, everything else is kept in order (3,000 random names)")
    func printableKeepsLinesWhole() async {
        let input = Generator { rng -> String in Names.name(&rng) }
        await propertyCheck(count: 3000, input: input) { name in
            let out = Log.printable(name)
            #expect(!out.contains { $0 < 0x20 || $0 == 0x7F }, "\(name.debugDescription)")
            // Undo the escapes: for a name without a backslash of its own, the bytes come back.
            guard !name.utf8.contains(UInt8(ascii: "\\")) else { return }
            var back: [UInt8] = []
            var i = 0
            while i < out.count {
                if out[i] == UInt8(ascii: "\\"), i + 3 < out.count, out[i + 1] == UInt8(ascii: "x"),
                    let byte = UInt8(String(decoding: out[(i + 2)...(i + 3)], as: UTF8.self), radix: 16)
                {
                    back.append(byte)
                    i += 4
                } else {
                    back.append(out[i])
                    i += 1
                }
            }
            #expect(back == Array(name.utf8), "\(name.debugDescription)")
        }
    }

    @Test("a message holding a line break and a NUL is one line with both spelled out")
    func controlCharactersSpelled() {
        #expect(Log.printable("a\nb\u{0}c\td\u{7F}") == Array(#"a\x0ab\x00c\x09d\x7f"#.utf8))
    }
}
