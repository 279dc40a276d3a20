import Foundation
import KeychainCrypto
import Testing

// The open files' guarded copies (GuardedBytes): every size class holds its bytes exactly,
// slices are what read(2) must return, and a region given back and taken again by a later
// value holds only that value (it was wiped and refilled, never mixed).
@Suite("guarded bytes")
struct GuardedBytesTests {
    static func pattern(_ count: Int, seed: UInt8) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) }
    }

    @Test("sizes across the classes hold their bytes exactly; slices at every edge")
    func sizes() throws {
        for count in [0, 1, 255, 256, 257, 4095, 4096, 4097, 65_536, 1 << 20] {
            let bytes = Self.pattern(count, seed: 7)
            let guarded = try GuardedBytes(copying: bytes)
            #expect(guarded.count == count)
            #expect(guarded.withUnsafeBytes { Array($0) } == bytes, "\(count) bytes")
            #expect(guarded.withSlice(offset: 0, size: count + 10) { Array($0) } == bytes)
            #expect(guarded.withSlice(offset: count, size: 10) { Array($0) }.isEmpty)
            #expect(guarded.withSlice(offset: count + 5, size: 10) { Array($0) }.isEmpty)
            if count > 3 {
                #expect(guarded.withSlice(offset: 1, size: 2) { Array($0) } == Array(bytes[1..<3]))
                #expect(guarded.withSlice(offset: count - 2, size: 100) { Array($0) } == Array(bytes[(count - 2)...]))
            }
        }
    }

    @Test("regions are reused: a shorter value after a longer one in the same class shows only itself")
    func reuse() throws {
        // 400 and then 300 bytes both come from the 512-byte class; eight at a time, dropped
        // each round, so later values get regions earlier ones held.
        for round in 0..<50 {
            let long = try (0..<8).map { try GuardedBytes(copying: Self.pattern(400, seed: UInt8($0 + round))) }
            #expect(
                long.enumerated().allSatisfy {
                    $1.withSlice(offset: 0, size: 512) { Array($0) } == Self.pattern(400, seed: UInt8($0 + round))
                })
        }
        let short = try (0..<8).map { try GuardedBytes(copying: Self.pattern(300, seed: UInt8($0 + 100))) }
        for (i, value) in short.enumerated() {
            #expect(value.count == 300)
            #expect(value.withSlice(offset: 0, size: 512) { Array($0) } == Self.pattern(300, seed: UInt8(i + 100)))
            #expect(value.withSlice(offset: 300, size: 100) { Array($0) }.isEmpty, "the old value's tail shows")
        }
    }
}
