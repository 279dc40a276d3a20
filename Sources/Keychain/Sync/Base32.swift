/// Base32 with the RFC 4648 alphabet (A–Z, 2–7), without padding, for the codes a person reads
/// and types: the pairing code and the recovery code. One codec for both, strict in what it
/// decodes: a character outside the alphabet, a length no whole number of bytes encodes to, or
/// unused trailing bits that are not zero are refused, so each byte string has exactly one
/// text and a mistyped last character is caught rather than ignored. What people add while
/// copying (lower case, spaces, line breaks, the dashes of `grouped`) is removed by `typed`.
enum Base32 {
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".utf8)

    /// The alphabet's value of an ASCII byte (either case), or nil.
    private static func value(of c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): c - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): c - UInt8(ascii: "a")
        case UInt8(ascii: "2")...UInt8(ascii: "7"): c - UInt8(ascii: "2") + 26
        default: nil
        }
    }

    static func encode<Bytes: Collection>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 8 + 4) / 5)
        var buffer: UInt32 = 0
        var bits = 0
        for b in bytes {
            buffer = (buffer << 8) | UInt32(b)
            bits += 8
            while bits >= 5 {
                bits -= 5
                out.append(alphabet[Int((buffer >> UInt32(bits)) & 31)])
            }
            buffer &= (1 << UInt32(bits)) - 1
        }
        if bits > 0 { out.append(alphabet[Int((buffer << UInt32(5 - bits)) & 31)]) }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes exactly the alphabet (either case), nothing else. Errors name the position of a
    /// bad character, never the character (the text may be a secret).
    static func decode(_ text: String) throws -> [UInt8] {
        let chars = Array(text.utf8)
        // 8 characters make 5 bytes; a remainder of 1, 3 or 6 characters is no whole byte count.
        guard ![1, 3, 6].contains(chars.count % 8) else {
            throw SyncCryptoError.malformed("\(chars.count) base32 characters do not make whole bytes")
        }
        var out: [UInt8] = []
        out.reserveCapacity(chars.count * 5 / 8)
        var buffer: UInt32 = 0
        var bits = 0
        for (i, c) in chars.enumerated() {
            guard let v = value(of: c) else {
                throw SyncCryptoError.malformed("character \(i + 1) is not in the base32 alphabet (A-Z, 2-7)")
            }
            buffer = (buffer << 5) | UInt32(v)
            bits += 5
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: buffer >> UInt32(bits)))
                buffer &= (1 << UInt32(bits)) - 1
            }
        }
        guard buffer == 0 else {
            throw SyncCryptoError.malformed("the last base32 character has unused bits set (mistyped?)")
        }
        return out
    }

    /// "ABCDEFGHIJ" → "ABCD-EFGH-IJ": groups of 4 for reading aloud and typing.
    static func grouped(_ text: String, by size: Int = 4) -> String {
        var out = ""
        for (i, c) in text.enumerated() {
            if i > 0 && i % size == 0 { out.append("-") }
            out.append(c)
        }
        return out
    }

    /// What a person typed or pasted, with whitespace (line breaks included) and dashes removed,
    /// then decoded. Nothing else is forgiven (no O→0, I/L→1: not in this alphabet).
    static func decodeTyped(_ text: String) throws -> [UInt8] {
        let kept = text.unicodeScalars.filter { !($0.properties.isWhitespace || $0 == "-") }
        return try decode(String(String.UnicodeScalarView(kept)))
    }
}
