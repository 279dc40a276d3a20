import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

/// The authenticated manifest (vault formats 2 to 7). Stored as the meta blob `manifest`:
///
///     counter ‖ count ‖ highestID ‖ accumulator ‖ policy ‖ tag            (8+8+8+32+32+32 bytes)
///     counter ‖ count ‖ highestID ‖ accumulator ‖ policy ‖ names ‖ tag    (format 6: +32 bytes)
///
/// - `accumulator`: the XOR of `entry(row)` over every row, a keyed BLAKE2b of the row's id,
///   version and every stored column (MSet-XOR-Hash; updatable in O(1) per change), and from
///   format 3 of `tagEntry` over every attribute-index row (item id, tag); from format 4 the
///   XOR of the keyed entries of the manifest's buckets instead, each bucket the XOR of its own
///   rows' and index rows' entries (ManifestBuckets.swift), and `count` their sum; in format 5
///   also the XOR of the name lists' bucket entries (NameLists.swift);
/// - `names` (format 6): the XOR of the name lists' bucket entries, apart from `accumulator`, so
///   the id buckets are checked against the tag without folding every list's bucket (an unlock),
///   and the lists' buckets only when a listing needs them;
/// - `policy`: the keyed entry of the stored access policy (zeros when there is none);
/// - `counter`: incremented by every write transaction (rollback detection);
/// - `highestID`: the highest item id ever issued, so ids are never reused even if SQLite's
///   own sequence is rolled back;
/// - `tag`: keyed BLAKE2b, under a key used for nothing else, over all of the above, the vault
///   id and every header field and wrapped class key.
///
/// Why it cannot be forged from honest copies: the tag key comes from the master key, so the
/// only manifests that verify are ones the key holder wrote, each for one state of the table
/// that really existed; a table assembled from several copies (or with a row deleted,
/// replayed or duplicated) would have to XOR to such a state's accumulator, which without the
/// entry key means predicting BLAKE2b outputs. docs/security.md states the argument in full.
struct Manifest: Equatable {
    var counter: Int64
    var count: Int64
    var highestID: Int64
    var accumulator: [UInt8]
    var policy: [UInt8]
    /// Format 6: the name lists' accumulator; nil in the manifests of formats 2 to 5.
    var names: [UInt8]? = nil

    static let zeros = [UInt8](repeating: 0, count: 32)
    /// An empty vault's manifest in today's format.
    static let empty = Manifest(counter: 0, count: 0, highestID: 0, accumulator: zeros, policy: zeros, names: zeros)
    static let tagBytes = 32
    static let encodedBytes = 24 + 32 + 32 + tagBytes
    /// Format 6's, with the name lists' accumulator.
    static let encodedBytesWithNames = encodedBytes + 32

    /// Everything but the tag.
    var body: [UInt8] {
        Framing.int(counter) + Framing.int(count) + Framing.int(highestID) + accumulator + policy + (names ?? [])
    }

    /// The manifest and its tag, if `stored` has one of the two shapes (nothing is verified here;
    /// `AuthenticatedState.verified` checks the shape is the header's format's).
    static func decode(_ stored: [UInt8]) -> (Manifest, tag: [UInt8])? {
        guard stored.count == encodedBytes || stored.count == encodedBytesWithNames else { return nil }
        func int(_ at: Int) -> Int64 { stored[at..<(at + 8)].reversed().reduce(Int64(0)) { ($0 << 8) | Int64($1) } }
        let withNames = stored.count == encodedBytesWithNames
        let manifest = Manifest(
            counter: int(0), count: int(8), highestID: int(16), accumulator: Array(stored[24..<56]),
            policy: Array(stored[56..<88]), names: withNames ? Array(stored[88..<120]) : nil)
        return (manifest, Array(stored[(withNames ? 120 : 88)...]))
    }

    /// The row's entry: keyed BLAKE2b over the domain, the id, the version and a digest of every
    /// stored column (the same construction as format 1, so migration keeps every entry).
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

    /// An attribute-index row's entry (format 3): keyed BLAKE2b under the entry key over the
    /// domain `kcfs/manifest-attr/v1` (never a row entry's), the item id and the tag. XORed
    /// into the same accumulator as the rows, so deleting, adding or moving an index row makes
    /// the table disagree with its manifest exactly as a deleted row does.
    static func tagEntry(itemID: Int64, _ tag: [UInt8], key: SecureBytes) -> [UInt8] {
        KeyedHash.hash(Framing.frame([Framing.text("kcfs/manifest-attr/v1"), Framing.int(itemID), tag]), key: key)
    }

    /// Adds or removes (the same XOR) one attribute-index row.
    mutating func toggleTag(itemID: Int64, _ tag: [UInt8], key: SecureBytes) {
        xor(Manifest.tagEntry(itemID: itemID, tag, key: key))
    }

    /// The access policy's entry.
    static func policyEntry(_ blob: [UInt8]?, key: SecureBytes) -> [UInt8] {
        guard let blob else { return zeros }
        return KeyedHash.hash(
            Framing.frame([Framing.text("kcfs/manifest-policy/v1"), KeyedHash.digest([blob])]), key: key)
    }

    /// What a table that does not match its manifest (or a bucket its stored value) went
    /// through, as far as the row counts tell: the words every integrity message uses.
    static func whatDiffers(found: Int64, expected: Int64) -> String {
        found < expected
            ? "rows were deleted"
            : found > expected
                ? "rows were added"
                : "rows were altered, swapped, or replayed or recombined from older copies, or attribute-index entries were deleted, added or moved"
    }

    mutating func insert(_ row: StoredItem, key: SecureBytes) {
        xor(Manifest.entry(row, key: key))
        count += 1
        highestID = max(highestID, row.id)
    }

    mutating func remove(_ row: StoredItem, key: SecureBytes) {
        xor(Manifest.entry(row, key: key))
        count -= 1
    }

    private mutating func xor(_ entry: [UInt8]) {
        for i in 0..<32 { accumulator[i] ^= entry[i] }
    }
}

/// The manifest keys, subkeys of the master key: one for row entries, one for the tag (and the
/// metadata key the name lists are sealed under).
struct ManifestKeys: Sendable {
    let entry: SecureBytes
    let tag: SecureBytes

    /// The attribute boxes' key (Subkey.metadata), here because every write keeps the name
    /// lists (vault format 5, NameLists.swift): the writer opens an added or renamed row's
    /// attributes for its name and seals the name list's chunks under it.
    let metadata: SecureBytes

    init(master: SecureBytes) throws {
        entry = try KeyDerivation.subkey(of: master, id: Subkey.manifest.rawValue, context: Subkey.context)
        tag = try KeyDerivation.subkey(of: master, id: Subkey.manifestTag.rawValue, context: Subkey.context)
        metadata = try KeyDerivation.subkey(of: master, id: Subkey.metadata.rawValue, context: Subkey.context)
    }
}

/// What the tag covers besides the manifest: the vault id and the store's other authenticated
/// state, read in the same transaction as the manifest.
struct AuthenticatedState {
    let header: VaultHeader
    let classKeys: [String: [UInt8]]
    /// Unkeyed BLAKE2b of every header field and every wrapped class key (in protection order),
    /// each length-framed. Computed once, from the fields as read: a commit tags with it twice
    /// (the stored manifest's check, and the next manifest when the state did not change).
    let digest: [UInt8]

    init(header: VaultHeader, classKeys: [String: [UInt8]]) {
        self.header = header
        self.classKeys = classKeys
        var parts = header.authenticatedFields
        for protection in classKeys.keys.sorted() {
            parts += [Framing.text(protection), classKeys[protection]!]
        }
        digest = KeyedHash.digest(parts)
    }

    static func read(from vault: any ItemStoreReader) throws -> AuthenticatedState {
        AuthenticatedState(header: try VaultHeader.read(from: vault), classKeys: try vault.classKeys())
    }

    func tag(_ manifest: Manifest, keys: ManifestKeys) -> [UInt8] {
        KeyedHash.hash(
            Framing.frame([Framing.text("kcfs/manifest-tag/v2"), header.vaultID, manifest.body, digest]),
            key: keys.tag)
    }

    func encode(_ manifest: Manifest, keys: ManifestKeys) -> [UInt8] { manifest.body + tag(manifest, keys: keys) }

    /// The stored manifest, if its tag verifies over it and this state.
    func verified(_ stored: [UInt8]?, keys: ManifestKeys) throws -> Manifest {
        guard let stored, let (manifest, tag) = Manifest.decode(stored),
            (manifest.names != nil) == (header.format >= VaultHeader.nameAccumulatorFormat)
        else {
            throw KeychainError(.decode, "vault integrity check failed: the manifest is missing or malformed")
        }
        guard Sodium.constantTimeEqual(tag, self.tag(manifest, keys: keys)) else {
            throw KeychainError(
                .decode,
                "vault integrity check failed: the manifest's authentication tag does not verify: the manifest, a header field (such as device_key_id) or a class key was altered"
            )
        }
        return manifest
    }
}

extension Keychain {
    /// Checks the manifest again (tag, table, policy) against the file as it is now: what
    /// unlock checks, without unlocking.
    public func verifyIntegrity() throws {
        let keys = try currentKeys()
        _ = try verifyManifest(keys: keys.manifest, metadataKey: keys.metadata)
    }
}
