import CSodium

/// Key material in libsodium guarded memory: page-aligned, mlock'ed (never swapped out),
/// surrounded by guard pages, and wiped by `sodium_free` when the last reference goes.
/// After it is filled the region is made read-only, so a stray write faults instead of
/// silently corrupting a key. The bytes are never copied into Swift arrays by this type.
public final class SecureBytes: @unchecked Sendable {
    // @unchecked: the pointer is written only inside `init` and read-only afterwards
    // (enforced by sodium_mprotect_readonly), so concurrent reads are safe.
    private let pointer: UnsafeMutableRawPointer
    public let count: Int

    /// Allocates `count` bytes and lets `fill` write them once.
    public init(count: Int, fill: (UnsafeMutableRawBufferPointer) throws -> Void) throws {
        try Sodium.ensureInitialised()
        // An empty value still gets one guarded byte to point at; `count` stays 0.
        guard count >= 0, let p = sodium_malloc(Swift.max(count, 1)) else {
            throw CryptoError.unavailable("sodium_malloc(\(count)) failed")
        }
        pointer = p
        self.count = count
        // If `fill` throws, the object is already fully initialised, so `deinit` runs and
        // frees (and wipes) the region: freeing it here too would be a double free.
        try fill(UnsafeMutableRawBufferPointer(start: p, count: count))
        sodium_mprotect_readonly(p)
    }

    /// A fresh random key of `count` bytes.
    public static func random(count: Int = 32) throws -> SecureBytes {
        try SecureBytes(count: count) { randombytes_buf($0.baseAddress!, $0.count) }
    }

    /// Copies `bytes` in; the caller should wipe its own copy.
    public convenience init(copying bytes: [UInt8]) throws {
        try self.init(count: bytes.count) { buf in
            bytes.withUnsafeBytes { if $0.count > 0 { buf.copyMemory(from: $0) } }
        }
    }

    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: pointer, count: count))
    }

    var base: UnsafePointer<UInt8> { UnsafePointer(pointer.assumingMemoryBound(to: UInt8.self)) }

    deinit {
        sodium_free(pointer)  // wipes, then releases the guarded pages
    }
}
