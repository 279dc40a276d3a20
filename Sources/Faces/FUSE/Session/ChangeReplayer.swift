import CPlatform
import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import Synchronization

/// The thread that replays changes made elsewhere through the daemon's own mountpoint, so that
/// the kernel raises the events a local directory would (ReplayPlan.swift says what is replayed
/// and why). It is never a FUSE worker and holds no lock while it calls into the mount: the
/// workers answer its requests (`FuseSession.replayed`) from the step it publishes, and a
/// request of a process that holds a directory the call needs only delays it.
///
/// Changes are queued by the committing thread (`enqueue`, never blocking) in commit order and
/// replayed in that order, one at a time. A writer whose change is replayed waits for it
/// before its caller is answered (`waitForReplays`, bounded by `writerWait`), so the next call
/// of that caller, through any face and any process, finds the mount as it now is.
final class ChangeReplayer: Sendable {
    /// The file handle the daemon gives its own `open`: no item handle is made for it.
    static let handle = UInt64.max
    /// How long a writer waits for the replay of its changes at most (an import of 10,000
    /// items replays in well under a second; a directory held by a request waiting for a
    /// prompt would hold the replay longer, and the writer is then answered anyway).
    static let writerWait: TimeInterval = 1

    private let fs: KeychainFileSystem
    private let mountpoint: String
    /// The replay thread's id, as the kernel gives it in a FUSE request's `pid`; 0 before it runs.
    private let threadID = Atomic<Int32>(0)

    private struct Queue {
        var changes: [ItemChange] = []
        /// No call into the mount before this (monotonic nanoseconds): an unmount is coming.
        var pausedUntil: UInt64 = 0
        var queued = 0
        var replayed = 0
        var stopped = false
        var started = false
    }
    private let queue = Mutex(Queue())
    private let condition = Condition()
    /// The step being replayed, which the workers answer the thread's requests from.
    private let current = Mutex<ReplayStep?>(nil)

    init(fs: KeychainFileSystem, mountpoint: String) {
        self.fs = fs
        self.mountpoint = mountpoint
    }

    /// Whether a request comes from the replay thread.
    func isReplaying(pid: pid_t) -> Bool {
        let tid = threadID.load(ordering: .acquiring)
        return tid != 0 && tid == pid
    }

    /// The step the replay thread is in, for the answers to its requests.
    var step: ReplayStep? { current.withLock { $0 } }

    /// Starts the thread at the first change to replay: most mounts never see a change made
    /// elsewhere, and a thread that never runs is a stack kept for nothing.
    private func startOnce() {
        let first = queue.withLock { q -> Bool in
            defer { q.started = true }
            return !q.started && !q.stopped
        }
        guard first else { return }
        Threads.detach { [self] in
            threadID.store(Int32(kcfs_gettid()), ordering: .releasing)
            run()
        }
    }

    /// Stops at once: what is queued is dropped, waiting writers are released. A call in
    /// progress fails when the mount goes.
    func stop() {
        condition.lock()
        queue.withLock { q in
            q.stopped = true
            q.changes.removeAll()
        }
        condition.broadcast()
        condition.unlock()
    }

    /// Pauses the replay for `seconds` and returns once no call of it is in progress (at most
    /// a second later): `keychainfs unmount` (fusermount3 -u) finds the mount busy while any
    /// call is in flight on it, the replay thread's too. What is queued meanwhile waits.
    func pause(seconds: Double) {
        condition.lock()
        queue.withLock { $0.pausedUntil = MonotonicClock.nanoseconds() + UInt64(seconds * 1e9) }
        condition.broadcast()
        condition.unlock()
        let deadline = MonotonicClock.nanoseconds() + 1_000_000_000
        while current.withLock({ $0 != nil }) && MonotonicClock.nanoseconds() < deadline { usleep(1_000) }
    }

    /// Waits out a pause before the next call into the mount (a bounded, timed wait).
    private func waitWhilePaused() {
        condition.lock()
        defer { condition.unlock() }
        while true {
            let (until, stopped) = queue.withLock { ($0.pausedUntil, $0.stopped) }
            let now = MonotonicClock.nanoseconds()
            guard !stopped, until > now else { return }
            condition.wait(untilNanoseconds: until)
        }
    }

    /// Queues changes to replay; called on the committing thread, in commit order.
    func enqueue(_ changes: [ItemChange]) {
        guard !changes.isEmpty else { return }
        startOnce()
        condition.lock()
        queue.withLock { q in
            guard !q.stopped else { return }
            q.changes += changes
            q.queued += changes.count
        }
        condition.broadcast()
        condition.unlock()
    }

    /// Waits until every change queued so far is replayed, at most `writerWait`.
    func waitForReplays() {
        let deadline = MonotonicClock.nanoseconds() + UInt64(Self.writerWait * 1e9)
        condition.lock()
        defer { condition.unlock() }
        let target = queue.withLock { $0.queued }
        while true {
            let (done, stopped) = queue.withLock { ($0.replayed >= target, $0.stopped) }
            if done || stopped || !condition.wait(untilNanoseconds: deadline) { return }
        }
    }

    private func run() {
        while true {
            condition.lock()
            var batch: [ItemChange] = []
            while true {
                let (taken, stopped) = queue.withLock { q -> ([ItemChange], Bool) in
                    defer { q.changes.removeAll() }
                    return (q.changes, q.stopped)
                }
                if stopped {
                    condition.unlock()
                    return
                }
                if !taken.isEmpty {
                    batch = taken
                    break
                }
                condition.wait()
            }
            condition.unlock()
            replay(batch)
            condition.lock()
            queue.withLock { $0.replayed += batch.count }
            condition.broadcast()
            condition.unlock()
        }
    }

    private func replay(_ changes: [ItemChange]) {
        var present = Set<String>()
        for change in changes {
            if queue.withLock({ $0.stopped }) { return }
            for step in fs.replaySteps(for: change, present: &present) {
                waitWhilePaused()
                if queue.withLock({ $0.stopped }) { return }
                // The root is held for one call only: a mount with a descriptor open on it is
                // busy, and `keychainfs unmount` (fusermount3 -u) must not find it so.
                let root = Self.openMountRoot(mountpoint)
                guard root >= 0 else { return }
                current.withLock { $0 = step }
                let failed = Self.perform(step.call, root: root)
                current.withLock { $0 = nil }
                close(root)
                if failed != 0 { Log.debug("a change's replay to the mount's watchers failed: errno \(failed)") }
            }
        }
    }

    /// The mount's root, opened for `*at` calls, or -1 when the mountpoint is no longer this
    /// FUSE mount (unmounted: a call must never reach the directory beneath).
    private static func openMountRoot(_ mountpoint: String) -> Int32 {
        let fd = open(mountpoint, kcfs_o_path | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return -1 }
        var fsStat = statfs()
        guard fstatfs(fd, &fsStat) == 0, fsStat.f_type == fuseSuperMagic else {
            close(fd)
            return -1
        }
        return fd
    }

    private static let fuseSuperMagic = 0x6573_5546

    /// Performs one replayed call relative to the mount's root; its errno, or 0.
    private static func perform(_ call: ReplayStep.Call, root: Int32) -> Int32 {
        let rc: Int32
        switch call {
        case .makeFile(let path): rc = mknodat(root, path, S_IFREG | 0o600, 0)
        case .makeDirectory(let path): rc = mkdirat(root, path, 0o700)
        case .remove(let path): rc = unlinkat(root, path, 0)
        case .removeDirectory(let path): rc = unlinkat(root, path, AT_REMOVEDIR)
        case .move(let from, let to): rc = renameat(root, from, root, to)
        case .touchAttributes(let path):
            var times = [
                timespec(tv_sec: 0, tv_nsec: Int(kcfs_utime_now)), timespec(tv_sec: 0, tv_nsec: Int(kcfs_utime_now)),
            ]
            rc = utimensat(root, path, &times, 0)
        case .writeData(let path):
            let fd = openat(root, path, O_WRONLY | O_CLOEXEC | O_NOCTTY)
            guard fd >= 0 else { return errno }
            // The modification time alone: IN_MODIFY, as a write gives, then IN_CLOSE_WRITE.
            var times = [
                timespec(tv_sec: 0, tv_nsec: Int(kcfs_utime_omit)), timespec(tv_sec: 0, tv_nsec: Int(kcfs_utime_now)),
            ]
            rc = futimens(fd, &times)
            close(fd)
        }
        return rc == 0 ? 0 : errno
    }
}
