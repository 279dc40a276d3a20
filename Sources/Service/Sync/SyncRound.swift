import FoundationEssentials
import Glibc
import Keychain
import KeychainSync
import Synchronization

/// The server's group went back in time (its sequence is behind this device's cursor): the
/// round stops before it pulls or sends anything, and the engine audits it (`sync-refuse`).
public struct SyncRollback: Error, CustomStringConvertible {
    public let reason: String
    public var description: String { reason }
}

/// What one round of sync did.
public struct SyncRoundReport: Sendable, Equatable {
    public var applied = 0
    public var kept = 0
    public var uploaded = 0
    public var refused: [String] = []
}

/// One round of sync against the group's server (the engine's, `sync now`'s, and the first
/// sync of `setup` and `join`): pull every record after the cursor, a page at a time, each
/// page applied with the cursor in one transaction; then upload the outbox. An upload that
/// meets a newer version on the server pulls and merges first and tries again (each round
/// either stores or learns a newer version, so a few suffice). The outbox is sent whole, 500
/// records a push: only the pushes that stored nothing new or met a conflict are counted
/// against those few (a first sync of 10,000 items is 20 pushes).
public struct SyncRound {
    let keychain: Keychain
    let server: SyncServer
    /// Told the running count of records pulled (a first sync's progress line).
    var progress: ((Int) -> Void)?

    public init(keychain: Keychain, server: SyncServer, progress: ((Int) -> Void)? = nil) {
        self.keychain = keychain
        self.server = server
        self.progress = progress
    }

    @discardableResult
    public func run() throws -> SyncRoundReport {
        guard let config = try keychain.syncConfiguration() else {
            throw KeychainError(.itemNotFound, "this vault is in no sync group")
        }
        let group = config.groupID
        var report = SyncRoundReport()
        // The group's sequence never goes back: a server restored from an older copy (or
        // replaying one) would hand this device an old state as the current one.
        let cursor = try keychain.syncCursor()
        let (last, purged) = try server.groupState(group: group)
        if last < cursor {
            throw SyncRollback(
                reason:
                    "the server's sequence for this group is \(last), behind the \(cursor) this device has applied: it was restored from an older copy or is replaying one; nothing was pulled or sent"
            )
        }
        // Offline longer than the server keeps tombstones: some deletions left no trace to
        // pull. Pull the whole group again and delete what the server no longer has.
        if cursor < purged {
            var present = Set<[UInt8]>()
            try pullAll(group: group, from: 0, into: &report) { present.insert($0.recordID) }
            report.applied += try keychain.reconcile(present: present)
        }
        var retries = 0
        // Nothing after the cursor (the usual round a local change starts): no pull to ask for.
        var pullFirst = last > cursor
        // The cursor the server's list of devices holds for this device after this round's pushes.
        var cursorTold: Int64?
        while retries < 8 {
            if pullFirst { try pullAll(group: group, into: &report) }
            pullFirst = true
            let uploads = try keychain.pendingUploads()
            if uploads.isEmpty { break }
            let from = try keychain.syncCursor()
            let outcomes = try server.push(
                group: group,
                uploads.map {
                    PushRequest(
                        recordID: $0.recordID, expectedVersion: $0.expectedVersion, version: $0.version,
                        deleted: $0.deleted, blob: $0.blob)
                }, device: (config.deviceID, from))
            var stored: [SyncUpload] = []
            var conflicted = false
            for (upload, outcome) in zip(uploads, outcomes) {
                switch outcome {
                case .stored, .alreadyStored: stored.append(upload)
                case .conflict: conflicted = true
                }
            }
            // Numbered right after the cursor with no other device's version between: the
            // cursor moves past this device's own versions with their marks (the push told the
            // server's list of devices the same).
            let end = PushOutcome.contiguousEnd(after: from, outcomes)
            try keychain.uploaded(stored, cursor: end.map { (from, $0) })
            cursorTold = end ?? from
            report.uploaded += stored.count
            if !conflicted && uploads.count < 500 { break }
            if conflicted || stored.isEmpty { retries += 1 }
        }
        // The server's list of devices (`sync status`): a push writes it in its own transaction;
        // otherwise it is written when this device's cursor moved, and once per process, not at
        // every round (a write and a WAL fsync on the server for nothing new).
        let now = try keychain.syncCursor()
        let firstTouch = Self.touched.withLock { $0.insert(config.deviceID).inserted }
        if (firstTouch && cursorTold == nil) || now != (cursorTold ?? cursor) {
            try server.touchDevice(group: group, device: config.deviceID, cursor: now)
        }
        try purgeTombstones(group: group)
        return report
    }

    /// How long the server keeps a tombstone (docs/sync.md): a device offline longer does a
    /// full reconciliation.
    public static let tombstoneWindow: Duration = .seconds(90 * 24 * 3600)
    private static let lastPurge = Mutex<Date?>(nil)
    private static let touched = Mutex<Set<[UInt8]>>([])

    /// At most once a day per process: tombstones older than the window are dropped.
    private func purgeTombstones(group: [UInt8]) throws {
        let due = Self.lastPurge.withLock { last -> Bool in
            guard last.map({ Date().timeIntervalSince($0) > 24 * 3600 }) ?? true else { return false }
            last = Date()
            return true
        }
        if due { try server.purgeTombstones(group: group, olderThan: Self.tombstoneWindow) }
    }

    private func pullAll(
        group: [UInt8], from start: Int64? = nil, into report: inout SyncRoundReport,
        seen: (ServerRecord) -> Void = { _ in }
    ) throws {
        var pulled = 0
        // Where the next page starts; the cursor stored with each page never goes back (a full
        // reconciliation reads from 0 again).
        var position = try start ?? keychain.syncCursor()
        while true {
            let page = try server.pull(group: group, after: position, limit: 1_000)
            page.forEach(seen)
            guard let last = page.last else { return }
            position = last.seq
            let cursor = max(last.seq, try keychain.syncCursor())
            let applied = try keychain.applyPulled(
                page.map {
                    SyncIncoming(
                        recordID: $0.recordID, version: $0.version, seq: $0.seq, deleted: $0.deleted, blob: $0.blob)
                }, cursor: cursor)
            report.applied += applied.applied
            report.kept += applied.kept
            report.refused += applied.refused
            pulled += page.count
            progress?(pulled)
        }
    }
}
