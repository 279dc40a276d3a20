import CPlatform
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

    // Everything below is used only with `lock` held.
    private let lock: UnsafeMutablePointer<pthread_mutex_t>
    private let wake: UnsafeMutablePointer<pthread_cond_t>
    private var ready: [Job] = []
    /// Sorted by deadline, then by the order they were given.
    private var delayed: [Delayed] = []
    private var started = false
    private var stopped = false
    private var thread: pthread_t?

    public init(name: String) {
        self.name = name
        lock = .allocate(capacity: 1)
        pthread_mutex_init(lock, nil)
        wake = .allocate(capacity: 1)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        // Deadlines are CLOCK_MONOTONIC: a change of the wall clock neither hurries nor delays them.
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(wake, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        // The running thread holds the worker: this runs only once it has ended or never began.
        pthread_cond_destroy(wake)
        wake.deallocate()
        pthread_mutex_destroy(lock)
        lock.deallocate()
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
            pthread_cond_signal(wake)
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
        pthread_mutex_lock(lock)
        defer { pthread_mutex_unlock(lock) }
        return try body()
    }

    /// With `lock` held.
    private func startOrWake() {
        guard started else {
            started = true
            var id = pthread_t()
            let context = Unmanaged.passRetained(self).toOpaque()
            let rc = pthread_create(
                &id, nil,
                { context in
                    let worker = Unmanaged<SerialWorker>.fromOpaque(context!).takeRetainedValue()
                    worker.run()
                    return nil
                }, context)
            guard rc == 0 else {
                Unmanaged<SerialWorker>.fromOpaque(context).release()
                fatalError("cannot start the \(name) thread: \(String(cString: strerror(rc)))")
            }
            pthread_detach(id)
            return
        }
        pthread_cond_signal(wake)
    }

    private func run() {
        _ = name.withCString { kcfs_set_thread_name($0) }
        pthread_mutex_lock(lock)
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
                pthread_mutex_unlock(lock)
                for job in batch { job() }
                batch = []
                pthread_mutex_lock(lock)
                continue
            }
            if stopped { break }
            if let first = delayed.first {
                var deadline = timespec(
                    tv_sec: Int(first.deadline / 1_000_000_000), tv_nsec: Int(first.deadline % 1_000_000_000))
                _ = pthread_cond_timedwait(wake, lock, &deadline)
            } else {
                pthread_cond_wait(wake, lock)
            }
        }
        thread = nil
        var dropped: [Delayed] = []
        swap(&dropped, &delayed)
        pthread_mutex_unlock(lock)
        dropped = []
    }

    /// CLOCK_MONOTONIC in nanoseconds.
    static func now() -> UInt64 {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return UInt64(t.tv_sec) * 1_000_000_000 + UInt64(t.tv_nsec)
    }
}
