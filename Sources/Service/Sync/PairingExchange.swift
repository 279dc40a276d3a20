import FoundationEssentials
import Glibc
import Keychain
import KeychainCrypto
import KeychainSync

/// Pairing a new device through the server (issue 31, point 3): the constructions are
/// Sync/Pairing.swift's; this is their order over two rendezvous rows, the server relaying
/// bytes it cannot use (docs/sync.md, "Pairing").
///
///     A (in the group, `sync pair`)              B (new, `sync join URI CODE`)
///     row 1 offered: a marker, 10 min expiry
///                                                row 1 answered: B's commitment
///     row 1 delivered: A's public key
///                                                row 1 taken: A's key;
///                                                row 2 offered: B's public key
///     row 2 answered: B's key read
///     both show the SAS; the user types B's on A
///     row 2 delivered: the root sealed (or a refusal when the SAS differs)
///                                                row 2 taken: the root opened
///
/// B commits to its key before it sees A's, as the SAS's 1-in-10^6 needs; row 1's expiry and its
/// one answer make the code one-time. Each wait is bounded by the code's lifetime.
public enum PairingExchange {
    static let marker: [UInt8] = Array("kcfs/pair/v1".utf8)
    static let refusal: [UInt8] = [0]

    /// The second row's id: derived from the first, so only the two devices know it.
    static func secondRow(_ code: PairingCode) -> [UInt8] {
        KeyedHash.digest([Array("kcfs/pair-second-row/v1".utf8), code.rendezvousID])
    }

    /// Device A: opens the rendezvous for `code` (call `offer` then show `code.text`), waits for
    /// B, shows the SAS through `confirm`, which returns whether the user typed the same digits
    /// B shows, and sends the root only then. Throws when the user refused, or on timeout.
    public static func offer(
        code: PairingCode, group: SyncGroupID, root: SecureBytes, server: SyncServer,
        lifetime: Double = Double(PairingCode.lifetimeSeconds), confirm: (String) throws -> Bool
    ) throws {
        let deadline = Date().addingTimeInterval(lifetime)
        let first = code.rendezvousID, second = secondRow(code)
        try server.rendezvousOffer(id: first, offer: marker, expiresIn: .seconds(Int64(lifetime)))
        try server.rendezvousListen(id: first)
        let commitment = try wait(until: deadline, server) { try server.rendezvousPoll(id: first).answer }
        let party = try PairingParty.start()
        try server.rendezvousDeliver(id: first, payload: party.publicKey)
        let answer = try wait(until: deadline, server) { () -> [UInt8]? in
            do { return try server.rendezvousAnswer(id: second, answer: marker) } catch SyncServerError
                .rendezvousUnknown
            {
                return nil
            }
        }
        let secrets = try party.agree(code: code, commitment: commitment, offer: party.publicKey, answer: answer)
        guard try confirm(secrets.shortAuthenticationString) else {
            try? server.rendezvousDeliver(id: second, payload: refusal)
            throw KeychainError(
                .authFailed, "the digits typed differ from this device's: pairing refused, the group's key was not sent"
            )
        }
        try server.rendezvousDeliver(id: second, payload: try secrets.sealRoot(root, group: group))
    }

    /// Device B: answers the rendezvous of `code`, shows the SAS through `show` (the user
    /// types it on A), and returns the group and root A sends. Throws when A refused, the code
    /// is unknown, used or expired, or on timeout.
    public static func receive(
        code: PairingCode, server: SyncServer, lifetime: Double = Double(PairingCode.lifetimeSeconds),
        show: (String) -> Void
    ) throws -> (SyncGroupID, SecureBytes) {
        let deadline = Date().addingTimeInterval(lifetime)
        let first = code.rendezvousID, second = secondRow(code)
        let party = try PairingParty.start()
        let commitment = party.commitment(code: code)
        do {
            _ = try server.rendezvousAnswer(id: first, answer: commitment)
        } catch SyncServerError.rendezvousUnknown {
            throw KeychainError(.itemNotFound, "no device offers this code: run `keychainfs sync pair` there first")
        } catch SyncServerError.rendezvousUsed {
            throw KeychainError(.authFailed, "this code was used already: run `keychainfs sync pair` again")
        } catch SyncServerError.rendezvousExpired {
            throw KeychainError(.authFailed, "this code expired: run `keychainfs sync pair` again")
        }
        try server.rendezvousListen(id: first)
        let offer = try wait(until: deadline, server) { try server.rendezvousTake(id: first) }
        try server.rendezvousOffer(id: second, offer: party.publicKey, expiresIn: .seconds(Int64(lifetime)))
        try server.rendezvousListen(id: second)
        let secrets = try party.agree(code: code, commitment: commitment, offer: offer, answer: party.publicKey)
        show(secrets.shortAuthenticationString)
        let box = try wait(until: deadline, server) { try server.rendezvousTake(id: second) }
        guard box != refusal else {
            throw KeychainError(.authFailed, "the other device refused: the digits typed there differed")
        }
        return try secrets.openRoot(box)
    }

    /// Polls `read` after each notification (or every second), until it gives a value or the
    /// deadline passes.
    private static func wait<T>(until deadline: Date, _ server: SyncServer, _ read: () throws -> T?) throws -> T {
        while true {
            if let value = try read() { return value }
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else {
                throw KeychainError(.notAvailable, "pairing timed out: the other device did not answer")
            }
            _ = try server.waitForChange(timeout: .milliseconds(Int64(min(left, 1) * 1000)), wakeFD: nil)
        }
    }
}
