import CSodium
#if canImport(Glibc)
    import Glibc
#endif
import Synchronization

/// XChaCha20-Poly1305-IETF with a fresh random 24-byte nonce per box.
/// A box is `nonce || ciphertext || tag`. The 192-bit nonce makes random nonces safe for
/// any number of boxes under one key; the associated data binds a box to its context
/// (vault, item, field, ...), so a box moved anywhere else fails to open.
public enum AEAD {
    public static let keyBytes = Int(crypto_aead_xchacha20poly1305_ietf_KEYBYTES)
    public static let nonceBytes = Int(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES)
    public static let tagBytes = Int(crypto_aead_xchacha20poly1305_ietf_ABYTES)
    public static var overhead: Int { nonceBytes + tagBytes }

    public static func seal(_ plaintext: UnsafeRawBufferPointer, associatedData: [UInt8], key: SecureBytes) throws
        -> [UInt8]
    {
        precondition(key.count == keyBytes)
        return try seal(plaintext, associatedData: associatedData, keyPointer: key.base)
    }

    public static func seal(_ plaintext: [UInt8], associatedData: [UInt8], key: SecureBytes) throws -> [UInt8] {
        try plaintext.withUnsafeBytes { try seal($0, associatedData: associatedData, key: key) }
    }

    /// Seals under a key held in guarded scratch memory (see `KeyScratch`).
    public static func seal(_ plaintext: [UInt8], associatedData: [UInt8], key: KeyScratch.Key) throws -> [UInt8] {
        try plaintext.withUnsafeBytes { try seal($0, associatedData: associatedData, keyPointer: key.pointer) }
    }

    public static func seal(_ plaintext: UnsafeRawBufferPointer, associatedData: [UInt8], key: KeyScratch.Key) throws
        -> [UInt8]
    {
        try seal(plaintext, associatedData: associatedData, keyPointer: key.pointer)
    }

    private static func seal(
        _ plaintext: UnsafeRawBufferPointer, associatedData: [UInt8], keyPointer: UnsafePointer<UInt8>
    ) throws -> [UInt8] {
        try Sodium.ensureInitialised()
        var box = [UInt8](repeating: 0, count: nonceBytes + plaintext.count + tagBytes)
        box.withUnsafeMutableBufferPointer { out in
            let nonce = out.baseAddress!
            randombytes_buf(nonce, nonceBytes)
            var clen: UInt64 = 0
            _ = associatedData.withUnsafeBufferPointer { ad in
                crypto_aead_xchacha20poly1305_ietf_encrypt(
                    nonce + nonceBytes, &clen,
                    plaintext.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(plaintext.count),
                    ad.baseAddress, UInt64(ad.count), nil, nonce, keyPointer)
            }
        }
        return box
    }

    /// Opens a box into an ordinary array (for data the caller will hand out anyway).
    public static func open(_ box: [UInt8], associatedData: [UInt8], key: SecureBytes) throws -> [UInt8] {
        try open(box, associatedData: associatedData, keyPointer: key.base)
    }

    public static func open(_ box: [UInt8], associatedData: [UInt8], key: KeyScratch.Key) throws -> [UInt8] {
        try open(box, associatedData: associatedData, keyPointer: key.pointer)
    }

    private static func open(_ box: [UInt8], associatedData: [UInt8], keyPointer: UnsafePointer<UInt8>) throws
        -> [UInt8]
    {
        guard box.count >= overhead else { throw CryptoError.malformed }
        // One spare byte so an empty plaintext still has a buffer address to write to.
        var out = [UInt8](repeating: 0, count: box.count - overhead + 1)
        try out.withUnsafeMutableBufferPointer {
            try open(box, associatedData: associatedData, keyPointer: keyPointer, into: $0.baseAddress!)
        }
        out.removeLast()
        return out
    }

    /// Opens a box that holds a key straight into guarded memory.
    public static func openKey(_ box: [UInt8], associatedData: [UInt8], key: SecureBytes) throws -> SecureBytes {
        guard box.count == overhead + keyBytes else { throw CryptoError.malformed }
        return try SecureBytes(count: keyBytes) { buf in
            try open(
                box, associatedData: associatedData, keyPointer: key.base,
                into: buf.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
    }

    /// Opens a box that holds a key into guarded scratch memory.
    public static func openKey(_ box: [UInt8], associatedData: [UInt8], key: SecureBytes, into scratch: KeyScratch.Key)
        throws
    {
        guard box.count == overhead + keyBytes else { throw CryptoError.malformed }
        try open(box, associatedData: associatedData, keyPointer: key.base, into: scratch.pointer)
    }

    private static func open(
        _ box: [UInt8], associatedData: [UInt8], keyPointer: UnsafePointer<UInt8>, into out: UnsafeMutablePointer<UInt8>
    ) throws {
        try Sodium.ensureInitialised()
        var mlen: UInt64 = 0
        let rc = box.withUnsafeBufferPointer { b in
            associatedData.withUnsafeBufferPointer { ad in
                crypto_aead_xchacha20poly1305_ietf_decrypt(
                    out, &mlen, nil,
                    b.baseAddress! + nonceBytes, UInt64(b.count - nonceBytes),
                    ad.baseAddress, UInt64(ad.count), b.baseAddress!, keyPointer)
            }
        }
        guard rc == 0 else { throw CryptoError.authenticationFailed }
    }
}

/// Guarded memory for keys that live for one operation (a per-item key while its data is
/// sealed or opened). A fresh `SecureBytes` costs ~30 µs (mmap, mlock, guard pages, mprotect,
/// then the reverse): 40 % of a lookup. These 32-byte slots are allocated once with
/// `sodium_malloc` (locked, guard-paged), reused, and wiped with `sodium_memzero` after every use.
public final class KeyScratch: Sendable {
    public static let shared = KeyScratch()
    /// Free slots, as addresses (a slot belongs to one caller at a time between popping and
    /// pushing it back; an address is a plain value, so the list needs no unchecked Sendable).
    private let free = Mutex<[UInt]>([])

    /// A borrowed slot, valid only inside `withKey`.
    public struct Key {
        public let pointer: UnsafeMutablePointer<UInt8>
        public func fillRandom() { randombytes_buf(pointer, AEAD.keyBytes) }
        public func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
            try body(UnsafeRawBufferPointer(start: pointer, count: AEAD.keyBytes))
        }
    }

    public func withKey<R>(_ body: (Key) throws -> R) throws -> R {
        try Sodium.ensureInitialised()
        let pointer: UnsafeMutablePointer<UInt8>
        if let address = free.withLock({ $0.popLast() }), let reused = UnsafeMutablePointer<UInt8>(bitPattern: address)
        {
            pointer = reused
        } else {
            guard let raw = sodium_malloc(AEAD.keyBytes) else { throw CryptoError.unavailable("sodium_malloc failed") }
            pointer = raw.assumingMemoryBound(to: UInt8.self)
        }
        defer {
            sodium_memzero(pointer, AEAD.keyBytes)
            let address = UInt(bitPattern: pointer)
            free.withLock { $0.append(address) }
        }
        return try body(Key(pointer: pointer))
    }
}
