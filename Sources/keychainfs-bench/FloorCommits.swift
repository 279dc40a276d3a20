import Dispatch
import KeychainCrypto
import Synchronization

/// The durable floor's commits (issue 9, item 3): every written handle's FLUSH makes the raw
/// SQLite durable update of the durable-commit floor (`RawSQLite`, the vault's table, indexes
/// and pragmas) and answers only once it is durable; FLUSHes that arrive while a commit is in
/// progress wait and are committed together in one transaction, led the way keychainfs's
/// `CommitQueue` leads (the first to arrive commits the batch it finds, at most `maxBatch`,
/// then hands the lead to the first still waiting).
///
/// Each commit updates a row drawn at random from the whole table, as the raw update does.
///
/// So the durable floor is a FUSE filesystem of keychainfs's shape (every open answered,
/// xattrs, direct I/O) doing the least "durable when close returns" needs, and no keychain
/// work: its closes/s ÷ the raw update's is the most such a filesystem reaches on this machine
/// and kernel, and its 8 writers ÷ one what grouping gives it.
final class FloorCommits: Sendable {
    final class Member: Sendable {
        let row: Int64
        let done = DispatchSemaphore(value: 0)
        /// Woken to lead the next batch rather than because its row is committed.
        let leads = Atomic(false)
        let failed = Atomic(false)
        init(row: Int64) { self.row = row }
    }

    static let maxBatch = 64

    private struct Queue {
        var pending: [Member] = []
        var leaderActive = false
    }
    private let queue = Mutex(Queue())
    /// Durable commits made and the closes they held, since the mount.
    private let made = Mutex((commits: 0, closes: 0))
    /// Used by the leader only; the lock is never contended (one leader at a time).
    private let database: Mutex<RawSQLite>
    private let filler: [UInt8]
    let rows: Int

    init(database: sending RawSQLite) {
        let shape = database.shape
        rows = database.rowCount
        filler = Sodium.randomBytes(max(shape.attrs, shape.itemKey, shape.data))
        self.database = Mutex(database)
    }

    var totals: (commits: Int, closes: Int) { made.withLock { $0 } }

    /// Commits the update of a random row durably, grouped with the commits of other threads
    /// that arrive meanwhile; false when the commit failed.
    func commit() -> Bool {
        let member = Member(row: Int64.random(in: 1...Int64(rows)))
        let leadNow = queue.withLock { q in
            q.pending.append(member)
            if q.leaderActive { return false }
            q.leaderActive = true
            return true
        }
        if !leadNow {
            member.done.wait()
            if !member.leads.load(ordering: .acquiring) { return !member.failed.load(ordering: .acquiring) }
        }
        let batch = queue.withLock { q in
            let batch = Array(q.pending.prefix(Self.maxBatch))
            q.pending.removeFirst(batch.count)
            return batch
        }
        let committed = database.withLock { db in
            (try? db.commitUpdates(batch.map(\.row), filler: filler)) != nil
        }
        if committed {
            made.withLock {
                $0.commits += 1
                $0.closes += batch.count
            }
        }
        for other in batch where other !== member {
            if !committed { other.failed.store(true, ordering: .releasing) }
            other.done.signal()
        }
        let next = queue.withLock { q -> Member? in
            guard let next = q.pending.first else {
                q.leaderActive = false
                return nil
            }
            next.leads.store(true, ordering: .releasing)
            return next
        }
        next?.done.signal()
        return committed
    }
}
