import CSodium
import KeychainCrypto

// Joining a device to a sync group without trusting the server (issue 31).
//
// The flow, through a rendezvous row on the server (the server relays; it decides nothing):
//   1. Device A, in the group, makes a `PairingCode` and shows `code.text`; the user types it on
//      device B. Both compute `code.rendezvousID`: the only thing of the code the server sees.
//   2. B starts a `PairingParty` and posts its `commitment(code:)` (a hash of its public key).
//   3. A starts a `PairingParty` and posts its public key: the offer.
//   4. B posts its public key: the answer. Both call `agree(code:commitment:offer:answer:)`,
//      which checks the answer against the commitment, and show the SAS.
//   5. The user compares the two six-digit SASes; only if equal, A posts `sealRoot` and B
//      `openRoot`s it. A treats the code as used after one answer, or 10 minutes.
//
// Safety argument:
// - A server without the code sees the rendezvous id (BLAKE2b keyed by the code's 128-bit
//   secret over a constant: nothing to test guesses against), the commitment and the two X25519
//   public keys. The transfer key is BLAKE2b keyed by the X25519 shared secret *and* the code's
//   secret: without A's or B's private key it has no shared secret (CDH), and without the code
//   it has not the other half either, so it cannot open the root's box.
// - A server that substitutes its own public keys (a man in the middle) but lacks the code
//   shares a DH secret with each side, yet still cannot derive either side's transfer key or SAS
//   (both need the code's secret): it can neither read A's box nor make one B opens, and the two
//   SASes differ. So the code protects even a user who does not compare the SAS.
// - An attacker that has the code too (read over the user's shoulder, sent over a chat) and
//   controls the server can play each side; then the SAS the user compares is what stops it. Each
//   side's SAS depends on a public key the attacker could not know when it fixed its own: B
//   commits to its key before A's offer and reveals it after (without the commitment, the
//   attacker could try a million keys of its own until the two SASes matched, a second's work).
//   So a forged exchange shows equal SASes with probability 1 in 10^6 per attempt, and there is
//   one attempt per code: the code is one-time and expires.
// - Keys are separated by label ("kcfs/pair-sas/v1", "kcfs/pair-transfer/v1") over the framed
//   transcript (rendezvous id, commitment, offer, answer): both sides derive the same only if
//   they saw the same exchange. The root's box binds the transcript and its direction in its
//   associated data, so it opens nowhere but at the other end of this exchange.
// - An all-zero shared secret (a low-order public key, which would make the DH part constant)
//   is refused; the ephemeral private key lives in guarded memory and is dropped with the party.

/// The one-time code device A shows and the user types on device B: 16 random bytes.
public struct PairingCode: Sendable {
    public static let secretBytes = 16
    /// How long device A keeps a code's rendezvous open (the engine enforces it).
    public static let lifetimeSeconds = 600
    public let secret: SecureBytes

    init(secret: SecureBytes) {
        precondition(secret.count == Self.secretBytes, "a pairing code's secret is 16 bytes")
        self.secret = secret
    }

    public static func random() throws -> PairingCode {
        do {
            return PairingCode(secret: try SecureBytes.random(count: secretBytes))
        } catch { throw SyncCryptoError.from(error, otherwise: .unavailable("no guarded memory")) }
    }

    /// Base32 in groups of 4 ("ABCD-EFGH-…", 26 characters): what the user types.
    public var text: String { Base32.grouped(secret.withUnsafeBytes { Base32.encode($0) }) }

    /// Case, spaces and dashes do not matter; anything else that is not exactly the 26
    /// characters of a code is refused.
    public init?(text: String) {
        guard var raw = try? Base32.decodeTyped(text) else { return nil }
        defer { Sodium.wipe(&raw) }
        guard raw.count == Self.secretBytes, let secret = try? SecureBytes(copying: raw) else { return nil }
        self.secret = secret
    }

    /// Where the two devices meet on the server: 32 bytes of BLAKE2b keyed by the secret.
    public var rendezvousID: [UInt8] {
        KeyedHash.hash(Framing.frame([Framing.text("kcfs/pair-rendezvous/v1")]), key: secret)
    }
}

/// One side's ephemeral X25519 key pair, for one pairing.
public struct PairingParty: Sendable {
    public static let publicKeyBytes = Int(crypto_scalarmult_BYTES)
    public let publicKey: [UInt8]
    private let secretKey: SecureBytes

    public static func start() throws -> PairingParty {
        do {
            let secretKey = try SecureBytes.random(count: Int(crypto_scalarmult_SCALARBYTES))
            var publicKey = [UInt8](repeating: 0, count: publicKeyBytes)
            let rc = secretKey.withUnsafeBytes {
                crypto_scalarmult_base(&publicKey, $0.baseAddress!.assumingMemoryBound(to: UInt8.self))
            }
            guard rc == 0 else { throw SyncCryptoError.unavailable("crypto_scalarmult_base failed") }
            return PairingParty(publicKey: publicKey, secretKey: secretKey)
        } catch { throw SyncCryptoError.from(error, otherwise: .unavailable("no guarded memory")) }
    }

    /// What the answering side posts before it sees the offer: a hash binding its public key
    /// to this rendezvous (hiding: the key is 32 random-looking bytes; binding: BLAKE2b).
    public func commitment(code: PairingCode) -> [UInt8] {
        Self.commitment(to: publicKey, rendezvousID: code.rendezvousID)
    }

    static func commitment(to publicKey: [UInt8], rendezvousID: [UInt8]) -> [UInt8] {
        SyncHash.plain(Framing.frame([Framing.text("kcfs/pair-commit/v1"), rendezvousID, publicKey]))
    }

    /// The exchange's secrets, as both sides derive them: this party's key must be the offer
    /// or the answer, the other is the peer; the answer must match the commitment.
    public func agree(code: PairingCode, commitment: [UInt8], offer: [UInt8], answer: [UInt8]) throws
        -> PairingSecrets
    {
        guard offer.count == Self.publicKeyBytes, answer.count == Self.publicKeyBytes else {
            throw SyncCryptoError.invalidPairingKey("a public key is \(Self.publicKeyBytes) bytes")
        }
        guard offer != answer else { throw SyncCryptoError.invalidPairingKey("the offer and the answer are one key") }
        let isOffer = offer == publicKey
        guard isOffer || answer == publicKey else {
            throw SyncCryptoError.invalidPairingKey("this device's key is not in the exchange")
        }
        guard Sodium.constantTimeEqual(commitment, Self.commitment(to: answer, rendezvousID: code.rendezvousID)) else {
            throw SyncCryptoError.invalidPairingKey("the answer does not match its commitment")
        }
        let peer = isOffer ? answer : offer
        let shared: SecureBytes
        do {
            shared = try SecureBytes(count: Int(crypto_scalarmult_BYTES)) { out in
                let p = out.baseAddress!.assumingMemoryBound(to: UInt8.self)
                let rc = secretKey.withUnsafeBytes {
                    crypto_scalarmult(p, $0.baseAddress!.assumingMemoryBound(to: UInt8.self), peer)
                }
                guard rc == 0, sodium_is_zero(p, out.count) == 0 else {
                    throw SyncCryptoError.invalidPairingKey("the peer's key gives no shared secret (low order)")
                }
            }
        } catch { throw SyncCryptoError.from(error, otherwise: .unavailable("no guarded memory")) }
        let transcript = Framing.frame([
            Framing.text("kcfs/pair-transcript/v1"), code.rendezvousID, commitment, offer, answer,
        ])
        let keys = [shared, code.secret]
        let sas = try SyncHash.keyed(Framing.frame([Framing.text("kcfs/pair-sas/v1"), transcript]), keys: keys)
        let transfer = try SyncHash.keyed(
            Framing.frame([Framing.text("kcfs/pair-transfer/v1"), transcript]), keys: keys)
        return PairingSecrets(
            shortAuthenticationString: PairingSecrets.digits(sas), transferKey: transfer, transcript: transcript,
            isOffer: isOffer)
    }
}

/// What one side holds after `agree`: the SAS to show, and the key that moves the root.
public struct PairingSecrets: Sendable {
    /// Six decimal digits, equal on both sides exactly when both saw the same exchange.
    public let shortAuthenticationString: String
    let transferKey: SecureBytes
    let transcript: [UInt8]
    let isOffer: Bool

    /// 8 bytes of the SAS key as a number, modulo 10^6, zero-padded (bias: 2^64 mod 10^6 over
    /// 2^64, below 10^-13).
    static func digits(_ key: SecureBytes) -> String {
        let n = key.withUnsafeBytes { $0.prefix(8).reduce(UInt64(0)) { ($0 << 8) | UInt64($1) } } % 1_000_000
        let text = String(n)
        return String(repeating: "0", count: 6 - text.count) + text
    }

    /// The direction is bound too: a box A sent cannot be reflected back to A as B's.
    private func associatedData(fromOffer: Bool, group: SyncGroupID) -> [UInt8] {
        Framing.frame([
            Framing.text("kcfs/pair-root/v1"), transcript, Framing.text(fromOffer ? "offer>answer" : "answer>offer"),
            group.bytes,
        ])
    }

    /// The box for the other side: group id (16, in clear: the server knows it anyway)
    /// ‖ the root, sealed under the transfer key.
    public func sealRoot(_ root: SecureBytes, group: SyncGroupID) throws -> [UInt8] {
        guard root.count == SyncKeys.rootBytes else { throw SyncCryptoError.malformed("a sync root key is 32 bytes") }
        do {
            let box = try root.withUnsafeBytes {
                try AEAD.seal($0, associatedData: associatedData(fromOffer: isOffer, group: group), key: transferKey)
            }
            return group.bytes + box
        } catch { throw SyncCryptoError.from(error, otherwise: .unavailable("sealing failed")) }
    }

    /// Opens the other side's box straight into guarded memory.
    public func openRoot(_ box: [UInt8]) throws -> (SyncGroupID, SecureBytes) {
        guard box.count == SyncGroupID.byteCount + AEAD.overhead + SyncKeys.rootBytes else {
            throw SyncCryptoError.malformed("a pairing root box is \(16 + AEAD.overhead + 32) bytes")
        }
        let group = SyncGroupID(bytes: Array(box.prefix(SyncGroupID.byteCount)))!
        do {
            let root = try AEAD.openKey(
                Array(box.dropFirst(SyncGroupID.byteCount)),
                associatedData: associatedData(fromOffer: !isOffer, group: group), key: transferKey)
            return (group, root)
        } catch { throw SyncCryptoError.from(error) }
    }
}
