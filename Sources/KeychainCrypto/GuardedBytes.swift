import CSodium
import Synchronization

/// A secret held for a while (an open file's decrypted content) in libsodium guarded memory:
/// mlock'ed, between guard pages, excluded from core dumps, wiped when let go. (Not made
/// read-only as `SecureBytes` is: two mprotect calls per open file cost more than the rest of
/// its holding; nothing writes to it after `init`.)
///
/// A fresh `sodium_malloc` costs tens of microseconds (an mmap, two mprotects, an mlock: the
/// bench's "32-byte key in guarded memory" row), more than a whole open of an item, so regions
/// are pooled by size class (powers of two from 256 bytes) and reused: a region given back is
/// wiped (`sodium_memzero`) before it goes back to the pool, and the pool keeps a bounded number
/// per class (the rest are `sodium_free`d). Only a pool that has to grow pays the allocation.
public final class GuardedBytes: @unchecked Sendable {
    // @unchecked: the region is written only inside `init` and only read afterwards, so
    // concurrent reads are safe; `deinit` gives it back.
    private let region: UnsafeMutableRawPointer
    private let capacity: Int
    public let count: Int

    /// Copies `bytes` into a guarded region; the caller wipes its own copy.
    public init(copying bytes: [UInt8]) throws {
        let (region, capacity) = try GuardedPool.shared.take(atLeast: bytes.count)
        bytes.withUnsafeBytes { source in
            if let base = source.baseAddress, source.count > 0 {
                region.copyMemory(from: base, byteCount: source.count)
            }
        }
        self.region = region
        self.capacity = capacity
        self.count = bytes.count
    }

    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: region, count: count))
    }

    /// At most `size` bytes from `offset` (what a read(2) returns), handed to `body` where they
    /// are: a reply is written from guarded memory, with no copy to wipe afterwards.
    public func withSlice<R>(offset: Int, size: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        guard offset < count, size > 0 else { return try body(UnsafeRawBufferPointer(start: nil, count: 0)) }
        let end = min(count, offset + size)
        return try body(UnsafeRawBufferPointer(start: region + offset, count: end - offset))
    }

    deinit { GuardedPool.shared.giveBack(region, capacity: capacity) }
}

/// The pooled guarded regions of `GuardedBytes`, by size class.
final class GuardedPool: Sendable {
    static let shared = GuardedPool()
    static let smallestClass = 256
    /// Regions kept per class once given back: many small ones (one per open file), few large.
    static func keep(capacity: Int) -> Int { capacity <= 4096 ? 256 : capacity <= 65536 ? 16 : 2 }

    /// Free regions by capacity, as addresses (a region belongs to one owner between `take`
    /// and `giveBack`; an address is a plain value).
    private let free = Mutex<[Int: [UInt]]>([:])

    func take(atLeast count: Int) throws -> (UnsafeMutableRawPointer, Int) {
        try Sodium.ensureInitialised()
        var capacity = Self.smallestClass
        while capacity < count { capacity <<= 1 }
        // The class's list is moved out of the table and back, never changed in place through
        // the table's subscript: that way costs three allocations of its own (the accessor
        // frames), each take and each give-back.
        let reused = free.withLock { table -> UInt? in
            guard var regions = table.removeValue(forKey: capacity) else { return nil }
            let address = regions.popLast()
            if !regions.isEmpty { table.updateValue(regions, forKey: capacity) }
            return address
        }
        if let address = reused, let region = UnsafeMutableRawPointer(bitPattern: address) {
            return (region, capacity)
        }
        guard let region = sodium_malloc(capacity) else { throw CryptoError.unavailable("sodium_malloc failed") }
        return (region, capacity)
    }

    func giveBack(_ region: UnsafeMutableRawPointer, capacity: Int) {
        sodium_memzero(region, capacity)
        let kept = free.withLock { table -> Bool in
            var regions = table.removeValue(forKey: capacity) ?? []
            let room = regions.count < Self.keep(capacity: capacity)
            if room { regions.append(UInt(bitPattern: region)) }
            if !regions.isEmpty { table.updateValue(regions, forKey: capacity) }
            return room
        }
        if !kept { sodium_free(region) }
    }
}
