import FoundationEssentials
import Glibc
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The commits of other processes (issue 30, point 2): a command that opened the vault itself
/// while this process holds it (behind a locked service, with the passphrase; a Secret Service
/// or ssh agent run on their own: docs/service.md, "Watching the vault's changes"). Once
/// `Keychain.followOtherProcesses()` has started it, a thread waits on the vault's files
/// (`VaultWatch`: inotify on the vault and its WAL, no polling), reads the change log after the
/// last row it handled, and hands the rows this process did not commit to the `onCommit`
/// observers. This process's own commits mark their sequence numbers (`markOwn`) inside their
/// transaction, before it commits, so the follower, which reads committed rows only, never hands
/// one out twice.
final class ForeignCommits: Sendable {
    private struct State {
        var following = false
        /// The last log row the follower handled.
        var followed: Int64 = 0
        /// Sequence numbers of this process's commits the follower has not read yet.
        var own: Set<Int64> = []
        /// What stops the follower's thread.
        var stop: StopSignal?
    }
    private let state = Mutex(State())
    /// How many times other processes' changes were handed out: part of the commit count the
    /// reads that reuse a recent row check (`RecentRows`), so none outlives such a change.
    private let deliveries = Atomic<Int64>(0)

    var deliveryCount: Int64 { deliveries.load(ordering: .acquiring) }
    func noteDelivery() { deliveries.add(1, ordering: .releasing) }

    var isFollowing: Bool { state.withLock { $0.following } }

    /// Called inside a commit's transaction, before it commits.
    func markOwn(_ seqs: [Int64]) { state.withLock { $0.own.formUnion(seqs) } }
    /// The commit that marked them failed: nothing of it was written.
    func unmarkOwn(_ seqs: [Int64]) { state.withLock { $0.own.subtract(seqs) } }

    /// Starts following from `last` (the log's last row now); false when already following.
    func start(from last: Int64, stop: StopSignal) -> Bool {
        state.withLock { s in
            guard !s.following else { return false }
            s.following = true
            s.followed = last
            s.stop = stop
            return true
        }
    }

    /// The follower's next read: after `followed`.
    var followed: Int64 { state.withLock { $0.followed } }

    /// Whether `seq` is one of this process's commits the follower has not read yet.
    func isOwn(_ seq: Int64) -> Bool { state.withLock { $0.own.contains(seq) } }

    /// Of the rows read up to `last`, those this process did not commit; `followed` moves on.
    func foreign(_ changes: [LoggedChange], through last: Int64) -> [LoggedChange] {
        state.withLock { s in
            let out = changes.filter { s.own.remove($0.seq) == nil }
            s.followed = max(s.followed, last)
            s.own = s.own.filter { $0 > s.followed }
            return out
        }
    }

    /// Ends the follower's thread (the keychain is going away).
    func stopFollowing() {
        state.withLock { s in
            s.stop?.signal()
            s.stop = nil
        }
    }
}

/// A pipe that tells a waiting thread to stop (it polls `fd`, the read end); both ends closed
/// when its last holder lets it go (the thread, or the keychain that signals it), so no signal
/// goes to a closed pipe or a reused descriptor.
final class StopSignal: Sendable {
    let fd: Int32
    private let writeEnd: Int32
    init() throws {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { throw KeychainError(.io, "cannot follow the vault: no pipe") }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        (fd, writeEnd) = (ends[0], ends[1])
    }
    deinit {
        close(fd)
        close(writeEnd)
    }
    func signal() {
        var one: UInt8 = 1
        _ = write(writeEnd, &one, 1)
    }
}

extension Keychain {
    /// Hands the commits of other processes to the `onCommit` observers too, within
    /// milliseconds of their commit (the daemon's vault watch): each change with its class, id,
    /// kind, log sequence number and the names the log holds (`names(of:)` answers them), no
    /// origin and no rows. Idempotent; the thread ends with the keychain.
    public func followOtherProcesses() throws {
        let watch = try VaultWatch(vault: path)
        let stop = try StopSignal()
        guard foreignCommits.start(from: try lastLoggedChange(), stop: stop) else { return }
        Threads.detach { [weak self, foreignCommits] in
            var stamp: [Int64]?
            while watch.wait(orReadable: stop.fd) {
                guard let self else { return }
                afterVaultWrite(&stamp) {
                    deliverForeignCommits(foreignCommits)
                    for observer in state.withLock({ $0.otherWriteObservers }) { observer() }
                }
            }
        }
    }

    /// `observer` is called on the vault watch's thread after each write another process made
    /// to the vault, item changes or not (the sync engine waits there for a `sync join` made
    /// by the CLI while the service runs). Needs `followOtherProcesses`.
    public func onOtherProcessWrite(_ observer: @escaping @Sendable () -> Void) {
        state.withLock { $0.otherWriteObservers.append(observer) }
    }

    /// Reads the log after the last row followed and tells the observers of the rows another
    /// process committed. A log that no longer holds that row (pruned past it, or cut) or does
    /// not authenticate is followed again from its end: nothing is made up.
    private func deliverForeignCommits(_ foreign: ForeignCommits) {
        var changes: [ItemChange] = []
        do {
            var page: ChangeLogPage
            repeat {
                // This process's own rows are skipped unopened: the observers had them at commit.
                page = try changeLog(after: foreign.followed, limit: 500, skipping: foreign.isOwn)
                for change in foreign.foreign(page.changes, through: page.through) {
                    // The log does not say whether an update wrote the data: taken as written
                    // (a watcher hears IN_MODIFY), what most updates are.
                    var item = ItemChange(
                        itemClass: change.itemClass, id: change.id, kind: change.kind,
                        dataChanged: change.kind != .removed)
                    item.seq = change.seq
                    item.logged = (change.before, change.after)
                    changes.append(item)
                }
            } while page.rowsRead == 500
        } catch {
            if let last = try? lastLoggedChange() { _ = foreign.foreign([], through: last) }
        }
        guard !changes.isEmpty else { return }
        foreign.noteDelivery()
        let observers = state.withLock { $0.commitObservers }
        for observer in observers { observer(changes) }
    }
}
