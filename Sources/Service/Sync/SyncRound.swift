import Foundation
import Keychain
import KeychainSync

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
        guard let config = try keychain.syncConfiguration(), let group = Self.bytes(config.group) else {
            throw KeychainError(.itemNotFound, "this vault is in no sync group")
        }
        var report = SyncRoundReport()
        var retries = 0
        while retries < 8 {
            try pullAll(group: group, into: &report)
            let uploads = try keychain.pendingUploads()
            if uploads.isEmpty { break }
            let outcomes = try server.push(
                group: group,
                uploads.map {
                    PushRequest(
                        recordID: $0.recordID, expectedVersion: $0.expectedVersion, version: $0.version,
                        deleted: $0.deleted, blob: $0.blob)
                })
            var stored: [SyncUpload] = []
            var conflicted = false
            for (upload, outcome) in zip(uploads, outcomes) {
                switch outcome {
                case .stored, .alreadyStored: stored.append(upload)
                case .conflict: conflicted = true
                }
            }
            try keychain.uploaded(stored)
            report.uploaded += stored.count
            if !conflicted && uploads.count < 500 { break }
            if conflicted || stored.isEmpty { retries += 1 }
        }
        if let device = Self.bytes(config.device) {
            try server.touchDevice(group: group, device: device, cursor: try keychain.syncCursor())
        }
        return report
    }

    private func pullAll(group: [UInt8], into report: inout SyncRoundReport) throws {
        var pulled = 0
        while true {
            let cursor = try keychain.syncCursor()
            let page = try server.pull(group: group, after: cursor, limit: 1_000)
            guard let last = page.last else { return }
            let applied = try keychain.applyPulled(
                page.map {
                    SyncIncoming(
                        recordID: $0.recordID, version: $0.version, seq: $0.seq, deleted: $0.deleted, blob: $0.blob)
                }, cursor: last.seq)
            report.applied += applied.applied
            report.kept += applied.kept
            report.refused += applied.refused
            pulled += page.count
            progress?(pulled)
        }
    }

    /// Hex to bytes; nil when it is not hex.
    static func bytes(_ hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(digits.count / 2)
        for i in stride(from: 0, to: digits.count, by: 2) {
            guard let byte = UInt8(String(decoding: digits[i..<(i + 2)], as: UTF8.self), radix: 16) else {
                return nil
            }
            out.append(byte)
        }
        return out
    }
}
