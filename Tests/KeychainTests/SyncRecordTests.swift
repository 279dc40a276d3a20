import KeychainCrypto
import Testing

@testable import Keychain

// Issue 31's record blobs: round trips for every syncing class and tombstones, and every way a
// server could present a blob as something it is not, refused as doesNotAuthenticate.

@Suite("sync record")
struct SyncRecordTests {
    static let device = [UInt8](repeating: 7, count: 16)

    static func header(
        _ keys: SyncKeys, _ pk: String = "svc\0acct", version: Int64 = 3, clock: HybridTime? = nil,
        deleted: Bool = false
    ) -> SyncRecordHeader {
        SyncRecordHeader(
            group: keys.group, recordID: keys.recordID(itemClass: .genericPassword, primaryKey: bytes(pk)),
            version: version, clock: clock ?? HybridTime(wall: 1_790_000_000_000, counter: 2, device: device),
            deleted: deleted)
    }

    static func with(
        _ h: SyncRecordHeader, group: SyncGroupID? = nil, recordID: [UInt8]? = nil, version: Int64? = nil,
        clock: HybridTime? = nil, deleted: Bool? = nil
    ) -> SyncRecordHeader {
        SyncRecordHeader(
            group: group ?? h.group, recordID: recordID ?? h.recordID, version: version ?? h.version,
            clock: clock ?? h.clock, deleted: deleted ?? h.deleted)
    }

    @Test(
        "round trip for each syncing class; the opener learns the class from the key",
        arguments: SyncKeys.syncingClasses)
    func roundTrip(_ protection: Accessibility) throws {
        let keys = try syncKeys()
        var rng = SyncRNG(seed: UInt64(protection.rawValue.count))
        for size in [0, 1, 31, 32, 33, 1000, 70_000] {
            let payload = rng.bytes(size)
            let h = Self.header(keys)
            let blob = try SyncRecord.seal(payload, protection: protection, header: h, keys: keys)
            #expect(blob.count == SyncRecord.minimumBytes + size)
            #expect(blob[0] == 1)
            #expect(try SyncRecord.clock(of: blob) == h.clock)
            let opened = try SyncRecord.open(blob, header: h, keys: keys)
            #expect(opened.payload == payload && opened.protection == protection)
            // Another device of the group, keys from the same root: same result.
            #expect(SyncRecord.hash(blob).count == 32)
        }
    }

    @Test("another device with the same root opens it; two seals of one payload differ (fresh item key and nonces)")
    func sharedRoot() throws {
        let group = SyncGroupID.random()
        let root = try SyncKeys.newRoot()
        let a = try SyncKeys(group: group, root: root)
        let b = try SyncKeys(group: group, root: try SecureBytes(copying: rootBytes(root)))
        let h = Self.header(a)
        let one = try SyncRecord.seal(bytes("pw"), protection: .afterFirstUnlock, header: h, keys: a)
        let two = try SyncRecord.seal(bytes("pw"), protection: .afterFirstUnlock, header: h, keys: a)
        #expect(one != two && SyncRecord.hash(one) != SyncRecord.hash(two))
        #expect(try SyncRecord.open(one, header: h, keys: b).payload == bytes("pw"))
        #expect(SyncRecord.hash(one) == SyncHash.plain(one))
    }

    @Test(
        "ThisDeviceOnly is refused at seal, tombstone or not",
        arguments: Accessibility.allCases.filter(\.isThisDeviceOnly))
    func deviceOnlyRefused(_ protection: Accessibility) throws {
        let keys = try syncKeys()
        #expect(throws: SyncCryptoError.noKeyForClass(protection)) {
            try SyncRecord.seal(bytes("x"), protection: protection, header: Self.header(keys), keys: keys)
        }
        #expect(throws: SyncCryptoError.noKeyForClass(protection)) {
            try SyncRecord.seal([], protection: protection, header: Self.header(keys, deleted: true), keys: keys)
        }
    }

    @Test("tombstones: the primary key only, under the ak key whatever the class; never opened as live")
    func tombstones() throws {
        let keys = try syncKeys()
        let h = Self.header(keys, version: 9, deleted: true)
        for protection in SyncKeys.syncingClasses {
            for payload in [[], bytes("class and primary key")] as [[UInt8]] {
                let blob = try SyncRecord.seal(payload, protection: protection, header: h, keys: keys)
                #expect(blob.count == SyncRecord.minimumBytes + payload.count)
                let opened = try SyncRecord.open(blob, header: h, keys: keys)
                #expect(opened.payload == payload && opened.protection == .whenUnlocked)
                // Presented as live: refused.
                #expect(throws: SyncCryptoError.doesNotAuthenticate) {
                    try SyncRecord.open(blob, header: Self.with(h, deleted: false), keys: keys)
                }
            }
        }
        // A live version presented as a tombstone (a server "deleting" it), even an empty one.
        let live = Self.header(keys, version: 9)
        for payload in [[], bytes("x")] as [[UInt8]] {
            let blob = try SyncRecord.seal(payload, protection: .whenUnlocked, header: live, keys: keys)
            #expect(throws: SyncCryptoError.doesNotAuthenticate) {
                try SyncRecord.open(blob, header: Self.with(live, deleted: true), keys: keys)
            }
        }
    }

    @Test("every header change and every other group's keys are refused", arguments: SyncKeys.syncingClasses)
    func headerTampering(_ protection: Accessibility) throws {
        let keys = try syncKeys()
        let h = Self.header(keys)
        let blob = try SyncRecord.seal(bytes("secret"), protection: protection, header: h, keys: keys)
        let otherID = keys.recordID(itemClass: .genericPassword, primaryKey: bytes("svc\0other"))
        let otherClassID = keys.recordID(itemClass: .internetPassword, primaryKey: bytes("svc\0acct"))
        let c = h.clock
        let cases: [SyncRecordHeader] = [
            Self.with(h, recordID: otherID), Self.with(h, recordID: otherClassID),
            Self.with(h, version: h.version + 1), Self.with(h, version: h.version - 1),
            Self.with(h, version: -h.version), Self.with(h, version: .max), Self.with(h, deleted: true),
            Self.with(h, group: .random()),
            Self.with(h, clock: HybridTime(wall: c.wall + 1, counter: c.counter, device: c.device)),
            Self.with(h, clock: HybridTime(wall: c.wall, counter: c.counter + 1, device: c.device)),
            Self.with(h, clock: HybridTime(wall: c.wall, counter: c.counter, device: [UInt8](repeating: 8, count: 16))),
        ]
        for bad in cases {
            #expect(throws: SyncCryptoError.doesNotAuthenticate, "\(bad)") {
                try SyncRecord.open(blob, header: bad, keys: keys)
            }
        }
        // Another group's keys, with this group's id or their own.
        let stranger = try syncKeys()
        let sameID = try SyncKeys(group: keys.group, root: try SyncKeys.newRoot())
        #expect(throws: SyncCryptoError.doesNotAuthenticate) { try SyncRecord.open(blob, header: h, keys: sameID) }
        #expect(throws: SyncCryptoError.doesNotAuthenticate) {
            try SyncRecord.open(blob, header: Self.with(h, group: stranger.group), keys: stranger)
        }
    }

    @Test("a changed clock inside the blob is refused even when the header is built from it")
    func clockInBlob() throws {
        let keys = try syncKeys()
        let h = Self.header(keys)
        let blob = try SyncRecord.seal(bytes("secret"), protection: .whenUnlocked, header: h, keys: keys)
        for i in SyncRecord.clockRange {
            var bad = blob
            bad[i] ^= 0x80
            let parsed = try SyncRecord.clock(of: bad)
            #expect(parsed != h.clock)
            #expect(throws: SyncCryptoError.doesNotAuthenticate) {
                try SyncRecord.open(bad, header: Self.with(h, clock: parsed), keys: keys)
            }
        }
    }

    @Test("every single-byte change of a blob is refused; truncation and extension too")
    func byteFlips() throws {
        let keys = try syncKeys()
        let h = Self.header(keys)
        let blob = try SyncRecord.seal(bytes("a secret"), protection: .always, header: h, keys: keys)
        var rng = SyncRNG(seed: 7)
        for i in blob.indices {
            var bad = blob
            bad[i] ^= UInt8.random(in: 1...255, using: &rng)
            let expected: SyncCryptoError = i == 0 ? .unsupportedFormat(bad[0]) : .doesNotAuthenticate
            #expect(throws: expected, "byte \(i)") { try SyncRecord.open(bad, header: h, keys: keys) }
        }
        #expect(throws: SyncCryptoError.doesNotAuthenticate) {
            try SyncRecord.open(Array(blob.dropLast()), header: h, keys: keys)
        }
        #expect(throws: SyncCryptoError.doesNotAuthenticate) { try SyncRecord.open(blob + [0], header: h, keys: keys) }
        for count in [0, 1, 28, SyncRecord.minimumBytes - 1] {
            #expect(throws: SyncCryptoError.malformed("a record blob is at least \(SyncRecord.minimumBytes) bytes")) {
                try SyncRecord.open(Array(blob.prefix(count)), header: h, keys: keys)
            }
            #expect(throws: SyncCryptoError.self) { try SyncRecord.clock(of: Array(blob.prefix(count))) }
        }
    }

    @Test("record A's blob presented as record B (same version, clock, group) is refused, both ways")
    func swapRecords() throws {
        let keys = try syncKeys()
        let a = Self.header(keys, "svc\0alice")
        let b = Self.header(keys, "svc\0bob")
        let blobA = try SyncRecord.seal(bytes("alice's"), protection: .whenUnlocked, header: a, keys: keys)
        let blobB = try SyncRecord.seal(bytes("bob's"), protection: .whenUnlocked, header: b, keys: keys)
        #expect(throws: SyncCryptoError.doesNotAuthenticate) { try SyncRecord.open(blobA, header: b, keys: keys) }
        #expect(throws: SyncCryptoError.doesNotAuthenticate) { try SyncRecord.open(blobB, header: a, keys: keys) }
        // Splicing: A's wrapped key with B's payload box, and the reverse.
        let split = SyncRecord.wrappedKeyRange.upperBound
        let spliced = Array(blobA[..<split]) + Array(blobB[split...])
        #expect(throws: SyncCryptoError.doesNotAuthenticate) { try SyncRecord.open(spliced, header: a, keys: keys) }
        #expect(throws: SyncCryptoError.doesNotAuthenticate) { try SyncRecord.open(spliced, header: b, keys: keys) }
    }

    @Test("seal refuses a header of another group or a record id that is not 32 bytes")
    func sealMisuse() throws {
        let keys = try syncKeys()
        #expect(throws: SyncCryptoError.self) {
            try SyncRecord.seal(
                [], protection: .whenUnlocked, header: Self.with(Self.header(keys), group: .random()), keys: keys)
        }
        #expect(throws: SyncCryptoError.self) {
            try SyncRecord.seal(
                [], protection: .whenUnlocked, header: Self.with(Self.header(keys), recordID: [1]), keys: keys)
        }
    }

    @Test("random payloads, classes and headers round trip; each refused under a neighbour's header (500)")
    func randomRoundTrips() throws {
        let keys = try syncKeys()
        var rng = SyncRNG(seed: 1031)
        for _ in 0..<500 {
            let deleted = UInt8.random(in: 0..<5, using: &rng) == 0
            let payload = deleted ? [] : rng.bytes(Int.random(in: 0...300, using: &rng))
            let protection = SyncKeys.syncingClasses.randomElement(using: &rng)!
            let h = SyncRecordHeader(
                group: keys.group, recordID: rng.bytes(32), version: Int64.random(in: 1...1_000_000, using: &rng),
                clock: HybridTime(
                    wall: rng.next() >> 20, counter: UInt32.random(in: 0...9, using: &rng), device: rng.bytes(16)),
                deleted: deleted)
            let blob = try SyncRecord.seal(payload, protection: protection, header: h, keys: keys)
            let opened = try SyncRecord.open(
                blob, header: Self.with(h, clock: try SyncRecord.clock(of: blob)), keys: keys)
            #expect(opened.payload == payload)
            #expect(opened.protection == (deleted ? .whenUnlocked : protection))
            #expect(throws: SyncCryptoError.doesNotAuthenticate) {
                try SyncRecord.open(blob, header: Self.with(h, version: h.version + 1), keys: keys)
            }
        }
    }
}
