import KeychainCrypto

/// What identifies one version of one record, as the server's columns and the blob give it.
/// The opener builds it from what it expects (the group it is in; record id, version and
/// deleted flag from the row; the clock from the blob), and every field is bound into the
/// blob's associated data, so a blob presented under any other header does not open.
public struct SyncRecordHeader: Sendable, Equatable {
    public let group: SyncGroupID
    public let recordID: [UInt8]
    public let version: Int64
    public let clock: HybridTime
    public let deleted: Bool

    public init(group: SyncGroupID, recordID: [UInt8], version: Int64, clock: HybridTime, deleted: Bool) {
        self.group = group
        self.recordID = recordID
        self.version = version
        self.clock = clock
        self.deleted = deleted
    }

    /// Every field, framed (lengths first), after a label and the blob's format byte.
    func fields(format: UInt8) -> [[UInt8]] {
        [
            Framing.text("kcfs/sync-record/v1"), [format], group.bytes, recordID, Framing.int(version), clock.encoded,
            [deleted ? 1 : 0],
        ]
    }
}

/// One record version as the server stores it:
///
///     blob = format (1 byte, 1) ‖ clock (28 bytes, HybridTime.encoded)
///            ‖ item key wrapped (72 bytes: AEAD under the class's record key, AD = header ‖ "item-key")
///            ‖ payload sealed (AEAD under the item key, AD = header)
///
/// Safety argument, against a server that reads and rewrites every row:
/// - **Confidentiality**: the payload is sealed under a fresh random item key per version,
///   which is wrapped under a record key derived from the group's root; the server has
///   neither. It sees the blob's length (payload + 141 bytes), the record id, the version, the
///   deleted flag and the clock (in clear: the receiver needs it before opening, and it tells
///   the server which device id stamped the version and when it believed it was).
/// - **No move**: the associated data of both boxes is the framed header (label, format,
///   group, record id, version, clock, deleted), so a blob shown as another record, another
///   version, in another group, with another clock or the other deleted state does not open:
///   the server cannot turn A's password into B's, replay an old version as a new version
///   number, or present a tombstone as live (undelete) or a live version as a tombstone.
/// - **No replay as new**: a genuine old blob opens only under its own version number and
///   clock; the engine keeps the highest version and clock it has applied per record and
///   ignores anything not newer, so a rollback shows as what it is. What no construction can
///   stop is the server *withholding* newer versions from a device that never saw them.
/// - **No class leak**: the three record keys' wraps are the same size and the opener tries
///   each (`open`), so the server never learns an item's protection class; it is returned to
///   the opener from the key that opened it, authenticated by that key.
/// - **Tombstones** have an empty payload and are wrapped under the "ak" key whatever the
///   item's class was, so a deletion leaves nothing of the item but its record id; the opener
///   of a row marked deleted tries that key only and refuses a non-empty payload.
/// - **Item keys** live only in `KeyScratch` slots (guarded, wiped after each use). A fresh
///   item key per version also keeps a future root rotation to re-wrapping 72 bytes per row.
public enum SyncRecord {
    public static let formatVersion: UInt8 = 1
    static let clockRange = 1..<(1 + HybridTime.encodedBytes)
    static let wrappedKeyRange = clockRange.upperBound..<(clockRange.upperBound + AEAD.overhead + AEAD.keyBytes)
    /// The smallest blob: an empty payload's box.
    public static let minimumBytes = wrappedKeyRange.upperBound + AEAD.overhead

    /// Seals one version. A ThisDeviceOnly `protection` throws `noKeyForClass` (such items
    /// never sync); a tombstone (`header.deleted`) carries the item's class and primary key only
    /// (so the device that applies it finds the item; Sync/SyncPayload.swift) and is wrapped
    /// under the "ak" key whatever `protection` says.
    public static func seal(_ payload: [UInt8], protection: Accessibility, header: SyncRecordHeader, keys: SyncKeys)
        throws -> [UInt8]
    {
        guard header.group == keys.group else { throw SyncCryptoError.malformed("the header's group is not the keys'") }
        guard header.recordID.count == 32 else { throw SyncCryptoError.malformed("a record id is 32 bytes") }
        let classKey = try keys.recordKey(for: protection)
        let wrapKey = header.deleted ? try keys.recordKey(for: .whenUnlocked) : classKey
        let fields = header.fields(format: formatVersion)
        do {
            return try KeyScratch.shared.withKey { itemKey in
                itemKey.fillRandom()
                let wrapped = try itemKey.withBytes {
                    try AEAD.seal($0, associatedData: Framing.frame(fields + [Framing.text("item-key")]), key: wrapKey)
                }
                let sealed = try AEAD.seal(payload, associatedData: Framing.frame(fields), key: itemKey)
                var blob: [UInt8] = [formatVersion]
                blob.reserveCapacity(minimumBytes + payload.count)
                blob += header.clock.encoded
                blob += wrapped
                blob += sealed
                return blob
            }
        } catch { throw SyncCryptoError.from(error, otherwise: .unavailable("sealing failed")) }
    }

    /// The clock a blob carries, read without opening it (the opener needs it for the header).
    /// Not authenticated here: `open` refuses the blob if the clock was altered, so the engine
    /// observes it (`HybridClock.observe`) only after `open` succeeds, never before: an
    /// unauthenticated clock would let the server push every device's clock forward.
    public static func clock(of blob: [UInt8]) throws -> HybridTime {
        try checkShape(blob)
        return HybridTime(encoded: blob[clockRange])!
    }

    /// Opens one version against the header the caller expects. Tries the record key of each
    /// syncing class (the "ak" key only for a tombstone) for the item key, then opens the payload.
    /// Any mismatch is `doesNotAuthenticate`, with nothing returned.
    public static func open(_ blob: [UInt8], header: SyncRecordHeader, keys: SyncKeys) throws
        -> (payload: [UInt8], protection: Accessibility)
    {
        try checkShape(blob)
        guard header.group == keys.group, blob[clockRange].elementsEqual(header.clock.encoded) else {
            throw SyncCryptoError.doesNotAuthenticate
        }
        let fields = header.fields(format: formatVersion)
        let keyAD = Framing.frame(fields + [Framing.text("item-key")])
        let wrapped = Array(blob[wrappedKeyRange])
        let sealed = Array(blob[wrappedKeyRange.upperBound...])
        let candidates: [Accessibility] = header.deleted ? [.whenUnlocked] : SyncKeys.syncingClasses
        do {
            return try KeyScratch.shared.withKey { itemKey in
                for protection in candidates {
                    do {
                        try AEAD.openKey(
                            wrapped, associatedData: keyAD, key: try keys.recordKey(for: protection), into: itemKey)
                    } catch CryptoError.authenticationFailed {
                        continue
                    }
                    let payload = try AEAD.open(sealed, associatedData: Framing.frame(fields), key: itemKey)
                    return (payload, protection)
                }
                throw SyncCryptoError.doesNotAuthenticate
            }
        } catch { throw SyncCryptoError.from(error) }
    }

    /// BLAKE2b-256 of the whole blob: the tie-breaker between two versions with equal clocks
    /// (the smaller hash wins, as Apple's merge does). Public data, so unkeyed; every device
    /// computes the same, so every device picks the same winner.
    public static func hash(_ blob: [UInt8]) -> [UInt8] { SyncHash.plain(blob) }

    private static func checkShape(_ blob: [UInt8]) throws {
        guard blob.count >= minimumBytes else {
            throw SyncCryptoError.malformed("a record blob is at least \(minimumBytes) bytes")
        }
        guard blob[0] == formatVersion else { throw SyncCryptoError.unsupportedFormat(blob[0]) }
    }
}
