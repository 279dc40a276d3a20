import CSodium

/// XChaCha20-Poly1305-IETF with a fresh random 24-byte nonce per box.
/// A box is `nonce || ciphertext || tag`. The 192-bit nonce makes random nonces safe for
/// any number of boxes under one key; the associated data binds a box to its context
/// (vault, item, field, ...), so a box moved anywhere else fails to open.
public enum AEAD {
    public static let keyBytes = Int(crypto_aead_xchacha20poly1305_ietf_KEYBYTES)
    public static let nonceBytes = Int(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES)
    public static let tagBytes = Int(crypto_aead_xchacha20poly1305_ietf_ABYTES)
    public static var overhead: Int { nonceBytes + tagBytes }

    public static func seal(_ plaintext: UnsafeRawBufferPointer, associatedData: [UInt8], key: SecureBytes) throws -> [UInt8] {
        precondition(key.count == keyBytes)
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
                    ad.baseAddress, UInt64(ad.count), nil, nonce, key.base)
            }
        }
        return box
    }

    public static func seal(_ plaintext: [UInt8], associatedData: [UInt8], key: SecureBytes) throws -> [UInt8] {
        try plaintext.withUnsafeBytes { try seal($0, associatedData: associatedData, key: key) }
    }

    /// Opens a box into an ordinary array (for data the caller will hand out anyway).
    public static func open(_ box: [UInt8], associatedData: [UInt8], key: SecureBytes) throws -> [UInt8] {
        guard box.count >= overhead else { throw CryptoError.malformed }
        // One spare byte so an empty plaintext still has a buffer address to write to.
        var out = [UInt8](repeating: 0, count: box.count - overhead + 1)
        try out.withUnsafeMutableBufferPointer {
            try open(box, associatedData: associatedData, key: key, into: $0.baseAddress!)
        }
        out.removeLast()
        return out
    }

    /// Opens a box that holds a key straight into guarded memory.
    public static func openKey(_ box: [UInt8], associatedData: [UInt8], key: SecureBytes) throws -> SecureBytes {
        guard box.count == overhead + keyBytes else { throw CryptoError.malformed }
        return try SecureBytes(count: keyBytes) { buf in
            try open(box, associatedData: associatedData, key: key,
                     into: buf.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
    }

    private static func open(_ box: [UInt8], associatedData: [UInt8], key: SecureBytes, into out: UnsafeMutablePointer<UInt8>) throws {
        precondition(key.count == keyBytes)
        try Sodium.ensureInitialised()
        var mlen: UInt64 = 0
        let rc = box.withUnsafeBufferPointer { b in
            associatedData.withUnsafeBufferPointer { ad in
                crypto_aead_xchacha20poly1305_ietf_decrypt(
                    out, &mlen, nil,
                    b.baseAddress! + nonceBytes, UInt64(b.count - nonceBytes),
                    ad.baseAddress, UInt64(ad.count), b.baseAddress!, key.base)
            }
        }
        guard rc == 0 else { throw CryptoError.authenticationFailed }
    }
}
