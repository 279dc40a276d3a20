import Testing

@testable import Keychain

// Issue 31's hybrid logical clock: monotonic whatever the physical clock does, causal after an
// observe, and an encoding whose byte order is the clock's order.

private func device(_ n: UInt8) -> [UInt8] { [UInt8](repeating: n, count: 16) }

@Suite("sync clock")
struct SyncClockTests {
    @Test("order: wall, then counter, then device bytes")
    func order() {
        let a = HybridTime(wall: 10, counter: 5, device: device(9))
        #expect(a < HybridTime(wall: 11, counter: 0, device: device(0)))
        #expect(a < HybridTime(wall: 10, counter: 6, device: device(0)))
        #expect(a < HybridTime(wall: 10, counter: 5, device: device(9).dropLast() + [10]))
        #expect(!(a < a) && a == HybridTime(wall: 10, counter: 5, device: device(9)))
    }

    @Test("encoding: 28 bytes big-endian, round trip, byte order = clock order (5,000 random pairs)")
    func encoding() {
        let t = HybridTime(wall: 0x0102_0304_0506_0708, counter: 0x090A_0B0C, device: Array(16..<32))
        #expect(t.encoded == Array(1...12) + Array(16..<32))
        var rng = SyncRNG(seed: 2026)
        func random() -> HybridTime {
            // Small ranges too, so equal walls and counters (the device tie-break) are common.
            let wall = Bool.random(using: &rng) ? UInt64.random(in: 0...3, using: &rng) : rng.next()
            let counter =
                Bool.random(using: &rng)
                ? UInt32.random(in: 0...3, using: &rng) : UInt32.random(in: 0...UInt32.max, using: &rng)
            let dev = Bool.random(using: &rng) ? device(UInt8.random(in: 0...1, using: &rng)) : rng.bytes(16)
            return HybridTime(wall: wall, counter: counter, device: dev)
        }
        for _ in 0..<5000 {
            let a = random()
            let b = random()
            #expect(HybridTime(encoded: a.encoded) == a)
            #expect(a.encoded.count == 28)
            #expect((a < b) == a.encoded.lexicographicallyPrecedes(b.encoded), "\(a) \(b)")
            #expect((a == b) == (a.encoded == b.encoded))
        }
        #expect(HybridTime(encoded: [UInt8](repeating: 0, count: 27)) == nil)
        #expect(HybridTime(encoded: [UInt8](repeating: 0, count: 29)) == nil)
    }

    @Test("local stamps: physical time when it moves on, the counter when it stands or steps back")
    func localRules() {
        var clock = HybridClock(device: device(1), last: nil)
        #expect(clock.now(physicalMillis: 1000) == HybridTime(wall: 1000, counter: 0, device: device(1)))
        #expect(clock.now(physicalMillis: 1000) == HybridTime(wall: 1000, counter: 1, device: device(1)))
        #expect(clock.now(physicalMillis: 400) == HybridTime(wall: 1000, counter: 2, device: device(1)))
        #expect(clock.now(physicalMillis: 1001) == HybridTime(wall: 1001, counter: 0, device: device(1)))
        // Resumed from a stored state.
        var resumed = HybridClock(device: device(1), last: clock.last)
        #expect(resumed.now(physicalMillis: 5) == HybridTime(wall: 1001, counter: 1, device: device(1)))
    }

    @Test("a device an hour behind still stamps its later edit after the one it observed")
    func skewedButCausal() {
        let hour: UInt64 = 3_600_000
        let now: UInt64 = 1_790_000_000_000
        var ahead = HybridClock(device: device(0xFF), last: nil)
        var behind = HybridClock(device: device(0x00), last: nil)
        let first = ahead.now(physicalMillis: now)
        behind.observe(first, physicalMillis: now - hour)
        let second = behind.now(physicalMillis: now - hour + 10)
        #expect(second > first)
        #expect(second.wall == first.wall && second.counter > first.counter)
        // And back: the fast device orders its reply after the slow one's edit.
        ahead.observe(second, physicalMillis: now + 1)
        #expect(ahead.now(physicalMillis: now + 1) > second)
    }

    @Test("counter overflow advances the wall by 1 ms; the very end saturates instead of wrapping")
    func overflow() {
        var clock = HybridClock(device: device(1), last: HybridTime(wall: 50, counter: .max - 1, device: device(1)))
        #expect(clock.now(physicalMillis: 0) == HybridTime(wall: 50, counter: .max, device: device(1)))
        #expect(clock.now(physicalMillis: 0) == HybridTime(wall: 51, counter: 0, device: device(1)))
        clock.observe(HybridTime(wall: 60, counter: .max, device: device(2)), physicalMillis: 0)
        #expect(clock.last == HybridTime(wall: 61, counter: 0, device: device(1)))
        var end = HybridClock(device: device(1), last: nil)
        end.observe(HybridTime(wall: .max, counter: .max, device: device(2)), physicalMillis: 0)
        let stuck = end.now(physicalMillis: 0)
        #expect(stuck.wall == .max && stuck.counter == .max)
        #expect(end.now(physicalMillis: .max) >= stuck)
    }

    @Test("a remote time more than 24 h ahead is flagged, and observed all the same")
    func farAhead() {
        let now: UInt64 = 1_790_000_000_000
        let near = HybridTime(wall: now + HybridClock.maxAhead, counter: 0, device: device(2))
        let far = HybridTime(wall: now + HybridClock.maxAhead + 1, counter: 0, device: device(2))
        #expect(!HybridClock.isFarAhead(near, physicalMillis: now))
        #expect(HybridClock.isFarAhead(far, physicalMillis: now))
        #expect(!HybridClock.isFarAhead(HybridTime(wall: .max, counter: 0, device: device(2)), physicalMillis: .max))
        var clock = HybridClock(device: device(1), last: nil)
        clock.observe(far, physicalMillis: now)
        #expect(clock.now(physicalMillis: now) > far)
    }

    @Test("property: monotonic, and later than everything observed, over random steps (200 runs × 500 steps)")
    func property() {
        let hour: UInt64 = 3_600_000
        for seed in 0..<200 as Range<UInt64> {
            var rng = SyncRNG(seed: seed)
            var physical: UInt64 = 1_790_000_000_000
            var clock = HybridClock(device: device(UInt8(seed % 3)), last: nil)
            var previous: HybridTime? = nil
            var maxObserved: HybridTime? = nil
            for _ in 0..<500 {
                switch UInt8.random(in: 0..<10, using: &rng) {
                case 0: physical -= UInt64.random(in: 0...hour, using: &rng)  // steps back
                case 1...3: physical += UInt64.random(in: 0...20, using: &rng)
                case 4...6:
                    // A remote time within an hour either side, sometimes from the same millisecond.
                    let wall = physical - hour + UInt64.random(in: 0...(2 * hour), using: &rng)
                    let remote = HybridTime(
                        wall: Bool.random(using: &rng) ? wall : clock.last?.wall ?? wall,
                        counter: UInt32.random(in: 0...5, using: &rng),
                        device: device(UInt8.random(in: 0...3, using: &rng)))
                    clock.observe(remote, physicalMillis: physical)
                    maxObserved = max(maxObserved ?? remote, remote)
                    if let previous { #expect(clock.last! > previous, "seed \(seed)") }
                    previous = clock.last
                default:
                    let stamp = clock.now(physicalMillis: physical)
                    if let previous { #expect(stamp > previous, "seed \(seed)") }
                    if let maxObserved {
                        #expect(stamp > maxObserved, "seed \(seed)")
                        #expect((stamp.wall, stamp.counter) > (maxObserved.wall, maxObserved.counter), "seed \(seed)")
                    }
                    #expect(stamp.wall >= physical, "seed \(seed)")
                    previous = stamp
                }
            }
        }
    }
}
