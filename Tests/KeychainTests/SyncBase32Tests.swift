import Foundation
import Testing

@testable import Keychain

// The one base32 codec of the pairing and recovery codes: RFC 4648's vectors, byte-exact round
// trips of random strings, and strictness (alphabet, length, unused bits).

@Suite("sync base32")
struct SyncBase32Tests {
    @Test("RFC 4648 test vectors, without padding")
    func vectors() throws {
        let cases = [
            ("", ""), ("f", "MY"), ("fo", "MZXQ"), ("foo", "MZXW6"), ("foob", "MZXW6YQ"), ("fooba", "MZXW6YTB"),
            ("foobar", "MZXW6YTBOI"),
        ]
        for (plain, encoded) in cases {
            #expect(Base32.encode(bytes(plain)) == encoded)
            #expect(try Base32.decode(encoded) == bytes(plain))
            #expect(try Base32.decode(encoded.lowercased()) == bytes(plain))
        }
    }

    @Test("5,000 random byte strings round trip byte-exact, plain, lower-case and grouped")
    func roundTrips() throws {
        var rng = SyncRNG(seed: 4648)
        for _ in 0..<5000 {
            let raw = rng.bytes(Int.random(in: 0...80, using: &rng))
            let text = Base32.encode(raw)
            #expect(text.count == (raw.count * 8 + 4) / 5)
            #expect(text.utf8.allSatisfy { Base32.alphabet.contains($0) })
            #expect(try Base32.decode(text) == raw)
            #expect(try Base32.decode(text.lowercased()) == raw)
            let grouped = Base32.grouped(text)
            #expect(grouped.split(separator: "-").allSatisfy { $0.count <= 4 })
            #expect(try Base32.decodeTyped(grouped) == raw)
            #expect(try Base32.decodeTyped(" " + grouped.replacingOccurrences(of: "-", with: " ") + "\n") == raw)
        }
    }

    @Test("every ASCII character outside the alphabet is refused, at any position")
    func invalidCharacters() throws {
        let valid = Base32.encode(bytes("foobar12"))
        #expect(valid.count == 13)
        for c in 0..<128 as Range<UInt8> {
            let isAlphabet = Base32.alphabet.contains(c) || Base32.alphabet.contains(c &- 32)
            guard !isAlphabet else { continue }
            for position in [0, 5, 12] {
                var chars = Array(valid.utf8)
                chars[position] = c
                let text = String(decoding: chars, as: UTF8.self)
                #expect(
                    throws: SyncCryptoError.malformed(
                        "character \(position + 1) is not in the base32 alphabet (A-Z, 2-7)")
                ) {
                    try Base32.decode(text)
                }
            }
        }
        for text in ["MZXW6YTBO\u{C9}", "MZXW6YTB0I", "MZXW6YTB1I", "MZXW6YTB=I", "MZXW 6YTB", "MZXW-6YTB"] {
            #expect(throws: SyncCryptoError.self) { try Base32.decode(text) }
        }
        // Only whitespace and dashes are forgiven when typed.
        #expect(try Base32.decodeTyped("mzxw-6ytb oi\n\t") == bytes("foobar"))
        #expect(throws: SyncCryptoError.self) { try Base32.decodeTyped("MZXW_6YTBOI") }
    }

    @Test("lengths no byte string encodes to, and unused bits set, are refused")
    func strictness() throws {
        for n in 0..<40 {
            let text = String(repeating: "A", count: n)
            if [1, 3, 6].contains(n % 8) {
                #expect(throws: SyncCryptoError.self) { try Base32.decode(text) }
            } else {
                #expect(try Base32.decode(text) == [UInt8](repeating: 0, count: n * 5 / 8))
            }
        }
        // "f" is "MY"; "MZ" differs only in the 2 unused bits.
        #expect(throws: SyncCryptoError.malformed("the last base32 character has unused bits set (mistyped?)")) {
            try Base32.decode("MZ")
        }
        // Every string decodes to one text only: re-encoding what decodes gives it back.
        var rng = SyncRNG(seed: 32)
        for _ in 0..<3000 {
            let n = Int.random(in: 0...24, using: &rng)
            let text = String(
                decoding: (0..<n).map { _ in Base32.alphabet.randomElement(using: &rng)! }, as: UTF8.self)
            if let raw = try? Base32.decode(text) { #expect(Base32.encode(raw) == text) }
        }
    }
}
