import Dispatch
import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore
import Synchronization

/// Group commit: write transactions that arrive while another is committing wait, and are
/// then committed together, each under a savepoint of one SQLite transaction, with one
/// manifest update for all of them. A member whose body throws is rolled back to its savepoint
/// alone and gets its own error; the others commit. Every durable member returns only after
/// the commit that holds its change is durable, so "durable when close returns" still holds
/// for each writer.
///
/// The fsync is not the leader's: a batch is committed without one (`ItemStore.write(durable:
/// false)`), the lead passes on at once, and each durable member then makes its batch durable
/// on its own thread (`Keychain.syncCommits`: one `fdatasync` of the WAL, `ItemStore.syncLog`,
/// for every member and batch committed before it started; members that arrive while one runs
/// wait for it, then find theirs done or run the next). A durable leader waits for the fsync of
/// the last durable batch before it takes its own (`awaitBatch`, at most `parkLimit`), so that
/// durable writers gather as they did behind an fsync inside the commit; but a member that asks
/// no fsync (a create's empty item, which nothing has promised durable yet: its writer's close
/// or fsync makes it durable) ends that wait as it arrives, and waits for no fsync at all,
/// neither its own batch's nor the one committing when it came: creates in one directory, which
/// the kernel sends one at a time, join the batches of the writers' closes instead of taking
/// turns with them.
///
/// The counter: a batch with a durable member takes the manifest's counter up by one; a batch
/// of members that ask no fsync only leaves it as it is, so that the next durable commit of
/// the vault (any member's, or `makeCommitsDurable`'s) takes it up with them. The device's
/// rollback mark is raised only after the fsync that made a counter durable: it never names a
/// counter a power loss could take back (RollbackMark.swift). Readers see a batch from its
/// commit on, before its fsync, as they see a create's empty item: nothing was promised of it
/// until its writers return.
///
/// Why it is safe: the members run one after another on the leader's thread inside one
/// transaction, in queue order, so the result is the same as running them as separate
/// transactions in that order (each sees the ones before it); the manifest is verified once
/// before the first and written once after the last, exactly as for one transaction that made
/// all their changes. The WAL is one file written in order: the fsync that follows a commit
/// covers every commit before it.
///
/// Leadership: the first writer to arrive with no group in progress commits the batch it
/// finds (itself and whoever queued meanwhile, at most `maxBatch`), then hands the lead to the
/// first member still waiting, so no writer commits other writers' batches indefinitely.
final class CommitQueue: Sendable {
    /// One queued write transaction.
    final class Member: @unchecked Sendable {
        // @unchecked: `error` and `leads` are written by the leader's thread while the member's
        // own thread waits on `done`, and read by that thread only after `done` is signalled:
        // the semaphore orders every access.
        let keys: ManifestKeys
        let durable: Bool
        /// The face whose request this is (`Caller.origin`), put on the changes it commits.
        let origin: String
        /// The member's body; dropped as soon as it has run (or its batch failed), because the
        /// caller's closure must not outlive the call (`withoutActuallyEscaping` checks).
        var run: ((any ItemStoreWriter) throws -> Void)?
        var error: (any Error)?
        /// The item changes its body made, once its batch committed (`ItemChange`).
        var changes: [ItemChange] = []
        /// Set when the member is woken to lead the next batch rather than because it is done.
        var leads = false
        /// The number of the batch that committed it (`Ledger.committed`), once committed.
        var batch: Int64 = 0
        let done = DispatchSemaphore(value: 0)

        init(
            keys: ManifestKeys, durable: Bool = true, origin: String = "",
            run: @escaping (any ItemStoreWriter) throws -> Void
        ) {
            self.keys = keys
            self.durable = durable
            self.origin = origin
            self.run = run
        }
    }

    static let maxBatch = 64

    private struct State {
        var pending: [Member] = []
        var leaderActive = false
        /// A leader waits in `awaitBatch` (woken by `park`).
        var leaderParked = false
    }
    private let state = Mutex(State())

    /// Members queued and not yet taken into a batch (for tests and the log).
    var waiting: Int { state.withLock { $0.pending.count } }

    /// Queues a member; true when its caller must lead now (no batch is being committed).
    func enqueue(_ member: Member) -> Bool {
        let (leads, wake) = state.withLock { s in
            s.pending.append(member)
            // A create does not wait for the fsync the parked leader waits for.
            let wake = s.leaderParked && !member.durable
            if wake { s.leaderParked = false }
            if s.leaderActive { return (false, wake) }
            s.leaderActive = true
            return (true, wake)
        }
        if wake { park.signal() }
        return leads
    }

    /// Wakes a leader parked in `awaitBatch`: an fsync ended.
    func fsyncEnded() {
        let wake = state.withLock { s in
            defer { s.leaderParked = false }
            return s.leaderParked
        }
        if wake { park.signal() }
    }
    private let park = DispatchSemaphore(value: 0)
    /// The longest a leader stays parked, should a wake-up be missed: never a hang.
    static let parkLimit = DispatchTimeInterval.milliseconds(20)

    /// Before a leader takes its batch: while a durable batch committed before it has not been
    /// synced yet (its members' fsync is running), a durable leader waits for that fsync to end
    /// (`fsyncEnded`), so that the writers arriving meanwhile commit together with it, as they
    /// did when the fsync ran inside the commit; a create arriving meanwhile (`enqueue`), or a
    /// create at the head, commits at once with whoever queued so far.
    func awaitBatch(leader: Member, unsynced: () -> Bool) {
        guard leader.durable else { return }
        let parked = state.withLock { s in
            guard unsynced(), s.pending.allSatisfy(\.durable) else { return false }
            s.leaderParked = true
            return true
        }
        guard parked else { return }
        _ = park.wait(timeout: .now() + Self.parkLimit)
        state.withLock { $0.leaderParked = false }
    }

    /// The batch the leader commits: the leader itself and the members queued that use the
    /// same keys (a key rotation in between starts a batch of its own), durable or not: the
    /// leader does not wait for the fsync.
    func takeBatch(leader: Member) -> [Member] {
        state.withLock { s in
            var batch: [Member] = [leader]
            var rest: [Member] = []
            for member in s.pending where member !== leader {
                if batch.count < Self.maxBatch && member.keys.entry === leader.keys.entry {
                    batch.append(member)
                } else {
                    rest.append(member)
                }
            }
            s.pending = rest
            return batch
        }
    }

    /// After a batch: the member that leads the next one (already marked), or nil when nobody
    /// waits and leadership ends.
    func nextLeader() -> Member? {
        state.withLock { s in
            guard let next = s.pending.first else {
                s.leaderActive = false
                return nil
            }
            next.leads = true
            return next
        }
    }

    /// This process's batches: how many committed, which took the counter up last, which left
    /// it as it was last, and how many a finished fsync covers.
    struct Ledger {
        var committed: Int64 = 0
        var lastCounted: (batch: Int64, counter: Int64) = (0, 0)
        var lastUncounted: Int64 = 0
        var synced: Int64 = 0
    }
    let ledger = Mutex(Ledger())
    /// Held through each fsync, so that the members waiting for one find their batch covered
    /// when it ends (`Keychain.syncCommits`).
    let syncing = Mutex(())

    /// Whether this process's last batch was committed without an fsync and left the counter as
    /// it was (a create's empty item alone).
    var lastBatchUncounted: Bool { ledger.withLock { $0.lastUncounted > $0.lastCounted.batch } }
}

/// What a member's body returned, for its own thread.
final class CommitResult<R>: @unchecked Sendable {
    // @unchecked: written by whichever thread runs the member, read by the member's own thread
    // after the member's semaphore says it ran.
    var value: R?
}

extension Keychain {
    /// Runs `body` in a write transaction that also commits the next manifest (see
    /// `commitBatch`), grouped with the write transactions of other threads that arrive
    /// meanwhile (CommitQueue). Returns once the commit holding its change is durable.
    /// `durable: false`: see CommitQueue (returns once it is committed, not once it is durable).
    /// `origin`: the face the change is made through (`Caller.origin`), for `ItemChange.origin`.
    func writeTransaction<R>(
        keys: ManifestKeys, durable: Bool = true, origin: String = "", _ body: (any ItemStoreWriter) throws -> R
    )
        throws -> R
    {
        let result = CommitResult<R>()
        return try withoutActuallyEscaping(body) { body in
            let member = CommitQueue.Member(keys: keys, durable: durable, origin: origin) { writer in
                result.value = try body(writer)
            }
            if !commitQueue.enqueue(member) {
                member.done.wait()
                if !member.leads { return try finish(member, result) }
            }
            // Leading: commit the batch this member heads, pass the lead on, wake its members.
            // Each durable member (this one too) makes the batch durable itself (`finish`).
            commitQueue.awaitBatch(leader: member) {
                commitQueue.ledger.withLock { $0.lastCounted.batch > $0.synced }
            }
            let batch = commitQueue.takeBatch(leader: member)
            commitBatch(batch, keys: keys)
            let next = commitQueue.nextLeader()
            next?.done.signal()
            for other in batch where other !== member { other.done.signal() }
            return try finish(member, result)
        }
    }

    /// A member's return, on its own thread once its batch committed: its error; else, when it
    /// asked for a durable commit, the fsync that makes its batch durable; then the
    /// `beforeWriterReturns` observers.
    private func finish<R>(_ member: CommitQueue.Member, _ result: CommitResult<R>) throws -> R {
        if let error = member.error { throw error }
        if member.durable { try syncCommits(through: member.batch) }
        writerReturns(member)
        return result.value!
    }

    /// Makes this process's batches up to `batch` durable: nothing when a finished fsync covers
    /// it already, else one `fdatasync` of the WAL for every batch committed when it starts
    /// (whoever waited meanwhile finds theirs done). Then the device's rollback mark is raised to
    /// the last counter that fsync made durable. A failed fsync is the caller's error: its change
    /// is committed and visible, and may or may not survive a power loss.
    func syncCommits(through batch: Int64) throws {
        try commitQueue.syncing.withLock { _ in
            let (target, counted, synced) = commitQueue.ledger.withLock { ($0.committed, $0.lastCounted, $0.synced) }
            guard synced < batch else { return }
            defer { commitQueue.fsyncEnded() }
            try storeCall { try store.syncLog() }
            commitQueue.ledger.withLock { $0.synced = max($0.synced, target) }
            if counted.batch > 0 { raiseMark(to: counted.counter) }
        }
    }

    /// The `beforeWriterReturns` observers, on the member's own thread, with its own changes.
    private func writerReturns(_ member: CommitQueue.Member) {
        guard !member.changes.isEmpty else { return }
        let observers = state.withLock { $0.returnObservers }
        for observer in observers { observer(member.changes) }
    }

    /// Commits a batch in one transaction: the stored manifest is authenticated first (a
    /// manifest altered while the vault is in use is refused, never re-signed), the counter
    /// must not have gone back, each member runs under its own savepoint, every row change made
    /// through the writer adjusts the manifest, and the counter goes up by one. After the
    /// commit the device's rollback mark is raised to the new counter. Each member's error (its
    /// own, or the whole transaction's) is left in the member.
    private func commitBatch(_ batch: [CommitQueue.Member], keys: ManifestKeys) {
        var durable = false
        var committedChanges: [ItemChange] = []
        var ownSeqs: [Int64] = []
        do {
            let counter = try storeCall {
                // Never an fsync here: each durable member syncs after the commit (`finish`).
                try store.write(durable: false) { vault -> Int64? in
                    let before = try AuthenticatedState.read(from: vault)
                    guard before.header.format >= VaultHeader.formatVersion else {
                        throw KeychainError(
                            .decode, "vault \(path) is in format \(before.header.format): unlock it once to migrate it")
                    }
                    let manifest = try before.verified(try vault.meta("manifest"), keys: keys)
                    try refuseRollback(manifest.counter, accepting: false)
                    let writer = ManifestedWriter(
                        vault, manifest: manifest, keys: keys, vaultID: before.header.vaultID)
                    var committed = 0
                    for member in batch {
                        guard let run = member.run else { continue }
                        member.run = nil
                        do {
                            writer.origin = member.origin
                            let first = writer.changes.count
                            try writer.savepoint { try run(writer) }
                            member.changes = Array(writer.changes[first...])
                            committed += 1
                        } catch let stop as PresenceNeeded {
                            // Not a failure: the member's update asks presence and runs again.
                            member.error = stop
                        } catch {
                            member.error = Self.mapStoreError(error, path: path)
                        }
                    }
                    // Every member failed: their savepoints left nothing to commit.
                    guard committed > 0 else { return nil }
                    // Durable when a member that asked for it committed: only such a member syncs.
                    durable = batch.contains { $0.durable && $0.error == nil }
                    try writer.logChanges()
                    try journalSyncChanges(writer)
                    // Before the commit: the follower of other processes' commits reads committed
                    // rows only, so it finds these marked as this process's (ForeignCommits.swift).
                    if foreignCommits.isFollowing {
                        ownSeqs = writer.changes.map(\.seq)
                        foreignCommits.markOwn(ownSeqs)
                    }
                    var next = try writer.finishedManifest()
                    next.counter = durable ? manifest.counter + 1 : manifest.counter
                    let after = writer.authenticatedStateChanged ? try AuthenticatedState.read(from: vault) : before
                    try vault.setMeta("manifest", after.encode(next, keys: keys))
                    committedChanges = writer.changes
                    return next.counter
                }
            }
            if let counter {
                // Batches commit one at a time (one leader), so this is the vault's last commit.
                let number = commitQueue.ledger.withLock { l in
                    l.committed += 1
                    if durable { l.lastCounted = (l.committed, counter) } else { l.lastUncounted = l.committed }
                    return l.committed
                }
                for member in batch { member.batch = number }
                let observers = state.withLock { $0.commitObservers }
                // The ssh agent's listings are kept under the change stamp, which this commit
                // changed; a change of a key drops them at once, before the writer returns.
                if committedChanges.contains(where: { $0.itemClass == .key }) { sshListings.removeAll() }
                if !committedChanges.isEmpty { for observer in observers { observer(committedChanges) } }
            }
        } catch {
            // The transaction itself failed (verification, the disk): nothing of it committed.
            foreignCommits.unmarkOwn(ownSeqs)
            for member in batch where member.error == nil { member.error = error }
        }
        for member in batch { member.run = nil }
    }
}

extension Keychain {
    /// Whether this process's last commit was made without an fsync and left the counter as it
    /// was (a create's empty item, which the writer's close or fsync makes durable next): the
    /// sync engine waits for that commit rather than upload an item whose data is about to come.
    public var lastCommitUndurable: Bool { commitQueue.lastBatchUncounted }

    /// Makes every commit of this process durable, as a handle's close or fsync owes for a
    /// create it has not written to: when a batch that left the counter as it was (a create's
    /// empty item) is the last of them, a durable commit of the manifest alone (its counter up
    /// by one), grouped with whatever else commits then; else the fsync of the batches up to the
    /// last that took the counter up, if no finished fsync covers it yet.
    public func makeCommitsDurable() throws {
        let (uncounted, counted) = commitQueue.ledger.withLock { ($0.lastUncounted, $0.lastCounted.batch) }
        if uncounted > counted {
            try writeTransaction(keys: try currentKeys().manifest) { _ in }
        } else if counted > 0 {
            try syncCommits(through: counted)
        }
    }
}
