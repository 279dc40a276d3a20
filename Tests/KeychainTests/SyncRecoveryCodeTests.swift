import KeychainCrypto
import Testing

@testable import Keychain

// Issue 31's recovery code: the group id and root on paper. Round trips as people copy it, and
// a typo is a checksum error, never a wrong key.

@Suite("sync recovery code")
struct SyncRecoveryCodeTests {
    @Test("round trip, as printed and as typed back (case, spaces, newlines, no dashes)")
    func roundTrip() throws {
        for _ in 0..<300 {
            let group = SyncGroupID.random()
            let root = try SyncKeys.newRoot()
            let text = RecoveryCode.text(group: group, root: root)
            #expect(text.count == 85 + 21)
            #expect(text.split(separator: "-").map(\.count) == [Int](repeating: 4, count: 21) + [1])
            for typed in [
                text, text.lowercased(), text + "\n", text.replacing("-", with: ""),
                text.replacing("-", with: " "), "  " + text.replacing("-", with: "\n") + "\r\n",
            ] {
                let (g, r) = try RecoveryCode.parse(typed)
                #expect(g == group && rootBytes(r) == rootBytes(root))
            }
        }
    }

    @Test("the checksum is BLAKE2b with a 4-byte digest (Python: blake2b(b'\\x01\\x02\\x03', digest_size=4))")
    func checksumVector() {
        let sum = [UInt8]([1, 2, 3]).withUnsafeBytes { RecoveryCode.checksum($0) }
        #expect(sum == [0xAD, 0x4A, 0x17, 0x8D])
    }

    @Test("every single-character substitution in 12 codes is refused (checksum, or unused bits of the last)")
    func substitutions() throws {
        var refusedByChecksum = 0
        for _ in 0..<12 {
            let text = RecoveryCode.text(group: .random(), root: try SyncKeys.newRoot())
            let chars = Array(text.utf8)
            for i in chars.indices where chars[i] != UInt8(ascii: "-") {
                for replacement in Base32.alphabet where replacement != chars[i] {
                    var typo = chars
                    typo[i] = replacement
                    do {
                        _ = try RecoveryCode.parse(String(decoding: typo, as: UTF8.self))
                        Issue.record("a typo at \(i) parsed")
                    } catch SyncCryptoError.checksumMismatch {
                        refusedByChecksum += 1
                    } catch SyncCryptoError.malformed(let why) {
                        #expect(i == chars.count - 1, "\(why)")
                    }
                }
            }
        }
        #expect(refusedByChecksum > 12 * 84 * 31)
    }

    @Test("swapped neighbours, a dropped or added character, and characters outside the alphabet are refused")
    func otherTypos() throws {
        let text = RecoveryCode.text(group: .random(), root: try SyncKeys.newRoot())
        let plain = Array(text.replacing("-", with: "").utf8)
        for i in 0..<(plain.count - 1) where plain[i] != plain[i + 1] {
            var swapped = plain
            swapped.swapAt(i, i + 1)
            #expect(throws: SyncCryptoError.self) { try RecoveryCode.parse(String(decoding: swapped, as: UTF8.self)) }
        }
        for i in [0, 40, plain.count - 1] {
            var dropped = plain
            dropped.remove(at: i)
            #expect(throws: SyncCryptoError.self) { try RecoveryCode.parse(String(decoding: dropped, as: UTF8.self)) }
            var added = plain
            added.insert(UInt8(ascii: "A"), at: i)
            #expect(throws: SyncCryptoError.self) { try RecoveryCode.parse(String(decoding: added, as: UTF8.self)) }
        }
        for bad in ["0", "1", "8", "9", "=", "_", "é"] {
            #expect(throws: SyncCryptoError.self) { try RecoveryCode.parse(bad + text.dropFirst()) }
        }
        #expect(throws: SyncCryptoError.self) { try RecoveryCode.parse("") }
        // A pairing code is not a recovery code.
        #expect(throws: SyncCryptoError.self) { try RecoveryCode.parse(try PairingCode.random().text) }
    }

    @Test("a well-formed code of another version is refused as such, not read")
    func otherVersion() throws {
        var raw: [UInt8] = [2] + SyncGroupID.random().bytes + [UInt8](repeating: 5, count: 32)
        raw += raw.withUnsafeBytes { RecoveryCode.checksum($0) }
        #expect(throws: SyncCryptoError.unsupportedFormat(2)) {
            try RecoveryCode.parse(Base32.grouped(Base32.encode(raw)))
        }
    }

    @Test("error messages carry no part of the code")
    func messages() throws {
        let text = RecoveryCode.text(group: .random(), root: try SyncKeys.newRoot())
        var typo = Array(text.utf8)
        typo[10] = typo[10] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        for attempt in [String(decoding: typo, as: UTF8.self), "9" + text.dropFirst(), String(text.dropLast(3))] {
            do {
                _ = try RecoveryCode.parse(attempt)
                Issue.record("parsed")
            } catch let error as SyncCryptoError {
                let message = error.description
                for group in text.split(separator: "-") where group.count == 4 {
                    #expect(!message.contains(group))
                }
            }
        }
    }
}
