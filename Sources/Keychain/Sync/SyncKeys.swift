import KeychainCrypto

/// A sync group: the devices that share one root key. Its id is 16 random bytes, public (the
/// server stores it in every row); it names the group and is bound into every box, so nothing
/// sealed for one group opens as another's.
public struct SyncGroupID: Hashable, Sendable, CustomStringConvertible {
    public static let byteCount = 16
    public let bytes: [UInt8]

    public init?(bytes: [UInt8]) {
        guard bytes.count == Self.byteCount else { return nil }
        self.bytes = bytes
    }

    public static func random() -> SyncGroupID { SyncGroupID(bytes: Sodium.randomBytes(byteCount))! }

    public var hex: String { AttributeText.hex(bytes) }

    public var description: String { hex }
}

/// The keys of one sync group, derived from its root key.
///
///     root (32 random bytes, per group) ──crypto_kdf "kcfssync"──► record-id key (id 1),
///         record key "ak" (id 2), record key "ck" (id 3), record key "dk" (id 4)
///
/// Safety argument. The root is random and used for nothing but `crypto_kdf`, so the four
/// subkeys are independent pseudorandom keys: one purpose each, and the context "kcfssync"
/// keeps them apart from the vault's own subkeys ("kcfsvlt1") even if a root were ever equal
/// to a master key. Three record keys, one per syncing protection class, so that a device may
/// some day hold only the classes its lock state allows (as the vault's class keys are kept);
/// the server cannot tell which opened a blob (`SyncRecord.open` tries them). ThisDeviceOnly
/// classes get no key at all: such an item can never be sealed for the server, whatever the
/// caller asks.
public struct SyncKeys: Sendable {
    public static let kdfContext = "kcfssync"
    /// The protection classes whose items sync, in the order their keys are tried.
    public static let syncingClasses: [Accessibility] = [.whenUnlocked, .afterFirstUnlock, .always]
    public static let rootBytes = 32

    public let group: SyncGroupID
    private let recordIDKey: SecureBytes
    private let recordKeys: [SecureBytes]

    public init(group: SyncGroupID, root: SecureBytes) throws {
        guard root.count == Self.rootBytes else { throw SyncCryptoError.malformed("a sync root key is 32 bytes") }
        self.group = group
        do {
            recordIDKey = try KeyDerivation.subkey(of: root, id: 1, context: Self.kdfContext)
            recordKeys = try Self.syncingClasses.map {
                try KeyDerivation.subkey(of: root, id: Self.subkeyID($0)!, context: Self.kdfContext)
            }
        } catch {
            throw SyncCryptoError.from(error, otherwise: .unavailable("key derivation failed"))
        }
    }

    private init(group: SyncGroupID, recordIDKey: SecureBytes) {
        self.group = group
        self.recordIDKey = recordIDKey
        self.recordKeys = []
    }

    /// The keys a locked vault keeps: the record-id key alone, so a change made while locked is
    /// journaled under its record id; sealing or opening a record throws (`noKeyForClass`).
    public func journalOnly() -> SyncKeys { SyncKeys(group: group, recordIDKey: recordIDKey) }

    /// Whether the record keys are held (false after `journalOnly`).
    public var canSeal: Bool { !recordKeys.isEmpty }

    /// A fresh root key for a new group: 32 bytes from the system CSPRNG, in guarded memory.
    public static func newRoot() throws -> SecureBytes {
        do {
            return try SecureBytes.random(count: rootBytes)
        } catch { throw SyncCryptoError.from(error, otherwise: .unavailable("no guarded memory")) }
    }

    static func subkeyID(_ protection: Accessibility) -> UInt64? {
        switch protection {
        case .whenUnlocked: 2
        case .afterFirstUnlock: 3
        case .always: 4
        default: nil
        }
    }

    /// The record key of a syncing class; a ThisDeviceOnly class has none (a caller's bug).
    func recordKey(for protection: Accessibility) throws -> SecureBytes {
        guard let index = Self.syncingClasses.firstIndex(of: protection), index < recordKeys.count else {
            throw SyncCryptoError.noKeyForClass(protection)
        }
        return recordKeys[index]
    }

    /// The server's name for an item: 32 bytes of keyed BLAKE2b over the framed
    /// ("kcfs/sync-record-id/v1", group, item class, primary key) under the record-id key.
    ///
    /// Deterministic, so two devices that create the same item (same class and primary key)
    /// meet on one row and the merge decides, instead of two rows for one item. What the server
    /// learns is exactly that equality: which versions are of the same item, over time. Keyed,
    /// so it cannot test a guess ("is there a github.com password?") without the root; it
    /// learns neither the class nor the primary key. Framed, so no two different (class, key)
    /// pairs give the same message.
    public func recordID(itemClass: ItemClass, primaryKey: [UInt8]) -> [UInt8] {
        KeyedHash.hash(
            Framing.frame([
                Framing.text("kcfs/sync-record-id/v1"), group.bytes, Framing.text(itemClass.rawValue), primaryKey,
            ]), key: recordIDKey)
    }

    /// The root key wrapped for the local vault, under a key the caller derives from the vault's
    /// master key (as the class keys are wrapped). The associated data binds the label, the
    /// vault id and the group id: a wrap copied into another vault, or relabelled as another
    /// group's root, does not open.
    public static func wrapRoot(_ root: SecureBytes, group: SyncGroupID, vaultID: [UInt8], under key: SecureBytes)
        throws -> [UInt8]
    {
        guard root.count == rootBytes else { throw SyncCryptoError.malformed("a sync root key is 32 bytes") }
        guard key.count == AEAD.keyBytes else { throw SyncCryptoError.malformed("a wrapping key is 32 bytes") }
        do {
            return try root.withUnsafeBytes {
                try AEAD.seal($0, associatedData: rootAssociatedData(group: group, vaultID: vaultID), key: key)
            }
        } catch { throw SyncCryptoError.from(error, otherwise: .unavailable("sealing failed")) }
    }

    /// Unwraps straight into guarded memory; any mismatch is `doesNotAuthenticate`.
    public static func unwrapRoot(_ box: [UInt8], group: SyncGroupID, vaultID: [UInt8], under key: SecureBytes)
        throws -> SecureBytes
    {
        guard key.count == AEAD.keyBytes else { throw SyncCryptoError.malformed("a wrapping key is 32 bytes") }
        guard box.count == AEAD.overhead + rootBytes else {
            throw SyncCryptoError.malformed("a wrapped root key is \(AEAD.overhead + rootBytes) bytes")
        }
        do {
            return try AEAD.openKey(box, associatedData: rootAssociatedData(group: group, vaultID: vaultID), key: key)
        } catch { throw SyncCryptoError.from(error) }
    }

    static func rootAssociatedData(group: SyncGroupID, vaultID: [UInt8]) -> [UInt8] {
        Framing.frame([Framing.text("kcfs/sync-root/v1"), vaultID, group.bytes])
    }
}
