import CPlatform
import Dispatch
import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

// The incremental integrity check (vault format 4, `unlock(…, incremental: true)`, used by the
// mount and one-shot commands): the unlock checks the manifest's tag, the id bucket table, the
// policy and the rollback mark; each bucket's rows are checked at the first read that needs them,
// and a background pass checks the rest; the name lists' bucket table (format 6: its own
// accumulator in the manifest) at the first listing, and by the background pass.
// docs/security.md, "Mounting" and "The name lists' accumulator (vault format 6)", says why this
// is as safe as the full check.

/// What this unlock has verified. Guarded by the keychain's `Mutex<State>`.
struct IntegrityProgress {
    /// Every bucket is verified: the full check ran at unlock, or the background pass finished.
    var complete = false
    /// Buckets verified one by one since the unlock. This process's own commits keep them valid:
    /// each commit moves a bucket's stored value and the authenticated top together.
    var verified: Set<Int64> = []
    /// The first failure found: from then on every read of the vault fails with it.
    var failure: String?
    /// The store's change stamp at which the bucket table last matched the authenticated top:
    /// while nothing has committed since, the table is the one verified, and a bucket's check
    /// skips it (folding every bucket and every name list for each of a vault's buckets made a
    /// one-shot search of 100,000 items take 49 s).
    var tableVerifiedAt: [Int64]?
    /// The same for the name lists' bucket table (format 6; one keyed hash per directory, so a
    /// listing folds it once per state of the vault, not once per listing).
    var namesVerifiedAt: [Int64]?
    /// The background pass of this unlock, while it runs.
    var pass: BackgroundPass?
    /// Told (once) about the failure, for the face's log.
    var observer: (@Sendable (String) -> Void)?
    /// Whether an incremental unlock starts the background pass (a one-shot command does not:
    /// it ends long before, and the pass only competed with its one read).
    var backgroundPassEnabled = true
    /// Time spent since the unlock proving missing items absent from name lists
    /// (`provenAbsentByNameList`); past its budget, "not found" verifies every bucket instead.
    var absenceProofs: Duration = .zero
    /// What those proofs kept of the chunks they opened, per directory and caller's groups
    /// (Keychain+AbsenceProof.swift); dropped when every bucket is verified.
    var absenceChunks: [String: AbsenceChunks] = [:]
}

/// A background pass that readers of a whole class wait for.
final class BackgroundPass: @unchecked Sendable {
    // @unchecked: DispatchGroup is thread-safe; nothing else is stored.
    private let group = DispatchGroup()

    init() { group.enter() }
    func finish() { group.leave() }
    func wait() { group.wait() }
}

extension Keychain {
    /// `observer` is told (on whichever thread finds it) the first integrity failure the
    /// incremental check finds: bucket id ranges and what differs, never anything read from a row.
    public func onIntegrityFailure(_ observer: @escaping @Sendable (String) -> Void) {
        state.withLock { $0.integrity.observer = observer }
    }

    /// Whether every bucket has been verified since the unlock (for tests and the log).
    public var integrityCheckComplete: Bool { state.withLock { $0.integrity.complete } }

    /// An incremental unlock after this starts no background pass: each read still verifies the
    /// buckets it needs, and an answer that needs every row verifies them all (a one-shot
    /// command: the CLI and the helpers when no service runs).
    public func withoutBackgroundIntegrityPass() -> Keychain {
        state.withLock { $0.integrity.backgroundPassEnabled = false }
        return self
    }

    /// Waits for the background pass, then says how it ended: nil when every bucket verified,
    /// else the failure every read now gets.
    public func waitForIntegrityCheck() -> String? {
        let pass = state.withLock { $0.integrity.pass }
        pass?.wait()
        return state.withLock { $0.integrity.failure }
    }

    /// Resets the progress at unlock: all verified (the full check passed), or nothing yet and a
    /// background pass started.
    func startIntegrityProgress(complete: Bool) {
        let pass = complete || !state.withLock({ $0.integrity.backgroundPassEnabled }) ? nil : BackgroundPass()
        state.withLock {
            $0.integrity.complete = complete
            $0.integrity.verified = []
            $0.integrity.failure = nil
            $0.integrity.tableVerifiedAt = nil
            $0.integrity.namesVerifiedAt = nil
            $0.integrity.absenceProofs = .zero
            $0.integrity.absenceChunks = [:]
            $0.integrity.pass = pass
        }
        guard let pass else { return }
        Threads.detach { [self] in
            // Behind the requests: each read verifies its own bucket at its own priority, and a
            // reader that needs every bucket verifies the rest itself (requireEveryBucketVerified),
            // so this pass only uses what the mount leaves idle (niceness 10 for this thread; a
            // pass at full weight delayed the first requests after a mount on a busy CPU).
            _ = kcfs_set_thread_niceness(10)
            defer {
                state.withLock { if $0.integrity.pass === pass { $0.integrity.pass = nil } }
                pass.finish()
            }
            // Its own connection to the vault, closed when it ends: a snapshot this thread holds
            // while it tallies a bucket never makes a request wait for the reading connection
            // (at niceness 10 on a busy CPU, holding it made the first listing after a mount
            // wait tens of milliseconds). The same checks, on the same file.
            let reader = (store as? VaultStore).flatMap { try? VaultStore.open(at: $0.path) }
            do {
                try verifyEveryBucket(on: reader)
                try verifyNameTable(on: reader)
            } catch {
                // Not a mismatch (a decode failure is recorded where it is found): the disk or a
                // lock. Readers that need every bucket run the pass again themselves.
                if (error as? KeychainError)?.status != .decode {
                    state.withLock { $0.integrity.observer }?("background integrity check stopped: \(error)")
                }
            }
        }
    }

    /// Before rows with these ids are served (a read by id or by primary key): each one's bucket
    /// is verified, here, if it has not been yet. Throws errSecDecode if any bucket of the vault
    /// has failed.
    func requireVerified(ids: [Int64]) throws {
        if ids.count == 1 { return try requireVerified(id: ids[0]) }
        for bucket in Set(ids.map(ManifestBuckets.bucket(of:))) { try requireVerified(bucket: bucket) }
    }

    /// The same for one id (every read by id: the hot path), with no array or set of buckets.
    func requireVerified(id: Int64) throws { try requireVerified(bucket: ManifestBuckets.bucket(of: id)) }

    private func requireVerified(bucket: Int64) throws {
        let known = try state.withLock { s -> Bool in
            if let failure = s.integrity.failure { throw KeychainError(.decode, failure) }
            return s.integrity.complete || s.integrity.verified.contains(bucket)
        }
        if !known { try verifyBucket(bucket) }
    }

    /// Before an answer that depends on every row (a listing, a search, "no such item"): verifies
    /// every bucket not yet verified, here, beside the background pass (which runs at a low
    /// priority; the two skip what the other has done). Throws errSecDecode if any bucket has failed.
    func requireEveryBucketVerified() throws {
        let done = try state.withLock { s in
            if let failure = s.integrity.failure { throw KeychainError(.decode, failure) }
            return s.integrity.complete
        }
        if done { return }
        try verifyEveryBucket()
    }

    /// Verifies every bucket not yet verified, from bucket 0 to the last one that holds a row, an
    /// index row or a stored bucket, each in its own snapshot (readers are never held up for more
    /// than one bucket's check).
    /// With `until`, stops (the check not complete) once a bucket's check ends past that time;
    /// at least one bucket not yet verified is verified.
    func verifyEveryBucket(on reader: (any ItemStore)? = nil, until deadline: ContinuousClock.Instant? = nil)
        throws
    {
        let last = try storeCall {
            try (reader ?? store).read { vault in
                max(try vault.highestStoredID(), try vault.manifestBuckets().keys.max() ?? 0)
            }
        }
        for bucket in 0...ManifestBuckets.bucket(of: last) {
            let known = try state.withLock { s -> Bool in
                if let failure = s.integrity.failure { throw KeychainError(.decode, failure) }
                return s.integrity.complete || s.integrity.verified.contains(bucket)
            }
            if !known {
                try verifyBucket(bucket, on: reader)
                if let deadline, ContinuousClock.now >= deadline { return }
            }
        }
        state.withLock {
            $0.integrity.complete = true
            $0.integrity.absenceChunks = [:]
        }
    }

    /// The name lists' bucket table against its authenticated accumulator (format 6), as a
    /// listing checks it: the background pass's last step, so a mount finds a tampered table
    /// even if nothing is listed. A mismatch is recorded as the vault's failure.
    private func verifyNameTable(on reader: (any ItemStore)? = nil) throws {
        do {
            try readVerifyingTable(keys: try currentKeys(), names: true, on: reader) { _, _, _ in }
        } catch let e as KeychainError where e.status == .decode {
            recordFailure(e)
            throw e
        }
    }

    /// Records the vault's first integrity failure and tells the observer.
    private func recordFailure(_ e: KeychainError) {
        let observer = state.withLock { s -> (@Sendable (String) -> Void)? in
            guard s.integrity.failure == nil else { return nil }
            s.integrity.failure = e.message
            return s.integrity.observer
        }
        observer?(e.message + "; every read of this vault now fails (EIO)")
    }

    /// One bucket against the authenticated manifest, in one snapshot: the tag, the rollback
    /// mark, the bucket table against the tag's top accumulator, then the bucket's rows and index
    /// rows against its stored value. A mismatch is recorded as the vault's failure.
    private func verifyBucket(_ bucket: Int64, on reader: (any ItemStore)? = nil) throws {
        let keys = try currentKeys()
        do {
            try readVerifyingTable(keys: keys, on: reader) { vault, _, stored in
                let ids = ManifestBuckets.ids(in: bucket)
                let found =
                    try ManifestBuckets.tally(vault, key: keys.manifest.entry, ids: ids)[bucket] ?? ManifestBucket()
                let want = stored[bucket] ?? ManifestBucket()
                guard found != want else { return }
                let what = Manifest.whatDiffers(found: found.count, expected: want.count)
                let damaged = try damagedRows(in: vault, metadataKey: keys.metadata, ids: ids)
                throw KeychainError(
                    .decode,
                    "vault integrity check failed: \(ManifestBuckets.describe(bucket)) do not match the authenticated manifest (\(found.count) rows found, \(want.count) expected): \(what); \(Self.describe(damaged))"
                )
            }
        } catch let e as KeychainError where e.status == .decode {
            recordFailure(e)
            throw e
        }
        state.withLock { _ = $0.integrity.verified.insert(bucket) }
    }

    /// `body` in one read snapshot whose authenticated top (tag, rollback mark) is verified and
    /// whose bucket table matches it (and, `names`, the name lists' bucket table its accumulator:
    /// a listing), with the verified manifest and the stored table.
    ///
    /// The table (every id bucket folded: O(buckets); the name lists' one per directory) is
    /// checked once per state of the vault, not once per snapshot: the store's change stamp read
    /// before and after a snapshot, unchanged, is that snapshot's (nothing committed in between),
    /// and the stamp at which the table last matched is kept. A snapshot at that stamp skips it;
    /// one that skipped it while a commit slipped in (the stamps differ) runs again, table and all.
    /// (Folding the table for each of a vault's 196 buckets made a one-shot search of 100,000
    /// items take 49 s.)
    ///
    /// `reader`: another store object on the same file (the background pass's own connection).
    /// Its change stamps are not comparable with the vault store's, so such a snapshot never
    /// skips a table and records nothing: every snapshot on it folds the tables it checks.
    func readVerifyingTable<R>(
        keys: Keys, names: Bool = false, on reader: (any ItemStore)? = nil,
        _ body: (any ItemStoreReader, Manifest, [Int64: ManifestBucket]) throws -> R
    ) throws -> R {
        let seen = highestCounterSeen()
        let reading = reader ?? store
        while true {
            let before = reader == nil ? try? store.changeStamp() : nil
            let (verifiedAt, namesAt) = state.withLock { ($0.integrity.tableVerifiedAt, $0.integrity.namesVerifiedAt) }
            let skipTable = before != nil && before == verifiedAt
            let skipNames = !names || (before != nil && before == namesAt)
            let result = try storeCall {
                try reading.read { vault -> R in
                    let authenticated = try AuthenticatedState.read(from: vault)
                    let expected = try authenticated.verified(try vault.meta("manifest"), keys: keys.manifest)
                    try refuseRollback(expected.counter, seen: seen, accepting: false)
                    let stored = try ManifestBuckets.stored(vault)
                    if !(skipTable && skipNames),
                        let problem = try Manifest.bucketTableMismatch(
                            vault, stored, expected: expected, key: keys.manifest.entry, names: !skipNames)
                    {
                        throw KeychainError(.decode, "vault integrity check failed: \(problem)")
                    }
                    return try body(vault, expected, stored)
                }
            }
            let after = reader == nil ? try? store.changeStamp() : nil
            if (skipTable || (names && skipNames)) && before != after {
                state.withLock {
                    if $0.integrity.tableVerifiedAt == verifiedAt { $0.integrity.tableVerifiedAt = nil }
                    if $0.integrity.namesVerifiedAt == namesAt { $0.integrity.namesVerifiedAt = nil }
                }
                continue
            }
            if let before, before == after {
                state.withLock {
                    $0.integrity.tableVerifiedAt = before
                    if names { $0.integrity.namesVerifiedAt = before }
                }
            }
            return result
        }
    }
}
