import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

/// The vault's key hierarchy (docs/security.md draws it):
///
///     passphrase ──Argon2id(salt, params)──► KEK ──wraps──► master key
///     master key ──crypto_kdf──► metadata key, index key, attribute-index key, manifest entry key,
///                                manifest tag key
///     master key ──wraps──► class key per accessibility class
///     master key + device key ──BLAKE2b──► wrap key of the …ThisDeviceOnly class keys
///     class key ──wraps──► per-item key ──seals──► the item's secret data
///
/// The master key exists only during unlock and passphrase change; what stays in memory
/// afterwards are the subkeys and the class keys, all in libsodium guarded memory.
struct VaultHeader {
    /// 1: the manifest was a count and an accumulator, unauthenticated. 2: the manifest is
    /// authenticated and carries a commit counter (Manifest.swift); format-1 vaults are
    /// migrated at their first unlock (`Keychain.migrate`). 3: the Secret Service attribute
    /// index (the `attr_index` table, store schema 2), its rows covered by the manifest's
    /// accumulator; format-1 and format-2 vaults get it at their first unlock. 4: the manifest's
    /// accumulator is split into buckets of item ids (the `manifest_bucket` table, store schema 3,
    /// ManifestBuckets.swift), so a mount checks each bucket at its first read; older vaults get
    /// the buckets at their first unlock, and format-3 code refuses the vault as newer. 5: a sealed
    /// name list per secondary-index value (the `name_chunk` and `name_bucket` tables, store
    /// schema 4, NameLists.swift), covered by the manifest, so a directory is listed without
    /// opening every item; older vaults get the lists at their first unlock, and format-4 code
    /// refuses the vault as newer. 6: the name lists' bucket entries have an accumulator of
    /// their own in the manifest (`Manifest.names`), beside the id buckets' top, so an unlock
    /// checks the id buckets without folding every list's bucket (a one-shot read of a
    /// 100,000-item vault), and a listing checks the lists' table when it needs it; format-5
    /// vaults are split at their first unlock (nothing but the manifest changes), and format-5
    /// code refuses the vault as newer. 7: a change log (the `change_log` table, store schema 5,
    /// ChangeLog.swift), one sealed row per committed item change, written in the change's
    /// transaction; format-6 vaults get the empty table at their first unlock (nothing else
    /// changes but the manifest's tag), and format-6 code refuses the vault as newer. 8: the
    /// sync tables (store schema 6, StoreStatements+Sync.swift; Sync/), empty until the vault
    /// joins a sync group; format-7 vaults get them at their first unlock, as format 7 did.
    static let formatVersion: Int64 = 8
    /// The first format whose manifest is authenticated (formats 2 to 5 share its layout; format 6
    /// adds the name lists' accumulator).
    static let authenticatedManifestFormat: Int64 = 2
    /// The first format with the attribute index.
    static let attributeIndexFormat: Int64 = 3
    /// The first format whose manifest accumulator is folded from buckets.
    static let bucketedManifestFormat: Int64 = 4
    /// The first format with the name lists.
    static let nameListFormat: Int64 = 5
    /// The first format whose manifest holds the name lists' accumulator apart from the top.
    static let nameAccumulatorFormat: Int64 = 6
    /// The first format with the change log.
    static let changeLogFormat: Int64 = 7
    /// The first format with the sync tables.
    static let syncFormat: Int64 = 8

    var format: Int64
    var vaultID: [UInt8]
    var parameters: PasswordHashParameters
    var salt: [UInt8]
    var wrappedMaster: [UInt8]
    /// A keyed hash identifying the device key the ThisDeviceOnly class keys were bound to,
    /// so that "copied to another machine" is told apart from tampering.
    var deviceKeyID: [UInt8]

    /// Binds the wrapped master key to the vault and to the KDF parameters: editing the
    /// parameters in the header makes the unwrap fail instead of weakening the KDF.
    var masterAssociatedData: [UInt8] {
        Framing.frame([
            Framing.text("kcfs/master/v1"), vaultID, Framing.int(format),
            Framing.int(Int64(bitPattern: parameters.opsLimit)),
            Framing.int(Int64(bitPattern: parameters.memLimit)), salt,
        ])
    }

    /// Every header field, framed, in a fixed order: what the manifest's tag covers, so that
    /// no field (device_key_id included) can be edited without the unlock noticing.
    var authenticatedFields: [[UInt8]] {
        [
            Framing.text("kcfs/header/v2"), Framing.int(format), vaultID,
            Framing.int(Int64(bitPattern: parameters.opsLimit)), Framing.int(Int64(bitPattern: parameters.memLimit)),
            salt, wrappedMaster, deviceKeyID,
        ]
    }

    /// The meta rows the header is made of.
    static let fieldNames = ["format", "vault_id", "kdf_ops", "kdf_mem", "kdf_salt", "master_key", "device_key_id"]

    /// Every field read by one statement: a commit checks the manifest against the header as
    /// stored, so this runs in every write transaction (seven statements were ~1.5 % of a
    /// durable close's CPU).
    static func read(from store: any ItemStoreReader) throws -> VaultHeader {
        let fields = try store.meta(fieldNames)
        func field(_ name: String) throws -> [UInt8] {
            guard let v = fields[name] else {
                throw KeychainError(.decode, "vault header is incomplete: '\(name)' is missing")
            }
            return v
        }
        func int(_ name: String) throws -> Int64 {
            let b = try field(name)
            guard b.count == 8 else { throw KeychainError(.decode, "vault header field '\(name)' is malformed") }
            return b.reversed().reduce(Int64(0)) { ($0 << 8) | Int64($1) }
        }
        let format = try int("format")
        guard format <= formatVersion else {
            throw KeychainError(
                .unimplemented,
                "vault format \(format) is newer than this keychainfs supports (\(formatVersion)); upgrade keychainfs")
        }
        return VaultHeader(
            format: format, vaultID: try field("vault_id"),
            parameters: PasswordHashParameters(
                opsLimit: UInt64(bitPattern: try int("kdf_ops")),
                memLimit: UInt64(bitPattern: try int("kdf_mem"))),
            salt: try field("kdf_salt"), wrappedMaster: try field("master_key"),
            deviceKeyID: try field("device_key_id"))
    }

    /// Writes every header field, inside the caller's write transaction.
    func write(to store: any ItemStoreWriter) throws {
        try store.setMeta("format", Framing.int(format))
        try store.setMeta("vault_id", vaultID)
        try store.setMeta("kdf_ops", Framing.int(Int64(bitPattern: parameters.opsLimit)))
        try store.setMeta("kdf_mem", Framing.int(Int64(bitPattern: parameters.memLimit)))
        try store.setMeta("kdf_salt", salt)
        try store.setMeta("master_key", wrappedMaster)
        try store.setMeta("device_key_id", deviceKeyID)
    }

    /// Derives the key-encryption key and unwraps the master key.
    func unwrapMaster(passphrase: SecureBytes) throws -> SecureBytes {
        try openMaster(kek: try keyEncryptionKey(passphrase: passphrase))
    }

    /// Argon2id of the passphrase with the header's salt and parameters. Parameters outside
    /// the accepted range (INTERACTIVE to SENSITIVE) are refused before any work is done.
    func keyEncryptionKey(passphrase: SecureBytes) throws -> SecureBytes {
        guard parameters.isAtLeastInteractive else {
            throw KeychainError(
                .decode,
                "vault header asks for Argon2id parameters below INTERACTIVE (opslimit \(parameters.opsLimit), memlimit \(parameters.memLimit)): refused as a downgrade"
            )
        }
        guard parameters.isAtMostSensitive else {
            throw KeychainError(
                .decode,
                "vault header asks for Argon2id parameters above SENSITIVE, the most init can choose (opslimit \(parameters.opsLimit), memlimit \(parameters.memLimit)): refused"
            )
        }
        do {
            return try KeyDerivation.passwordKey(passphrase: passphrase, salt: salt, parameters: parameters)
        } catch {
            throw KeychainError(.allocate, "Argon2id key derivation failed (memlimit \(parameters.memLimit) bytes)")
        }
    }

    /// Unwraps the master key with the key-encryption key.
    func openMaster(kek: SecureBytes) throws -> SecureBytes {
        do {
            return try AEAD.openKey(wrappedMaster, associatedData: masterAssociatedData, key: kek)
        } catch {
            throw KeychainError(.authFailed, "wrong passphrase (or the vault header was altered)")
        }
    }

    static func wrapMaster(_ master: SecureBytes, header: inout VaultHeader, passphrase: SecureBytes) throws {
        header.salt = Sodium.randomBytes(PasswordHashParameters.saltBytes)
        let kek = try KeyDerivation.passwordKey(
            passphrase: passphrase, salt: header.salt, parameters: header.parameters)
        header.wrappedMaster = try master.withUnsafeBytes {
            try AEAD.seal($0, associatedData: header.masterAssociatedData, key: kek)
        }
    }
}

/// The machine-local secret that ThisDeviceOnly class keys are bound to. It lives outside
/// the vault (0600, under $XDG_STATE_HOME/keychainfs/), so a vault file copied to another
/// machine cannot open those items there.
enum DeviceKey {
    static func loadOrCreate(at path: String) throws -> SecureBytes {
        if let key = try load(at: path) { return key }
        let dir = KeychainPaths.parent(of: path)
        try FileManager.default.createDirectory(
            atPath: dir, withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700])
        var bytes = Sodium.randomBytes(32)
        defer { Sodium.wipe(&bytes) }
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        if fd < 0 {
            // Another process made it first: use theirs.
            if errno == EEXIST, let key = try load(at: path) { return key }
            throw KeychainError(.io, "cannot create device key \(path): \(String(cString: strerror(errno)))")
        }
        let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, 32) }
        fsync(fd)
        close(fd)
        guard written == 32 else { throw KeychainError(.io, "cannot write device key \(path)") }
        return try SecureBytes(copying: bytes)
    }

    static func load(at path: String) throws -> SecureBytes? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return nil }
            throw KeychainError(.io, "cannot read device key \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        return try SecureBytes(count: 32) { buf in
            guard read(fd, buf.baseAddress, 32) == 32 else {
                throw KeychainError(.decode, "device key \(path) is not 32 bytes")
            }
        }
    }

    static func identifier(of key: SecureBytes) -> [UInt8] {
        KeyedHash.hash(Framing.text("kcfs/device-key-id/v1"), key: key, outputBytes: 16)
    }
}

/// Subkey ids under the crypto_kdf context "kcfsvlt1".
enum Subkey: UInt64 {
    case metadata = 1
    case index = 2
    case manifest = 3
    case policySigning = 4
    /// The manifest's tag (format 2), used for nothing else.
    case manifestTag = 5
    /// The attribute index's tags (format 3), used for nothing else.
    case attributeIndex = 6
    static let context = "kcfsvlt1"
}

func classKeyAssociatedData(vaultID: [UInt8], _ protection: Accessibility) -> [UInt8] {
    Framing.frame([Framing.text("kcfs/class-key/v1"), vaultID, Framing.text(protection.rawValue)])
}

/// The wrap key for one class key: the master key, or for ThisDeviceOnly classes the
/// master key combined with the device key.
func classWrapKey(master: SecureBytes, device: SecureBytes?, _ protection: Accessibility) throws -> SecureBytes? {
    guard protection.isThisDeviceOnly else { return master }
    guard let device else { return nil }
    return try KeyDerivation.combine(master, label: "kcfs/device-bound/v1", with: device)
}
