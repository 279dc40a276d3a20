import KeychainCrypto
import Testing

@testable import Keychain

// Issue 31's sync keys: what is derived from a group's root, the record ids two devices meet
// on, and the root's wrap in the local vault. Shared helpers of the Sync*Tests files are here.

/// SplitMix64: a seeded generator, so a property test that fails can be run again as it ran.
struct SyncRNG: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func bytes(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8.random(in: 0...255, using: &self) } }
}

func syncKeys(group: SyncGroupID = .random()) throws -> SyncKeys {
    try SyncKeys(group: group, root: try SyncKeys.newRoot())
}

func rootBytes(_ root: SecureBytes) -> [UInt8] { root.withUnsafeBytes { Array($0) } }

@Suite("sync keys")
struct SyncKeysTests {
    @Test("group ids: 16 bytes, random, hex of 32 digits; other lengths refused")
    func groupID() {
        let a = SyncGroupID.random()
        let b = SyncGroupID.random()
        #expect(a.bytes.count == 16 && a != b)
        #expect(a.hex.count == 32 && a.hex.allSatisfy { "0123456789abcdef".contains($0) })
        #expect(SyncGroupID(bytes: a.bytes) == a)
        #expect(SyncGroupID(bytes: [UInt8](repeating: 0, count: 15)) == nil)
        #expect(SyncGroupID(bytes: [UInt8](repeating: 0, count: 17)) == nil)
        #expect(SyncGroupID(bytes: Array(0..<16))!.hex == "000102030405060708090a0b0c0d0e0f")
    }

    @Test("the same root gives the same keys on two devices; another root, other keys")
    func deterministic() throws {
        let group = SyncGroupID.random()
        let root = try SyncKeys.newRoot()
        #expect(root.count == 32)
        let one = try SyncKeys(group: group, root: root)
        let two = try SyncKeys(group: group, root: try SecureBytes(copying: rootBytes(root)))
        let other = try SyncKeys(group: group, root: try SyncKeys.newRoot())
        let pk = bytes("svc\0account")
        #expect(one.recordID(itemClass: .genericPassword, primaryKey: pk).count == 32)
        #expect(
            one.recordID(itemClass: .genericPassword, primaryKey: pk)
                == two.recordID(itemClass: .genericPassword, primaryKey: pk))
        #expect(
            one.recordID(itemClass: .genericPassword, primaryKey: pk)
                != other.recordID(itemClass: .genericPassword, primaryKey: pk))
        for protection in SyncKeys.syncingClasses {
            #expect(rootBytes(try one.recordKey(for: protection)) == rootBytes(try two.recordKey(for: protection)))
        }
    }

    @Test("every derived key differs from the others and from the root")
    func separated() throws {
        let root = try SyncKeys.newRoot()
        let keys = try SyncKeys(group: .random(), root: root)
        var seen: Set<[UInt8]> = [rootBytes(root)]
        for protection in SyncKeys.syncingClasses { seen.insert(rootBytes(try keys.recordKey(for: protection))) }
        // The record-id key is not exposed; its subkey is checked by derivation itself.
        seen.insert(rootBytes(try KeyDerivation.subkey(of: root, id: 1, context: SyncKeys.kdfContext)))
        #expect(seen.count == 5)
        // Not the vault's subkeys under the same bytes: another context.
        #expect(!seen.contains(rootBytes(try KeyDerivation.subkey(of: root, id: 2, context: "kcfsvlt1"))))
    }

    @Test("ThisDeviceOnly classes have no key", arguments: Accessibility.allCases.filter(\.isThisDeviceOnly))
    func noDeviceOnlyKey(_ protection: Accessibility) throws {
        let keys = try syncKeys()
        #expect(throws: SyncCryptoError.noKeyForClass(protection)) { try keys.recordKey(for: protection) }
        #expect(!SyncKeys.syncingClasses.contains(protection))
    }

    @Test("a root that is not 32 bytes is refused")
    func rootLength() throws {
        for count in [0, 16, 31, 33, 64] {
            #expect(throws: SyncCryptoError.self) {
                try SyncKeys(group: .random(), root: try SecureBytes(copying: [UInt8](repeating: 1, count: count)))
            }
        }
    }

    @Test("record ids separate class, primary key and group; framing makes no two inputs meet")
    func recordIDs() throws {
        let root = try SyncKeys.newRoot()
        let keys = try SyncKeys(group: .random(), root: root)
        let otherGroup = try SyncKeys(group: .random(), root: root)
        var ids: Set<[UInt8]> = []
        var inputs = 0
        for itemClass in ItemClass.allCases {
            for pk in [[], [0], [0, 0], bytes("a"), bytes("ab"), bytes("genp"), bytes("a\0b")] as [[UInt8]] {
                ids.insert(keys.recordID(itemClass: itemClass, primaryKey: pk))
                ids.insert(otherGroup.recordID(itemClass: itemClass, primaryKey: pk))
                inputs += 2
            }
        }
        #expect(ids.count == inputs)
        // 2,000 random distinct primary keys: as many distinct ids, each deterministic.
        var rng = SyncRNG(seed: 31)
        var keysSeen: Set<[UInt8]> = []
        var randomIDs: Set<[UInt8]> = []
        while keysSeen.count < 2000 {
            let pk = rng.bytes(Int.random(in: 5...64, using: &rng))  // none of the fixed ones above
            guard keysSeen.insert(pk).inserted else { continue }
            let id = keys.recordID(itemClass: .key, primaryKey: pk)
            #expect(id == keys.recordID(itemClass: .key, primaryKey: pk))
            randomIDs.insert(id)
        }
        let distinct = randomIDs.count
        #expect(distinct == 2000)
        let disjoint = randomIDs.isDisjoint(with: ids)
        #expect(disjoint)
    }

    @Test("the root's wrap opens only in its vault, for its group, under its key")
    func rootWrap() throws {
        let root = try SyncKeys.newRoot()
        let group = SyncGroupID.random()
        let vault = Sodium.randomBytes(16)
        let key = try SecureBytes.random(count: 32)
        let box = try SyncKeys.wrapRoot(root, group: group, vaultID: vault, under: key)
        #expect(box.count == 32 + AEAD.overhead)
        let opened = try SyncKeys.unwrapRoot(box, group: group, vaultID: vault, under: key)
        #expect(rootBytes(opened) == rootBytes(root))
        let refused = SyncCryptoError.doesNotAuthenticate
        #expect(throws: refused) { try SyncKeys.unwrapRoot(box, group: .random(), vaultID: vault, under: key) }
        #expect(throws: refused) {
            try SyncKeys.unwrapRoot(box, group: group, vaultID: Sodium.randomBytes(16), under: key)
        }
        #expect(throws: refused) {
            try SyncKeys.unwrapRoot(box, group: group, vaultID: vault, under: try SecureBytes.random(count: 32))
        }
        for i in box.indices {
            var bad = box
            bad[i] ^= 0x01
            #expect(throws: refused) { try SyncKeys.unwrapRoot(bad, group: group, vaultID: vault, under: key) }
        }
        #expect(throws: SyncCryptoError.self) {
            try SyncKeys.unwrapRoot(Array(box.dropLast()), group: group, vaultID: vault, under: key)
        }
    }
}
