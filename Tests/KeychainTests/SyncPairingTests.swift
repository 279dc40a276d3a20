import KeychainCrypto
import Testing

@testable import Keychain

// Issue 31's pairing: both sides agree on the SAS and move the root; a server that substitutes
// keys, another code, a changed transcript or commitment, a reflected box, a low-order key:
// each is caught.

/// One honest exchange: B commits, A offers, B answers; B typed A's code.
private struct Exchange {
    let codeA: PairingCode
    let codeB: PairingCode
    let a: PairingParty
    let b: PairingParty
    let commitment: [UInt8]

    init() throws {
        codeA = try PairingCode.random()
        codeB = PairingCode(text: codeA.text)!
        a = try PairingParty.start()
        b = try PairingParty.start()
        commitment = b.commitment(code: codeB)
    }

    func agreeA() throws -> PairingSecrets {
        try a.agree(code: codeA, commitment: commitment, offer: a.publicKey, answer: b.publicKey)
    }
    func agreeB() throws -> PairingSecrets {
        try b.agree(code: codeB, commitment: commitment, offer: a.publicKey, answer: b.publicKey)
    }
}

@Suite("sync pairing")
struct SyncPairingTests {
    @Test("the code: 26 base32 characters in groups of 4, parsed back case- and space-insensitively")
    func codeText() throws {
        for _ in 0..<200 {
            let code = try PairingCode.random()
            let text = code.text
            #expect(text.count == 26 + 6)
            #expect(text.split(separator: "-").map(\.count) == [4, 4, 4, 4, 4, 4, 2])
            for typed in [
                text, text.lowercased(), text.replacing("-", with: " "), text.replacing("-", with: "") + "\n",
            ] {
                let parsed = try #require(PairingCode(text: typed))
                #expect(rootBytes(parsed.secret) == rootBytes(code.secret))
                #expect(parsed.rendezvousID == code.rendezvousID)
            }
            #expect(PairingCode(text: String(text.dropLast())) == nil)
            #expect(PairingCode(text: text + "A") == nil)
            #expect(PairingCode(text: text.replacing("-", with: "_")) == nil)
        }
        #expect(PairingCode(text: "") == nil)
        #expect(PairingCode(text: "0000-0000-0000-0000-0000-0000-00") == nil)
    }

    @Test("rendezvous ids: 32 bytes, one per code, not the code's secret")
    func rendezvous() throws {
        var seen: Set<[UInt8]> = []
        for _ in 0..<500 {
            let code = try PairingCode.random()
            #expect(code.rendezvousID.count == 32)
            #expect(!code.rendezvousID.starts(with: rootBytes(code.secret)))
            seen.insert(code.rendezvousID)
        }
        #expect(seen.count == 500)
    }

    @Test("an honest exchange: equal six-digit SAS on both sides, and the root moves from A to B")
    func honest() throws {
        for _ in 0..<50 {
            let x = try Exchange()
            let sa = try x.agreeA()
            let sb = try x.agreeB()
            #expect(sa.shortAuthenticationString == sb.shortAuthenticationString)
            #expect(sa.shortAuthenticationString.count == 6 && sa.shortAuthenticationString.allSatisfy(\.isASCII))
            #expect(sa.shortAuthenticationString.allSatisfy { $0.isNumber })
            let root = try SyncKeys.newRoot()
            let group = SyncGroupID.random()
            let box = try sa.sealRoot(root, group: group)
            let (openedGroup, openedRoot) = try sb.openRoot(box)
            #expect(openedGroup == group && rootBytes(openedRoot) == rootBytes(root))
            // Reflected back to its sender, the box does not open (its direction is bound).
            #expect(throws: SyncCryptoError.doesNotAuthenticate) { try sa.openRoot(box) }
            // And B's box to A opens the other way.
            #expect(try sa.openRoot(try sb.sealRoot(root, group: group)).0 == group)
        }
    }

    @Test("a server substituting both public keys (with or without the code) gets different SASes and no root")
    func manInTheMiddle() throws {
        // A forged exchange shows equal SASes with probability 10^-6 each: 20 trials, all must differ.
        for trial in 0..<20 {
            let x = try Exchange()
            let knowsCode = trial % 2 == 0
            let mitmCode = knowsCode ? x.codeA : try PairingCode.random()
            let m1 = try PairingParty.start()  // plays B towards A
            let m2 = try PairingParty.start()  // plays A towards B
            // The commitment binds the rendezvous id, which the server has: it can commit to its key.
            let towardsA = PairingParty.commitment(to: m1.publicKey, rendezvousID: x.codeA.rendezvousID)
            let sa = try x.a.agree(code: x.codeA, commitment: towardsA, offer: x.a.publicKey, answer: m1.publicKey)
            let sb = try x.b.agree(code: x.codeB, commitment: x.commitment, offer: m2.publicKey, answer: x.b.publicKey)
            #expect(sa.shortAuthenticationString != sb.shortAuthenticationString, "trial \(trial)")
            let box = try sa.sealRoot(try SyncKeys.newRoot(), group: .random())
            // B cannot open A's box: another transcript and shared secret.
            #expect(throws: SyncCryptoError.doesNotAuthenticate) { try sb.openRoot(box) }
            // The server's own side opens it only if it had the code (without, it can only guess one).
            let sm = try m1.agree(
                code: mitmCode, commitment: m1.commitment(code: mitmCode), offer: x.a.publicKey, answer: m1.publicKey)
            if knowsCode {
                #expect(sm.shortAuthenticationString == sa.shortAuthenticationString)
                #expect(throws: Never.self) { try sm.openRoot(box) }
            } else {
                #expect(throws: SyncCryptoError.doesNotAuthenticate) { try sm.openRoot(box) }
            }
        }
    }

    @Test("B typing another code: different SAS, and the root does not open")
    func otherCode() throws {
        let x = try Exchange()
        let wrong = try PairingCode.random()
        let sa = try x.agreeA()
        let commitment = x.b.commitment(code: wrong)
        let sb = try x.b.agree(code: wrong, commitment: commitment, offer: x.a.publicKey, answer: x.b.publicKey)
        #expect(wrong.rendezvousID != x.codeA.rendezvousID)
        #expect(sa.shortAuthenticationString != sb.shortAuthenticationString)
        #expect(throws: SyncCryptoError.doesNotAuthenticate) {
            try sb.openRoot(try sa.sealRoot(try SyncKeys.newRoot(), group: .random()))
        }
    }

    @Test("a box from another exchange, or with its group or any byte changed, is refused")
    func wrongTranscript() throws {
        let x = try Exchange()
        let sa = try x.agreeA()
        let sb = try x.agreeB()
        let other = try Exchange()
        let box = try sa.sealRoot(try SyncKeys.newRoot(), group: .random())
        #expect(throws: SyncCryptoError.doesNotAuthenticate) { try other.agreeB().openRoot(box) }
        for i in box.indices {
            var bad = box
            bad[i] ^= 0x20
            #expect(throws: SyncCryptoError.doesNotAuthenticate, "byte \(i)") { try sb.openRoot(bad) }
        }
        #expect(throws: SyncCryptoError.self) { try sb.openRoot(Array(box.dropLast())) }
        #expect(throws: SyncCryptoError.self) { try sb.openRoot(box + [0]) }
    }

    @Test("an answer that does not match the commitment, keys not in the exchange, or reflected, are refused")
    func misuse() throws {
        let x = try Exchange()
        let late = try PairingParty.start()
        // The answer swapped after the commitment (a key ground for a matching SAS).
        #expect(throws: SyncCryptoError.invalidPairingKey("the answer does not match its commitment")) {
            try x.a.agree(code: x.codeA, commitment: x.commitment, offer: x.a.publicKey, answer: late.publicKey)
        }
        // The commitment bound to the rendezvous: the same key under another code does not match.
        #expect(throws: SyncCryptoError.self) {
            try x.a.agree(
                code: x.codeA, commitment: x.b.commitment(code: try PairingCode.random()), offer: x.a.publicKey,
                answer: x.b.publicKey)
        }
        #expect(throws: SyncCryptoError.invalidPairingKey("this device's key is not in the exchange")) {
            try late.agree(code: x.codeA, commitment: x.commitment, offer: x.a.publicKey, answer: x.b.publicKey)
        }
        // The server reflecting A's own key back as the answer.
        #expect(throws: SyncCryptoError.self) {
            try x.a.agree(
                code: x.codeA, commitment: x.a.commitment(code: x.codeA), offer: x.a.publicKey, answer: x.a.publicKey)
        }
        #expect(throws: SyncCryptoError.self) {
            try x.a.agree(code: x.codeA, commitment: x.commitment, offer: x.a.publicKey, answer: [1, 2, 3])
        }
    }

    @Test("low-order public keys (all-zero shared secret) are refused")
    func lowOrder() throws {
        let x = try Exchange()
        var one = [UInt8](repeating: 0, count: 32)
        one[0] = 1
        for bad in [[UInt8](repeating: 0, count: 32), one] {
            let commitment = PairingParty.commitment(to: bad, rendezvousID: x.codeA.rendezvousID)
            #expect(throws: SyncCryptoError.invalidPairingKey("the peer's key gives no shared secret (low order)")) {
                try x.a.agree(code: x.codeA, commitment: commitment, offer: x.a.publicKey, answer: bad)
            }
        }
    }

    @Test("SAS digits: zero-padded, from the first 8 bytes modulo 10^6")
    func digits() throws {
        let key = try SecureBytes(copying: [0, 0, 0, 0, 0, 0, 0, 42] + [UInt8](repeating: 9, count: 24))
        #expect(PairingSecrets.digits(key) == "000042")
        let big = try SecureBytes(copying: [UInt8](repeating: 0xFF, count: 32))
        #expect(PairingSecrets.digits(big) == String(UInt64.max % 1_000_000))
    }
}
