import KeychainCrypto
import Testing

@testable import Keychain

// The constructions together, as two devices and a server use them: A pairs B, both meet on
// one record id, B's later edit wins although B's clock is an hour behind, and a device restored
// from the recovery code opens everything.

@Suite("sync scenario")
struct SyncScenarioTests {
    /// What the "server" keeps of one version: its columns and the blob.
    struct Row {
        let recordID: [UInt8]
        let version: Int64
        let deleted: Bool
        let blob: [UInt8]
    }

    /// How a device opens a row: the header from its group, the row's columns and the blob's
    /// clock; the clock observed only once the blob opened.
    static func receive(_ row: Row, keys: SyncKeys, clock: inout HybridClock, physical: UInt64) throws
        -> (payload: [UInt8], protection: Accessibility, time: HybridTime)
    {
        let time = try SyncRecord.clock(of: row.blob)
        let header = SyncRecordHeader(
            group: keys.group, recordID: row.recordID, version: row.version, clock: time, deleted: row.deleted)
        let opened = try SyncRecord.open(row.blob, header: header, keys: keys)
        clock.observe(time, physicalMillis: physical)
        return (opened.payload, opened.protection, time)
    }

    static func write(
        _ payload: [UInt8], _ protection: Accessibility, id: [UInt8], version: Int64, deleted: Bool = false,
        keys: SyncKeys, clock: inout HybridClock, physical: UInt64
    ) throws -> Row {
        let header = SyncRecordHeader(
            group: keys.group, recordID: id, version: version, clock: clock.now(physicalMillis: physical),
            deleted: deleted)
        return Row(
            recordID: id, version: version, deleted: deleted,
            blob: try SyncRecord.seal(payload, protection: protection, header: header, keys: keys))
    }

    @Test("pair, write, edit from a device an hour behind, delete; then restore from the recovery code")
    func twoDevices() throws {
        let now: UInt64 = 1_790_000_000_000
        let hour: UInt64 = 3_600_000
        // Device A makes the group; B joins by pairing.
        let group = SyncGroupID.random()
        let root = try SyncKeys.newRoot()
        let keysA = try SyncKeys(group: group, root: root)
        let code = try PairingCode.random()
        let typed = try #require(PairingCode(text: code.text.lowercased()))
        let a = try PairingParty.start()
        let b = try PairingParty.start()
        let commitment = b.commitment(code: typed)
        let sa = try a.agree(code: code, commitment: commitment, offer: a.publicKey, answer: b.publicKey)
        let sb = try b.agree(code: typed, commitment: commitment, offer: a.publicKey, answer: b.publicKey)
        #expect(sa.shortAuthenticationString == sb.shortAuthenticationString)
        let (joined, rootB) = try sb.openRoot(try sa.sealRoot(root, group: group))
        let keysB = try SyncKeys(group: joined, root: rootB)

        // Both name the item alike.
        let pk = bytes("github.com\0alice")
        let id = keysA.recordID(itemClass: .internetPassword, primaryKey: pk)
        #expect(keysB.recordID(itemClass: .internetPassword, primaryKey: pk) == id)

        var clockA = HybridClock(device: [UInt8](repeating: 0xA, count: 16), last: nil)
        var clockB = HybridClock(device: [UInt8](repeating: 0xB, count: 16), last: nil)
        let v1 = try Self.write(
            bytes("pw1"), .afterFirstUnlock, id: id, version: 1, keys: keysA, clock: &clockA, physical: now)
        let got1 = try Self.receive(v1, keys: keysB, clock: &clockB, physical: now - hour)
        #expect(got1.payload == bytes("pw1") && got1.protection == .afterFirstUnlock)

        // B, an hour behind, edits after seeing v1: its version orders after v1.
        let v2 = try Self.write(
            bytes("pw2"), .afterFirstUnlock, id: id, version: 2, keys: keysB, clock: &clockB, physical: now - hour + 5)
        let got2 = try Self.receive(v2, keys: keysA, clock: &clockA, physical: now + 10)
        #expect(got2.time > got1.time && got2.payload == bytes("pw2"))

        // The server replays v1 as version 3, or v2 as a tombstone: refused.
        #expect(throws: SyncCryptoError.doesNotAuthenticate) {
            try Self.receive(
                Row(recordID: id, version: 3, deleted: false, blob: v1.blob), keys: keysA, clock: &clockA, physical: now
            )
        }
        #expect(throws: SyncCryptoError.doesNotAuthenticate) {
            try Self.receive(
                Row(recordID: id, version: 2, deleted: true, blob: v2.blob), keys: keysA, clock: &clockA, physical: now)
        }

        // A deletes; B reads the tombstone.
        let v3 = try Self.write(
            [], .afterFirstUnlock, id: id, version: 3, deleted: true, keys: keysA, clock: &clockA, physical: now + 20)
        let got3 = try Self.receive(v3, keys: keysB, clock: &clockB, physical: now - hour + 30)
        #expect(got3.payload.isEmpty && got3.time > got2.time)

        // A third device, from the recovery code alone, opens what the others wrote.
        let (recoveredGroup, recoveredRoot) = try RecoveryCode.parse(RecoveryCode.text(group: group, root: root) + "\n")
        let keysC = try SyncKeys(group: recoveredGroup, root: recoveredRoot)
        var clockC = HybridClock(device: [UInt8](repeating: 0xC, count: 16), last: nil)
        #expect(try Self.receive(v2, keys: keysC, clock: &clockC, physical: now).payload == bytes("pw2"))
        #expect(keysC.recordID(itemClass: .internetPassword, primaryKey: pk) == id)
    }

    @Test("equal clocks are broken by the smaller blob hash, the same on every device")
    func tieBreak() throws {
        let keys = try syncKeys()
        let device = [UInt8](repeating: 1, count: 16)
        let time = HybridTime(wall: 5, counter: 0, device: device)
        let header = SyncRecordHeader(
            group: keys.group, recordID: keys.recordID(itemClass: .genericPassword, primaryKey: [1]), version: 4,
            clock: time, deleted: false)
        let x = try SyncRecord.seal(bytes("x"), protection: .whenUnlocked, header: header, keys: keys)
        let y = try SyncRecord.seal(bytes("y"), protection: .whenUnlocked, header: header, keys: keys)
        let winner = SyncRecord.hash(x).lexicographicallyPrecedes(SyncRecord.hash(y)) ? x : y
        let again = SyncRecord.hash(y).lexicographicallyPrecedes(SyncRecord.hash(x)) ? y : x
        #expect(winner == again)
        // Plain BLAKE2b-256, as any other implementation computes it (RFC 7693's "abc", 256-bit).
        #expect(
            SyncRecord.hash(bytes("abc")) == [
                0xBD, 0xDD, 0x81, 0x3C, 0x63, 0x42, 0x39, 0x72, 0x31, 0x71, 0xEF, 0x3F, 0xEE, 0x98, 0x57, 0x9B, 0x94,
                0x96, 0x4E, 0x3B, 0xB1, 0xCB, 0x3E, 0x42, 0x72, 0x62, 0xC8, 0xC0, 0x68, 0xD5, 0x23, 0x19,
            ])
    }
}
