import Dispatch
import FoundationEssentials
import Glibc

#if canImport(Glibc)
    import Glibc
#endif

/// One thread of its own that runs closures one at a time, in the order they were given: what
/// the daemon used serial DispatchQueues and `asyncAfter` for. Why not those: on Linux the first
/// use of any global or serial DispatchQueue arms libdispatch's workqueue pool monitor, a 1 Hz
/// timer that wakes a thread of the process every second for as long as it lives, and an idle
/// daemon must not wake at all (issue 30: "no wake-ups over 60 s"). DispatchSemaphore,
/// DispatchGroup's wait and DispatchTime start no such thing and stay in use.
///
/// - `async` queues a closure; `after(seconds:)` queues it once the delay has passed (a due
///   delayed closure runs after those queued before its deadline); `sync` queues one and waits
///   until it has run, so everything queued before it has run too (a drain).
/// - The thread starts at the first closure queued (a worker never used costs nothing) and then
///   blocks on a condition variable: without a timeout when nothing is queued or delayed, and
///   until exactly the earliest deadline when something is delayed. Nothing polls.
/// - `stop()` lets the thread run what is queued and then end; delayed closures not yet due are
///   dropped, and closures queued after it are dropped too (`sync` then returns at once).
///
/// A closure must not wait for something that waits for this worker (it would wait for
/// itself), and `sync` must not be called from a closure it runs. Closures are released outside
/// the worker's lock, so one may capture an object whose deinit queues on the same worker. A
/// child of fork(2) has no copy of the thread (the daemons spawn, they never fork).
public final class SerialWorker: @unchecked Sendable {
    public typealias Job = @Sendable () -> Void

    /// For the process's short delayed jobs (the buffered audit log's flush, the rollback mark's
    /// deferred sync, the end of an idle held read transaction): one thread for all of them. A
    /// job here must be short and must never wait for another worker's job.
    public static let deferred = SerialWorker(name: "kcfs-deferred")

    /// The thread's name (ps, top, perf; Linux keeps 15 bytes).
    public let name: String

    private struct Delayed {
        var deadline: UInt64
        var job: Job
    }

    /// Its lock guards everything below; its broadcast wakes the thread (the only waiter). Its
    /// deadlines are CLOCK_MONOTONIC: a change of the wall clock neither hurries nor delays them.
    private let wake = Condition()
    private var ready: [Job] = []
    /// Sorted by deadline, then by the order they were given.
    private var delayed: [Delayed] = []
    private var started = false
    private var stopped = false
    private var thread: pthread_t?

    public init(name: String) {
        self.name = name
    }

    /// Runs `job` on the worker's thread after everything queued before it.
    public func async(_ job: @escaping Job) {
        var dropped: Job? = nil
        withLock {
            guard !stopped else {
                dropped = job
                return
            }
            ready.append(job)
            startOrWake()
        }
        _ = dropped
    }

    /// Runs `job` on the worker's thread once `seconds` have passed (CLOCK_MONOTONIC), then in
    /// turn with what is queued by then.
    public func after(seconds: Double, _ job: @escaping Job) {
        let deadline = Self.now() &+ UInt64(max(0, seconds) * 1e9)
        var dropped: Job? = nil
        withLock {
            guard !stopped else {
                dropped = job
                return
            }
            let entry = Delayed(deadline: deadline, job: job)
            let at = delayed.firstIndex { $0.deadline > deadline } ?? delayed.endIndex
            delayed.insert(entry, at: at)
            startOrWake()
        }
        _ = dropped
    }

    /// Runs `body` on the worker's thread after everything queued before it, and returns when it
    /// has run. After `stop()` it runs nothing and returns at once.
    public func sync(_ body: @escaping @Sendable () -> Void = {}) {
        precondition(!isCurrent, "SerialWorker.sync called on its own thread (\(name))")
        let done = DispatchSemaphore(value: 0)
        let queued = withLock { () -> Bool in
            guard !stopped else { return false }
            ready.append {
                body()
                done.signal()
            }
            startOrWake()
            return true
        }
        if queued { done.wait() }
    }

    /// Lets the thread run what is queued and end. Does not wait for it (a closure may be what
    /// releases the worker's owner, whose deinit stops it).
    public func stop() {
        withLock {
            stopped = true
            wake.broadcast()
        }
    }

    /// Whether the caller is the worker's thread.
    public var isCurrent: Bool {
        withLock { thread.map { pthread_equal($0, pthread_self()) != 0 } ?? false }
    }

    /// Whether the worker's thread is running (it starts at the first closure and ends after
    /// `stop()`).
    public var isRunning: Bool { withLock { started && thread != nil } }

    // MARK: The thread

    private func withLock<R>(_ body: () throws -> R) rethrows -> R {
        wake.lock()
        defer { wake.unlock() }
        return try body()
    }

    /// With `lock` held.
    private func startOrWake() {
        guard started else {
            started = true
            // The running thread holds the worker until it ends.
            Threads.detach(name: name) { [self] in run() }
            return
        }
        wake.broadcast()
    }

    private func run() {
        wake.lock()
        thread = pthread_self()
        while true {
            let now = Self.now()
            while let first = delayed.first, first.deadline <= now {
                ready.append(first.job)
                delayed.removeFirst()
            }
            if !ready.isEmpty {
                var batch: [Job] = []
                swap(&batch, &ready)
                wake.unlock()
                for job in batch { job() }
                batch = []
                wake.lock()
                continue
            }
            if stopped { break }
            if let first = delayed.first {
                wake.wait(untilNanoseconds: first.deadline)
            } else {
                wake.wait()
            }
        }
        thread = nil
        var dropped: [Delayed] = []
        swap(&dropped, &delayed)
        wake.unlock()
        dropped = []
    }

    /// CLOCK_MONOTONIC in nanoseconds.
    static func now() -> UInt64 {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return UInt64(t.tv_sec) * 1_000_000_000 + UInt64(t.tv_nsec)
    }
}
