import Synchronization

/// One lock per item (striped: item id modulo `stripes`), held while a handle's edits are
/// replayed onto the stored item (read, apply, update), so that two handles' commits to the
/// same item cannot interleave and lose one's edits. Commits to different items (almost always
/// different stripes) proceed together, so the core can group their durable commits into one
/// fsync (Sources/Keychain/CommitQueue.swift); one lock for the whole mount serialised them.
final class ItemCommitLocks: Sendable {
    private final class Stripe: Sendable {
        let lock = Mutex(())
    }
    static let stripes = 64
    private let table: [Stripe] = (0..<stripes).map { _ in Stripe() }

    func withLock<R>(item id: Int64, _ body: () throws -> R) rethrows -> R {
        let stripe = table[Int(UInt64(bitPattern: id) % UInt64(Self.stripes))]
        return try stripe.lock.withLock { _ in try body() }
    }
}
