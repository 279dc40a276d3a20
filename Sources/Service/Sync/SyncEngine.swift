import CPlatform
import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import KeychainSync
import Synchronization

/// The sync engine (issue 31, point 4): one thread of the keychain service holding one libpq
/// connection to the group's server. It pulls every change after its cursor in the server's
/// commit order and applies it through the core (`Keychain.applyPulled`, one transaction per
/// page with the cursor), then uploads the outbox (`pendingUploads`, `uploaded`); a conflict
/// on upload pulls first and tries again. Then it sleeps in poll(2) on the connection's socket
/// (`LISTEN`: another device pushed) and on a wake pipe (a local commit, an unlock, a stop):
/// nothing runs while nothing changes. The server gone: it retries with a growing backoff
/// (0.5 s to 30 s) and catches up from its cursor; local work goes on meanwhile, the outbox
/// growing. Locked: it waits for the unlock (the group's keys are held only while unlocked).
public final class SyncEngine: @unchecked Sendable {
    // @unchecked: `server`, the backoff and the last error are the engine thread's alone; what
    // other threads set is in `state`.
    private let keychain: Keychain
    /// Where the rounds are audited (`sync-apply`, `sync-refuse`, `via=sync`).
    private let audit: KeychainSession
    private let wake = WakePipe()
    private var server: SyncServer?
    private let state = Mutex(Signals())

    /// What other threads tell the engine thread. Its failures reach `sync status` through the
    /// vault (`Keychain.noteSyncProblem`), not from here.
    private struct Signals {
        var stopped = false
        /// The last local commit was a create's empty item, not yet made durable.
        var createPending = false
        /// A local commit woke the engine (its round gathers the next few first).
        var localWake = false
        /// Local commits seen (the gather waits while it grows).
        var commits = 0
        /// The engine waits on its wake pipe: only then does a local commit write to the pipe
        /// (a commit made while a round or a gather runs costs no wake-up).
        var sleeping = false
    }

    /// A round started by a local commit waits until this long passes with no further local
    /// commit, so a burst of writes is one round, one push and one server commit…
    static let gatherQuiet: Duration = .milliseconds(10)
    /// `gatherQuiet` in microseconds, as `usleep` takes it.
    static let gatherQuietMicroseconds = UInt32(gatherQuiet / .microseconds(1))
    /// …but no longer than this after the first (the propagation a steady writer's changes see).
    static let gatherLimit: Duration = .milliseconds(200)

    public init(keychain: Keychain, audit: KeychainSession) {
        self.keychain = keychain
        self.audit = audit
        keychain.onCommit { [weak self] changes in
            // A local change may have written the outbox; a pulled one has nothing to send.
            guard let self, changes.contains(where: { $0.origin != syncOrigin }) else { return }
            // A local commit without an fsync is a create's empty item (its data follows);
            // pulled pages are committed so too, and are not waited for.
            let undurable = self.keychain.lastCommitUndurable
            let asleep = self.state.withLock {
                $0.createPending = undurable
                $0.localWake = true
                $0.commits += 1
                let sleeping = $0.sleeping
                $0.sleeping = false
                return sleeping
            }
            if asleep { self.wake.signal() }
        }
        keychain.onUnlock { [weak self] in self?.wake.signal() }
        keychain.onLock { [weak self] in self?.wake.signal() }
        // A `sync join`, `setup` or `leave` the CLI made while this service runs: the round
        // checks the vault's group against the keys held (`refreshSync`), so a leave, or a
        // leave and a new group, is taken up at once and not only when the vault had none.
        keychain.onOtherProcessWrite { [weak self] in self?.wake.signal() }
    }

    public func start() {
        // Named for ps, top and perf.
        Threads.detach(name: "kcfs-sync") { [self] in run() }
    }

    public func stop() {
        state.withLock { $0.stopped = true }
        wake.signal()
    }

    private func run() {
        var backoff = 0.5
        /// The failure `sync status` shows now (written to the vault only when it changes).
        var lastError: String?
        while !state.withLock({ $0.stopped }) {
            guard case .unlocked = keychain.lockState, keychain.refreshSync(),
                let config = try? keychain.syncConfiguration()
            else {
                // In no group, or locked: until an unlock, another process's write (the CLI's
                // `sync setup` or `join`, which open the vault themselves) or a stop. A local
                // commit does not wake it: it is journaled, and the round after the unlock or the
                // join sends it.
                state.withLock { $0.localWake = false }
                wake.wait(timeout: nil)
                wake.drain()
                continue
            }
            // A create's empty item commits first without an fsync, then its data at the
            // writer's close: wait (at most 1 s) for that durable commit, so an item is uploaded
            // once, with its data, and no device sees it empty meanwhile.
            asSleeper(unless: { !$0.createPending }) { wake.wait(timeout: 1) }
            state.withLock { $0.createPending = false }
            gather()
            do {
                let server = try connected(config)
                try syncOnce(server)
                backoff = 0.5
                if lastError != nil { try? keychain.noteSyncProblem(nil) }
                lastError = nil
                try sleep(server)
            } catch {
                if let rollback = error as? SyncRollback { audit.recordSync(applied: 0, refused: [rollback.reason]) }
                self.server = nil
                // `sync status` reads it from the vault (the first failure's time is kept).
                if lastError != "\(error)" { try? keychain.noteSyncProblem("\(error)") }
                lastError = "\(error)"
                Log.warning("sync: \(error); retrying in \(backoff) s")
                asSleeper(unless: \.localWake) { wake.wait(timeout: backoff) }
                backoff = min(backoff * 2, 30)
            }
        }
        server = nil
    }

    /// Woken by a local commit: wait while the commits that follow it keep coming (a script
    /// writing many items, an import, a writer in a loop), until `gatherQuiet` passes without
    /// one or `gatherLimit` after the first, so they make one round, one push and one server
    /// commit instead of one each (docs/benchmarks.md, "Issue 31: sync").
    /// It sleeps in slices, not on the wake pipe: the commits it waits for do not write to the
    /// pipe while it runs, and what else did (a stop, an unlock, another process's write) stays
    /// there for the wait after the round.
    private func gather() {
        guard state.withLock({ $0.localWake }) else { return }
        let started = ContinuousClock.now
        var seen = state.withLock { $0.commits }
        while ContinuousClock.now - started < Self.gatherLimit {
            usleep(Self.gatherQuietMicroseconds)
            let now = state.withLock { $0.commits }
            if now == seen { break }
            seen = now
        }
        state.withLock { $0.localWake = false }
    }

    /// Runs `wait` (a wait on the wake pipe) as a sleeper: local commits write to the pipe only
    /// meanwhile. Not at all when `unless` holds already, checked under the same lock a commit
    /// takes, so no commit falls between the check and the sleep unheard. The pipe is drained
    /// after.
    private func asSleeper(unless skip: (Signals) -> Bool, _ wait: () throws -> Void) rethrows {
        let skipped = state.withLock { s -> Bool in
            if skip(s) { return true }
            s.sleeping = true
            return false
        }
        if skipped { return }
        defer {
            state.withLock { $0.sleeping = false }
            wake.drain()
        }
        try wait()
    }

    /// Sleeps until another device's push (a NOTIFY of the group's channel) or something local
    /// (a commit, an unlock, another process's write, a stop). A NOTIFY of this device's own
    /// push, whose seq the cursor has passed already, starts no round: it brings nothing.
    /// Not at all when a local commit came during the round.
    private func sleep(_ server: SyncServer) throws {
        try asSleeper(unless: \.localWake) {
            while true {
                let notice = try server.waitForNotice(timeout: nil, wakeFD: wake.readFD)
                guard let seq = notice?.highestSeq, seq <= (try keychain.syncCursor()) else { break }
            }
        }
    }

    private func connected(_ config: SyncConfiguration) throws -> SyncServer {
        if let server { return server }
        let server = try SyncServer(conninfo: config.server)
        try server.checkSchema()
        try server.listen(group: config.groupID)
        self.server = server
        Log.info("sync: connected to the group's server")
        return server
    }

    private func syncOnce(_ server: SyncServer) throws {
        let report = try SyncRound(keychain: keychain, server: server).run()
        audit.recordSync(applied: report.applied, refused: report.refused)
        for reason in report.refused { Log.warning("sync: \(reason)") }
    }
}

/// A pipe another thread writes a byte to, to wake the engine out of poll(2).
final class WakePipe: Sendable {
    let readFD: Int32
    let writeFD: Int32

    init() {
        var fds: [Int32] = [-1, -1]
        _ = pipe(&fds)
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        }
        readFD = fds[0]
        writeFD = fds[1]
    }

    deinit {
        close(readFD)
        close(writeFD)
    }

    func signal() {
        var byte: UInt8 = 1
        _ = write(writeFD, &byte, 1)
    }

    /// Waits until signalled or `timeout` seconds passed (nil: no limit).
    func wait(timeout: Double?) {
        var fd = pollfd(fd: readFD, events: Int16(POLLIN), revents: 0)
        _ = poll(&fd, 1, timeout.map { Int32($0 * 1000) } ?? -1)
    }

    func drain() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(readFD, &buffer, 64) > 0 {}
    }
}
