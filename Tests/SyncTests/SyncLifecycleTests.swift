import Foundation
import KeychainCrypto
import KeychainService
import KeychainSync
import TestSupport
import Testing

@testable import Keychain

@Suite("Sync across locks, rotations, purged tombstones and leaving", .serialized)
struct SyncLifecycleTests {
    @Test("a delete made while the vault is locked is journaled and reaches the other device after the unlock")
    func lockedChangeIsJournaled() throws {
        try withSyncServer { pg, dir in
            let a = try SyncDevice("a", root: dir, server: pg.conninfo)
            let b = try SyncDevice("b", root: dir, server: pg.conninfo)
            try a.add("always", "x", "v1", extra: [Schema.accessible: .accessibility(.afterFirstUnlock)])
            let (group, root) = try a.startGroup()
            try a.sync()
            try b.join(group, root)
            try b.sync()
            a.keychain.lock()
            #expect(!a.keychain.syncReady)
            try a.delete("always", "x")
            #expect(try a.keychain.syncOutboxCount() == 1)
            // Locked: nothing is sealed or sent.
            #expect(try a.keychain.pendingUploads().isEmpty)
            try a.keychain.unlock(passphrase: try SyncDevice.secret(SyncDevice.passphrase))
            #expect(a.keychain.syncReady)
            try a.sync()
            try b.sync()
            #expect(try b.secret("always", "x") == nil)
        }
    }

    @Test("a master-key rotation keeps the group: the root is wrapped again and sync goes on")
    func rotationKeepsGroup() throws {
        try withSyncServer { pg, dir in
            let a = try SyncDevice("a", root: dir, server: pg.conninfo)
            let b = try SyncDevice("b", root: dir, server: pg.conninfo)
            let (group, root) = try a.startGroup()
            try b.join(group, root)
            let pass = try SyncDevice.secret(SyncDevice.passphrase)
            try a.keychain.rotateMasterKey(old: pass, new: pass)
            try a.add("after", "rotation", "v1")
            try a.sync()
            try b.sync()
            #expect(try b.secret("after", "rotation") == "v1")
            // Opened afresh, the rotated vault still holds the group's key.
            let again = try Keychain.open(at: a.dir + "/vault", deviceKeyPath: a.dir + "/device.key")
            try again.unlock(passphrase: pass)
            #expect(again.syncReady)
            #expect(try again.syncRecoveryCode(passphrase: pass) == RecoveryCode.text(group: group, root: root))
        }
    }

    @Test("a device offline past the tombstone window deletes what was deleted meanwhile and resurrects nothing")
    func purgedTombstonesReconcile() throws {
        try withSyncServer { pg, dir in
            let a = try SyncDevice("a", root: dir, server: pg.conninfo)
            let b = try SyncDevice("b", root: dir, server: pg.conninfo)
            try a.add("kept", "x", "v1")
            try a.add("doomed", "x", "v1")
            let (group, root) = try a.startGroup()
            try a.sync()
            try b.join(group, root)
            try b.sync()
            #expect(try b.secret("doomed", "x") == "v1")
            // B is offline; A deletes an item, and its tombstone is purged from the server.
            try a.delete("doomed", "x")
            try a.sync()
            try SyncServer(conninfo: pg.conninfo).purgeTombstones(group: group.bytes, olderThan: .seconds(0))
            // B changed something of its own meanwhile: kept and uploaded.
            try b.add("new-on-b", "x", "v1")
            try b.sync()
            try a.sync()
            #expect(try b.secret("doomed", "x") == nil)
            #expect(try a.secret("doomed", "x") == nil)
            #expect(try b.secret("kept", "x") == "v1" && a.secret("new-on-b", "x") == "v1")
        }
    }

    @Test("leaving keeps the items and stops syncing; the vault can join again")
    func leaveAndRejoin() throws {
        try withSyncServer { pg, dir in
            let a = try SyncDevice("a", root: dir, server: pg.conninfo)
            let b = try SyncDevice("b", root: dir, server: pg.conninfo)
            let (group, root) = try a.startGroup()
            try b.join(group, root)
            try a.add("one", "x", "v1")
            try a.sync()
            try b.sync()
            try b.keychain.leaveSyncGroup(passphrase: try SyncDevice.secret(SyncDevice.passphrase))
            #expect(try b.keychain.syncConfiguration() == nil)
            #expect(try b.secret("one", "x") == "v1")
            try b.update("one", "x", "changed after leaving")
            try a.sync()
            #expect(try a.secret("one", "x") == "v1")
            expectThrows { try b.sync() }
            try b.join(group, root)
            try b.sync()
            try a.sync()
            #expect(try a.secret("one", "x") == "changed after leaving")
        }
    }
}

extension SyncLifecycleTests {
    @Test("rotate: a new group under a new key, the old one gone from the server; a removed device reads nothing new")
    func rotate() throws {
        try withSyncServer { pg, dir in
            let a = try SyncDevice("a", root: dir, server: pg.conninfo)
            let removed = try SyncDevice("removed", root: dir, server: pg.conninfo)
            try a.add("one", "x", "v1")
            let (old, oldRoot) = try a.startGroup()
            try a.sync()
            try removed.join(old, oldRoot)
            try removed.sync()
            #expect(try removed.secret("one", "x") == "v1")
            let pass = try SyncDevice.secret(SyncDevice.passphrase)
            let (new, _) = try SyncGroupSetup.rotate(keychain: a.keychain, passphrase: pass)
            #expect(new != old)
            try a.update("one", "x", "after rotation")
            try a.sync()
            let server = try SyncServer(conninfo: pg.conninfo)
            #expect(try !server.groupExists(old.bytes) && server.groupExists(new.bytes))
            // The removed device's sync fails (its group is gone) and it keeps what it had.
            expectThrows { try removed.sync() }
            #expect(try removed.secret("one", "x") == "v1")
            // Its old keys open none of the new group's records.
            let oldKeys = try SyncKeys(group: new, root: oldRoot)
            for record in try server.pull(group: new.bytes, after: 0, limit: 100) {
                let header = SyncRecordHeader(
                    group: new, recordID: record.recordID, version: record.version,
                    clock: try SyncRecord.clock(of: record.blob), deleted: record.deleted)
                #expect(throws: SyncCryptoError.doesNotAuthenticate) {
                    try SyncRecord.open(record.blob, header: header, keys: oldKeys)
                }
            }
            // A device joined again with the new key has everything.
            let b = try SyncDevice("b", root: dir, server: pg.conninfo)
            let (group, root) = try RecoveryCode.parse(try a.keychain.syncRecoveryCode(passphrase: pass))
            try b.join(group, root)
            try b.sync()
            #expect(try b.secret("one", "x") == "after rotation")
        }
    }
}

extension SyncLifecycleTests {
    @Test(
        "an upload whose mark was lost (a power cut after the push) comes back as this device's own change, no conflict"
    )
    func lostUploadMark() throws {
        try withSyncServer { pg, dir in
            let a = try SyncDevice("a", root: dir, server: pg.conninfo)
            let (group, _) = try a.startGroup()
            try a.add("one", "x", "v1")
            // Pushed, but the transaction that marks it uploaded never happened.
            let uploads = try a.keychain.pendingUploads()
            #expect(uploads.count == 1)
            let outcomes = try SyncServer(conninfo: pg.conninfo).push(
                group: group.bytes,
                uploads.map {
                    PushRequest(
                        recordID: $0.recordID, expectedVersion: $0.expectedVersion, version: $0.version,
                        deleted: $0.deleted, blob: $0.blob)
                })
            #expect(outcomes.count == 1)
            let report = try a.sync()
            #expect(report.kept == 0 && report.refused.isEmpty, "\(report)")
            #expect(try a.keychain.syncOutboxCount() == 0)
            #expect(try a.keychain.syncConflicts().isEmpty)
            #expect(try a.secret("one", "x") == "v1")
        }
    }
}

extension SyncLifecycleTests {
    @Test("a process that holds the vault journals its next change under the group another process just joined")
    func otherProcessJoins() throws {
        try withSyncServer { pg, dir in
            let a = try SyncDevice("a", root: dir, server: pg.conninfo)
            let b = try SyncDevice("b", root: dir, server: pg.conninfo)
            let (group, root) = try b.startGroup()
            // A second holder of A's vault (the service beside the CLI), unlocked before the join.
            let service = try Keychain.open(at: a.dir + "/vault", deviceKeyPath: a.dir + "/device.key")
            try service.unlock(passphrase: try SyncDevice.secret(SyncDevice.passphrase))
            try a.join(group, root)
            // Its very next commit, before anything told it of the join.
            try service.add(
                .genericPassword,
                [
                    Schema.service: .string("from"), Schema.account: .string("service"),
                    Schema.synchronizable: .bool(true),
                ], data: Array("v1".utf8))
            try a.sync()
            try b.sync()
            #expect(try b.secret("from", "service") == "v1")
        }
    }
}

extension SyncLifecycleTests {
    @Test("a round's own uploads move the cursor past them: the round their NOTIFY starts pulls nothing")
    func cursorMovesPastOwnUploads() throws {
        try withSyncServer { pg, dir in
            let a = try SyncDevice("a", root: dir, server: pg.conninfo)
            let b = try SyncDevice("b", root: dir, server: pg.conninfo)
            let (group, root) = try a.startGroup()
            try b.join(group, root)
            for i in 0..<3 { try a.add("item\(i)", "x", "v1") }
            let server = try SyncServer(conninfo: pg.conninfo)
            #expect(try a.sync().uploaded == 3)
            #expect(try a.keychain.syncCursor() == server.lastSeq(group: group.bytes))
            let again = try a.sync()
            #expect(again.applied == 0 && again.uploaded == 0)
            // Another device's version in between: the cursor waits for the pull that brings it.
            try b.add("from-b", "x", "v1")
            try b.sync()
            try a.update("item0", "x", "v2")
            try a.sync()
            #expect(try a.secret("from-b", "x") == "v1")
            #expect(try a.keychain.syncCursor() == server.lastSeq(group: group.bytes))
            try b.sync()
            #expect(try b.secret("item0", "x") == "v2")
        }
    }
}

func expectThrows(_ body: () throws -> Void, sourceLocation: SourceLocation = #_sourceLocation) {
    do {
        try body()
        Issue.record("expected an error", sourceLocation: sourceLocation)
    } catch {}
}
