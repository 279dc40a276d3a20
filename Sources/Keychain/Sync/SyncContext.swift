import FoundationEssentials
import Glibc
import KeychainCrypto
import Synchronization

/// This process's hold on the vault's sync group (issue 31): the group's keys, unwrapped at
/// unlock from the root key the vault keeps wrapped under the master key (as the class keys
/// are), this device's id and its hybrid logical clock. Nil keys: the vault is in no group, or
/// has not been unlocked since it was opened. At lock only the record-id key stays
/// (`lockDown`), so a change made while the vault is locked (an attribute, a delete) is still
/// journaled for upload; the engine uploads and applies only while the vault is unlocked, and
/// the next unlock loads the whole keys again.
final class SyncContext: Sendable {
    struct State {
        var keys: SyncKeys?
        var device: [UInt8] = []
        var clock: HybridClock?
        /// Why the group's keys could not be loaded at the last unlock.
        var problem: String?
        /// Added to the wall clock (tests of a device whose clock is wrong).
        var skew: UInt64 = 0
    }
    private let state = Mutex(State())

    var keys: SyncKeys? { state.withLock { $0.keys } }

    /// At lock: only the record-id key stays (SyncKeys.journalOnly).
    func lockDown() { state.withLock { $0.keys = $0.keys?.journalOnly() } }
    var device: [UInt8] { state.withLock { $0.device } }
    var problem: String? { state.withLock { $0.problem } }
    func noteProblem(_ problem: String?) { state.withLock { $0.problem = problem } }

    func install(keys: SyncKeys?, device: [UInt8], clock: HybridTime?) {
        state.withLock {
            $0.keys = keys
            $0.device = device
            $0.clock = keys == nil ? nil : HybridClock(device: device, last: clock)
        }
    }

    /// The clock's next time for a local change (monotonic, after every time observed).
    func tick() -> HybridTime? {
        state.withLock { s in
            guard s.clock != nil else { return nil }
            return s.clock!.now(physicalMillis: Self.physicalMillis() + s.skew)
        }
    }

    /// Takes in a time another device stamped (a pulled record), so this device's next change
    /// is later than every change it has seen.
    func observe(_ remote: HybridTime) {
        state.withLock { s in
            guard s.clock != nil else { return }
            s.clock!.observe(remote, physicalMillis: Self.physicalMillis() + s.skew)
        }
    }

    /// Sets this process's clock ahead by `milliseconds` (tests: a device whose clock is wrong).
    func skewForTests(milliseconds: UInt64) { state.withLock { $0.skew = milliseconds } }

    var lastTime: HybridTime? { state.withLock { $0.clock?.last } }

    static func physicalMillis() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return UInt64(ts.tv_sec) * 1000 + UInt64(ts.tv_nsec) / 1_000_000
    }
}

/// The names of the `sync_state` rows.
enum SyncStateName {
    static let group = "group"
    static let root = "root"
    static let device = "device"
    static let server = "server"
    static let cursor = "cursor"
    static let clock = "clock"
    static let lastPush = "last_push"
    static let lastPull = "last_pull"
    /// The service's last sync failure (the server unreachable, refused credentials, a newer
    /// schema) and since when it has failed; removed when a round succeeds.
    static let problem = "problem"
    static let problemSince = "problem_since"
    static let joined = "joined"
}

/// The face name on changes the sync engine applies (`ItemChange.origin`): the journal skips
/// them (they came from the group), every other observer treats them as another face's.
public let syncOrigin = "sync"
