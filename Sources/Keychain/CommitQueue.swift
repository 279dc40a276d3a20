import Dispatch
import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore
import Synchronization

/// Group commit: write transactions that arrive while another is committing wait, and are
/// then committed together, each under a savepoint of one SQLite transaction, with one
/// manifest update and one fsync for all of them. A member whose body throws is rolled back
/// to its savepoint alone and gets its own error; the others commit. Every member returns only
/// after the commit that holds its change is durable, so "durable when close returns" still
/// holds for each writer.
///
/// A member may ask for a commit that is not durable (`durable: false`: a create's empty item,
/// which nothing has promised durable yet). A batch is durable if any member asks it to be; a
/// batch of such members only is committed without an fsync (`ItemStore.write(durable:)`) and
/// leaves the manifest's counter as it is, so the device's rollback mark, which every process
/// raises to the counters it sees, only ever names counters of durable commits. The next
/// durable commit of the vault (any member's, or `makeCommitsDurable`'s) syncs the log that
/// holds it and takes the counter up by one.
///
/// Why it is safe: the members run one after another on the leader's thread inside one
/// transaction, in queue order, so the result is the same as running them as separate
/// transactions in that order (each sees the ones before it); the manifest is verified once
/// before the first and written once after the last, exactly as for one transaction that made
/// all their changes.
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
    }
    private let state = Mutex(State())

    /// Members queued and not yet taken into a batch (for tests and the log).
    var waiting: Int { state.withLock { $0.pending.count } }

    /// Queues a member; true when its caller must lead now (no batch is being committed).
    func enqueue(_ member: Member) -> Bool {
        state.withLock { s in
            s.pending.append(member)
            if s.leaderActive { return false }
            s.leaderActive = true
            return true
        }
    }

    /// The batch the leader commits: the leader itself and the members queued that use the
    /// same keys (a key rotation in between starts a batch of its own). A leader that asks no
    /// fsync takes only members that ask none either: a create waits for no durable batch but
    /// the one committing when it came (the kernel holds the directory across a create, so
    /// creates in one directory come one at a time: each behind two fsyncs made them as slow).
    func takeBatch(leader: Member) -> [Member] {
        state.withLock { s in
            var batch: [Member] = [leader]
            var rest: [Member] = []
            for member in s.pending where member !== leader {
                if batch.count < Self.maxBatch && member.keys.entry === leader.keys.entry
                    && (leader.durable || !member.durable)
                {
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
    /// waits and leadership ends. After a durable batch, members that ask no fsync go first
    /// (see `takeBatch`; they and the durable ones queued beside them are concurrent calls, so
    /// either order is one the callers could have seen); after one of theirs, the queue's head,
    /// so that a stream of creates never holds durable writers back.
    func nextLeader(afterDurable: Bool) -> Member? {
        state.withLock { s in
            let preferred = afterDurable ? s.pending.first(where: { !$0.durable }) : nil
            guard let next = preferred ?? s.pending.first else {
                s.leaderActive = false
                return nil
            }
            next.leads = true
            return next
        }
    }
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
                if !member.leads {
                    if let error = member.error { throw error }
                    writerReturns(member)
                    return result.value!
                }
            }
            // Leading: commit the batch this member heads, wake its members, pass the lead on.
            let batch = commitQueue.takeBatch(leader: member)
            commitBatch(batch, keys: keys)
            let next = commitQueue.nextLeader(afterDurable: batch.contains { $0.durable })
            for other in batch where other !== member { other.done.signal() }
            next?.done.signal()
            if let error = member.error { throw error }
            writerReturns(member)
            return result.value!
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
        let durable = batch.contains { $0.durable }
        var committedChanges: [ItemChange] = []
        var ownSeqs: [Int64] = []
        do {
            let counter = try storeCall {
                try store.write(durable: durable) { vault -> Int64? in
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
                let observers = state.withLock { s in
                    s.undurableCommits = !durable
                    return s.commitObservers
                }
                if durable { noteCounter(counter) }
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
    /// Makes every commit of this process durable: when one was committed without an fsync
    /// since the last durable one (a create's empty item), a durable commit of the manifest
    /// alone (its counter up by one), grouped with whatever else commits then; else nothing.
    /// What a handle's close or fsync owes for a create it has not written to.
    /// Whether this process's last commit was made without an fsync (a create's empty item,
    /// which the writer's close or fsync makes durable next): the sync engine waits for that
    /// commit rather than upload an item whose data is about to come.
    public var lastCommitUndurable: Bool { state.withLock { $0.undurableCommits } }

    public func makeCommitsDurable() throws {
        guard state.withLock({ $0.undurableCommits }) else { return }
        try writeTransaction(keys: try currentKeys().manifest) { _ in }
    }
}
