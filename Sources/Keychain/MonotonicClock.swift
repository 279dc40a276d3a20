import FoundationEssentials
import Glibc

/// CLOCK_MONOTONIC in nanoseconds: for the intervals the daemon keeps (a cached row's age, an
/// open handle's last access decision, the audit log's once-a-second checks), which must not
/// move with the wall clock.
public enum MonotonicClock {
    public static func nanoseconds() -> UInt64 { read(CLOCK_MONOTONIC) }

    /// The coarse clock (a few milliseconds' resolution, no system call at all): for ages
    /// compared against a second.
    public static func coarseNanoseconds() -> UInt64 { read(CLOCK_MONOTONIC_COARSE) }

    private static func read(_ clock: clockid_t) -> UInt64 {
        var ts = timespec()
        clock_gettime(clock, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }
}
