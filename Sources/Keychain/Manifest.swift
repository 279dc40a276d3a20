import Foundation
import KeychainCrypto
import KeychainStore

/// The authenticated manifest: a count and the XOR of a keyed hash per row over
/// (id, version, digest of every stored column). XOR makes it updatable in O(1) per change;
/// without the manifest key nobody can compute the entry of a row, so rows cannot be
/// deleted, swapped, altered or replayed without the total changing.
struct Manifest {
    var count: Int64
    var accumulator: [UInt8]

    static let empty = Manifest(count: 0, accumulator: [UInt8](repeating: 0, count: 32))

    init(count: Int64, accumulator: [UInt8]) {
        self.count = count
        self.accumulator = accumulator
    }

    init?(encoded: [UInt8]) {
        guard encoded.count == 40 else { return nil }
        count = encoded[0..<8].reversed().reduce(Int64(0)) { ($0 << 8) | Int64($1) }
        accumulator = Array(encoded[8...])
    }

    var encoded: [UInt8] { Framing.int(count) + accumulator }

    static func entry(_ row: StoredItem, key: SecureBytes) -> [UInt8] {
        let digest = KeyedHash.digest([
            Framing.text(row.itemClass), row.primaryIndex, row.secondaryIndex,
            Framing.int(row.version), Framing.int(row.dataGeneration),
            row.sealedAttributes, row.wrappedItemKey, row.sealedData,
        ])
        return KeyedHash.hash(
            Framing.frame([Framing.text("kcfs/manifest/v1"), Framing.int(row.id), Framing.int(row.version), digest]),
            key: key)
    }

    /// The access policy's entry: XORed in without counting as a row.
    static func policyEntry(_ blob: [UInt8], key: SecureBytes) -> [UInt8] {
        KeyedHash.hash(Framing.frame([Framing.text("kcfs/manifest-policy/v1"), KeyedHash.digest([blob])]), key: key)
    }

    mutating func toggle(_ entry: [UInt8]) { xor(entry) }
    mutating func insert(_ entry: [UInt8]) { xor(entry); count += 1 }
    mutating func remove(_ entry: [UInt8]) { xor(entry); count -= 1 }
    private mutating func xor(_ entry: [UInt8]) {
        for i in 0..<32 { accumulator[i] ^= entry[i] }
    }
}

extension Keychain {
    // MARK: Integrity

    /// Recomputes the manifest over every row and compares it with the stored one.
    public func verifyIntegrity() throws { try verifyManifest(keys: try currentKeys()) }

    func verifyManifest(keys: Keys) throws {
        try storeCall {
            try store.read { vault in
                guard let stored = try vault.meta("manifest"), let expected = Manifest(encoded: stored) else {
                    throw KeychainError(.decode, "vault integrity check failed: the manifest is missing or malformed")
                }
                var actual = Manifest.empty
                try vault.forEachItem { actual.insert(Manifest.entry($0, key: keys.manifest)) }
                if let policy = try vault.meta("access_policy") {
                    actual.toggle(Manifest.policyEntry(policy, key: keys.manifest))
                }
                guard actual.count == expected.count, Sodium.constantTimeEqual(actual.accumulator, expected.accumulator)
                else {
                    throw KeychainError(
                        .decode,
                        "vault integrity check failed: the item table does not match its authenticated manifest (\(actual.count) rows found, \(expected.count) expected): rows were deleted, altered, swapped or replayed"
                    )
                }
            }
        }
    }

    /// Adjusts the stored manifest for one row removed and/or added, inside the write
    /// transaction that removes or adds it.
    func updateManifest(keys: Keys, removing old: StoredItem?, adding new: StoredItem?, in vault: any ItemStoreWriter)
        throws
    {
        guard let stored = try vault.meta("manifest"), var manifest = Manifest(encoded: stored) else {
            throw KeychainError(.decode, "vault integrity check failed: the manifest is missing or malformed")
        }
        if let old { manifest.remove(Manifest.entry(old, key: keys.manifest)) }
        if let new { manifest.insert(Manifest.entry(new, key: keys.manifest)) }
        try vault.setMeta("manifest", manifest.encoded)
    }
}
