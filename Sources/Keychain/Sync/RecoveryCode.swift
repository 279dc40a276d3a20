import CSodium
import KeychainCrypto

/// The sync group's root written out for paper: whoever has it can join the group and read
/// every synced item, with no other device and no server help. It IS the root key: store it as
/// a passphrase is stored (offline, not in the vault it recovers).
///
///     bytes = version (1) ‖ group id (16) ‖ root (32) ‖ checksum (4: BLAKE2b-32 of the 49 before)
///     text  = base32 of the 53 bytes (85 characters), in groups of 4 with dashes
///
/// Safety argument. The code carries no more than the root and the public group id, so it adds
/// no way in that the root does not already give. The checksum is not a secret and not a MAC
/// (anyone can recompute it): it turns a typo into `checksumMismatch` instead of a wrong root,
/// which would make a new group silently apart from the old one. A single mistyped character
/// changes 5 bits, caught unless BLAKE2b-32 happens to match (2^-32); base32 refuses unused
/// trailing bits, so even the last character has one spelling. The version byte is checked
/// after the checksum, so a typo there reads as a typo, not as "newer format".
public enum RecoveryCode {
    public static let version: UInt8 = 1
    static let byteCount = 1 + SyncGroupID.byteCount + SyncKeys.rootBytes + 4

    public static func text(group: SyncGroupID, root: SecureBytes) -> String {
        precondition(root.count == SyncKeys.rootBytes, "a sync root key is 32 bytes")
        // One allocation, wiped: appending never moves the root to a buffer left unwiped.
        var raw: [UInt8] = []
        raw.reserveCapacity(byteCount)
        defer { Sodium.wipe(&raw) }
        raw.append(version)
        raw += group.bytes
        root.withUnsafeBytes { raw += $0 }
        let sum = raw.withUnsafeBytes { checksum($0) }
        raw += sum
        return Base32.grouped(Base32.encode(raw))
    }

    /// Case, whitespace (a trailing newline included) and dashes do not matter.
    public static func parse(_ text: String) throws -> (SyncGroupID, SecureBytes) {
        var raw = try Base32.decodeTyped(text)
        defer { Sodium.wipe(&raw) }
        guard raw.count == byteCount else {
            throw SyncCryptoError.malformed("a recovery code is 85 characters (without dashes)")
        }
        let sum = raw.withUnsafeBytes { checksum(UnsafeRawBufferPointer(rebasing: $0[..<(byteCount - 4)])) }
        guard Sodium.constantTimeEqual(sum, Array(raw.suffix(4))) else {
            throw SyncCryptoError.checksumMismatch
        }
        guard raw[0] == version else { throw SyncCryptoError.unsupportedFormat(raw[0]) }
        let group = SyncGroupID(bytes: Array(raw[1...SyncGroupID.byteCount]))!
        do {
            let root = try SecureBytes(count: SyncKeys.rootBytes) { buf in
                raw.withUnsafeBytes {
                    buf.copyMemory(
                        from: UnsafeRawBufferPointer(rebasing: $0[(1 + SyncGroupID.byteCount)..<(byteCount - 4)]))
                }
            }
            return (group, root)
        } catch { throw SyncCryptoError.from(error, otherwise: .unavailable("no guarded memory")) }
    }

    /// BLAKE2b with a 4-byte output (the digest length is a BLAKE2b parameter, so this is not a
    /// truncated BLAKE2b-256; Python's `blake2b(data, digest_size=4)` gives the same).
    static func checksum(_ bytes: UnsafeRawBufferPointer) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 4)
        _ = crypto_generichash(
            &out, 4, bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(bytes.count), nil, 0)
        return out
    }
}
