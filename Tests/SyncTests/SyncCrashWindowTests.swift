import Foundation
import KeychainService
import KeychainSync
import TestSupport
import Testing

@testable import Keychain

/// The window the kill -9 test of SyncServiceTests lands in: the server stored an upload, the
/// process died before it marked the outbox row done (`uploaded`). The restarted process seals
/// the same change again (a new item key, so other bytes: the server calls it a conflict),
/// pulls its own version back, and must take it as its own, not as another device's change
/// that beat it: no kept "conflict", no rewrite of the item.
@Suite("Sync: an upload stored but not marked done (a crash in between)", .serialized)
struct SyncCrashWindowTests {
    @Test("the next round takes the stored version as this device's own: outbox empty, no conflict kept")
    func ownUploadComingBack() throws {
        try withSyncServer { pg, dir in
            let a = try SyncDevice("a", root: dir, server: pg.conninfo)
            _ = try a.startGroup()
            try a.add("crash.example", "ann", "v1")
            let server = try SyncServer(conninfo: pg.conninfo)
            let config = try #require(try a.keychain.syncConfiguration())
            let group = config.groupID
            // The server stores the upload; the process "dies" before `uploaded`.
            let uploads = try a.keychain.pendingUploads()
            try #require(uploads.count == 1)
            let outcomes = try server.push(
                group: group,
                uploads.map {
                    PushRequest(
                        recordID: $0.recordID, expectedVersion: $0.expectedVersion, version: $0.version,
                        deleted: $0.deleted, blob: $0.blob)
                })
            guard case .stored = outcomes.first else {
                Issue.record("not stored: \(outcomes)")
                return
            }
            let before = try a.keychain.copyMatching(a.query("crash.example", "ann")).first
            let report = try a.sync()
            #expect(try a.keychain.syncOutboxCount() == 0)
            #expect(report.kept == 0, "a version kept as a conflict: \(report)")
            #expect(try a.keychain.syncConflicts().isEmpty, "sync conflicts lists this device's own change")
            let after = try a.keychain.copyMatching(a.query("crash.example", "ann")).first
            #expect(after?.data == before?.data && after?.attributes == before?.attributes, "the item was rewritten")
            #expect(try pg.psql("SELECT count(*) FROM kcfs_sync.records").hasPrefix("1"))
        }
    }
}
