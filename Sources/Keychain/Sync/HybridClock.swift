/// A hybrid logical clock's timestamp (Kulkarni, Demirbas et al., "Logical Physical Clocks",
/// 2014): the wall time in milliseconds the stamping device believed (or had learnt from
/// others), a counter for events within one such millisecond, and the device's 16-byte id to
/// break the remaining ties. Ordered by (wall, counter, device bytes): a total order, so two
/// versions of a record are never "equal but different".
public struct HybridTime: Comparable, Hashable, Sendable, CustomStringConvertible {
    public static let deviceBytes = 16
    public static let encodedBytes = 8 + 4 + deviceBytes

    /// Milliseconds since the Unix epoch.
    public let wall: UInt64
    public let counter: UInt32
    /// The stamping device's id (16 bytes).
    public let device: [UInt8]

    public init(wall: UInt64, counter: UInt32, device: [UInt8]) {
        precondition(device.count == Self.deviceBytes, "a device id is 16 bytes")
        self.wall = wall
        self.counter = counter
        self.device = device
    }

    public static func < (a: HybridTime, b: HybridTime) -> Bool {
        if a.wall != b.wall { return a.wall < b.wall }
        if a.counter != b.counter { return a.counter < b.counter }
        return a.device.lexicographicallyPrecedes(b.device)
    }

    /// 28 bytes, big-endian: wall (8) ‖ counter (4) ‖ device (16), so that comparing encodings
    /// byte by byte (memcmp, a PostgreSQL `bytea` ORDER BY) orders them as the clock does.
    public var encoded: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(Self.encodedBytes)
        withUnsafeBytes(of: wall.bigEndian) { out += $0 }
        withUnsafeBytes(of: counter.bigEndian) { out += $0 }
        out += device
        return out
    }

    public init?<Bytes: Collection>(encoded: Bytes) where Bytes.Element == UInt8 {
        guard encoded.count == Self.encodedBytes else { return nil }
        let b = Array(encoded)
        wall = b[0..<8].reduce(0) { ($0 << 8) | UInt64($1) }
        counter = b[8..<12].reduce(0) { ($0 << 8) | UInt32($1) }
        device = Array(b[12...])
    }

    public var description: String { "\(wall).\(counter)@\(AttributeText.hex(device))" }
}

/// One device's hybrid logical clock. The engine keeps `last` with the vault's sync state and
/// passes the physical time in, so the clock is a pure value and every rule is testable.
///
/// Safety argument (what a skewed clock can and cannot do):
/// - **Monotonic**: every stamp is greater than the last one, even when the physical clock
///   steps back (NTP, a suspend, a wrong manual setting): the wall part never goes back, the
///   counter carries the order while the physical clock is behind.
/// - **Causal**: after `observe(t)` every later local stamp is greater than `t`, whatever the
///   physical clock says, because the observed (wall, counter) is carried into the state with
///   the counter one past it. So an edit made after seeing another device's version wins over
///   it even from a device whose clock is an hour behind: "last writer wins" means last in the
///   order of what each writer had seen, not whose clock is fastest.
/// - **What skew can still do**: decide between *concurrent* edits (neither saw the other),
///   where the device whose clock is ahead wins, as it would under any timestamp order. A
///   device (or member) whose clock is far ahead pulls every clock that observes it forward to
///   its time; the order stays causal, but the wall part stops meaning "now" until real time
///   catches up, and until then its concurrent edits win. Such a time is never refused
///   (refusing it would stall sync for every device that has already observed it): the engine
///   can see it with `isFarAhead` (more than `maxAhead`, 24 h, past its own physical clock) and
///   say so. The clock is bound into each record's associated data, so only a holder of the
///   group's keys, never the server, can put a time into a record.
/// - **No overflow**: a counter that would pass UInt32.max advances the wall by 1 ms instead;
///   a wall at UInt64.max (only a hostile member could put it there) saturates: stamps stop
///   increasing rather than wrapping to the past.
public struct HybridClock: Sendable {
    /// 24 hours in milliseconds: a remote time this far past the physical clock is suspect.
    public static let maxAhead: UInt64 = 24 * 60 * 60 * 1000

    public let device: [UInt8]
    public private(set) var last: HybridTime?

    public init(device: [UInt8], last: HybridTime?) {
        precondition(device.count == HybridTime.deviceBytes, "a device id is 16 bytes")
        self.device = device
        self.last = last
    }

    /// A stamp for a local event (an edit to be sealed): greater than every stamp this clock
    /// gave or observed before.
    public mutating func now(physicalMillis: UInt64) -> HybridTime {
        let next: (UInt64, UInt32)
        if let last {
            next = physicalMillis > last.wall ? (physicalMillis, 0) : Self.bump(last.wall, last.counter)
        } else {
            next = (physicalMillis, 0)
        }
        let stamp = HybridTime(wall: next.0, counter: next.1, device: device)
        last = stamp
        return stamp
    }

    /// Receiving a remote stamp (a version downloaded and opened): the state moves past it,
    /// so later local stamps order after it. Never refused (see `isFarAhead`).
    public mutating func observe(_ remote: HybridTime, physicalMillis: UInt64) {
        let wall = Swift.max(last?.wall ?? 0, remote.wall, physicalMillis)
        let fromLast = last.map { $0.wall == wall } ?? false
        let fromRemote = remote.wall == wall
        let next: (UInt64, UInt32)
        switch (fromLast, fromRemote) {
        case (true, true): next = Self.bump(wall, Swift.max(last!.counter, remote.counter))
        case (true, false): next = Self.bump(wall, last!.counter)
        case (false, true): next = Self.bump(wall, remote.counter)
        case (false, false): next = (wall, 0)
        }
        last = HybridTime(wall: next.0, counter: next.1, device: device)
    }

    /// Whether a remote time is more than `maxAhead` past this device's physical clock: the
    /// engine observes it anyway and reports the skew (and which device stamped it).
    public static func isFarAhead(_ remote: HybridTime, physicalMillis: UInt64) -> Bool {
        let (limit, overflow) = physicalMillis.addingReportingOverflow(maxAhead)
        return !overflow && remote.wall > limit
    }

    /// The next (wall, counter) after one: the counter, or at its end the wall by 1 ms;
    /// saturated at the very end rather than wrapping.
    static func bump(_ wall: UInt64, _ counter: UInt32) -> (UInt64, UInt32) {
        if counter < UInt32.max { return (wall, counter + 1) }
        if wall < UInt64.max { return (wall + 1, 0) }
        return (wall, counter)
    }
}
