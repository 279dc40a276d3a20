import CPlatform
import Glibc

/// A detached POSIX thread for a long-lived loop (a socket's accept loop, a connection, a
/// timer): what Foundation's `Thread` gave, without Foundation (the product links
/// FoundationEssentials only, issue 28). The thread has the default attributes (the stack
/// size of RLIMIT_STACK), as Foundation's had.
public enum Threads {
    /// Runs `body` on a new detached thread; `name`, if given, is the kernel's name of it (ps,
    /// top, perf; 15 bytes at most are kept). A thread that cannot be started is fatal, as it
    /// was with Foundation.
    public static func detach(name: String? = nil, _ body: @escaping @Sendable () -> Void) {
        final class Start: @unchecked Sendable {
            let name: String?
            let body: @Sendable () -> Void
            init(_ name: String?, _ body: @escaping @Sendable () -> Void) {
                self.name = name
                self.body = body
            }
        }
        let context = Unmanaged.passRetained(Start(name, body)).toOpaque()
        var id = pthread_t()
        let rc = pthread_create(
            &id, nil,
            { context in
                let start = Unmanaged<Start>.fromOpaque(context!).takeRetainedValue()
                if let name = start.name { _ = name.withCString { kcfs_set_thread_name($0) } }
                start.body()
                return nil
            }, context)
        guard rc == 0 else {
            Unmanaged<Start>.fromOpaque(context).release()
            fatalError("cannot start a thread: \(String(cString: strerror(rc)))")
        }
        pthread_detach(id)
    }

    /// Sleeps the calling thread for `seconds` (interrupted sleeps resumed).
    public static func sleep(seconds: Double) {
        guard seconds > 0 else { return }
        var request = timespec(tv_sec: Int(seconds), tv_nsec: Int((seconds - seconds.rounded(.down)) * 1e9))
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
    }
}

/// A mutex and its condition variable, what Foundation's `NSCondition` gave (issue 28), its
/// timed waits on CLOCK_MONOTONIC (Keychain's `MonotonicClock.nanoseconds()`): a change of the wall clock
/// neither hurries nor delays them.
public final class Condition: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    public init() {
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        condition = .allocate(capacity: 1)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        condition.deallocate()
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    public func lock() { pthread_mutex_lock(mutex) }
    public func unlock() { pthread_mutex_unlock(mutex) }
    public func broadcast() { pthread_cond_broadcast(condition) }

    /// With the lock held: waits for a broadcast (or a spurious wake-up).
    public func wait() { pthread_cond_wait(condition, mutex) }

    /// With the lock held: waits for a broadcast until `deadline` (`MonotonicClock`
    /// nanoseconds); false once the deadline has passed.
    @discardableResult
    public func wait(untilNanoseconds deadline: UInt64) -> Bool {
        var at = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        return pthread_cond_timedwait(condition, mutex, &at) != ETIMEDOUT
    }
}
