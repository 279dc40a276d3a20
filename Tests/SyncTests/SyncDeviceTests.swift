import Foundation
import KeychainCrypto
import KeychainService
import KeychainSync
import TestSupport
import Testing

@testable import Keychain

/// One device of a test's sync group: its own vault, device key and keychain, synced through
/// the real `SyncRound` against the test's real PostgreSQL.
final class SyncDevice: @unchecked Sendable {
    let dir: String
    let keychain: Keychain
    let server: String
    static let passphrase = "sync test passphrase"

    init(_ name: String, root: String, server: String) throws {
        dir = root + "/" + name
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        keychain = try Keychain.create(
            at: dir + "/vault", passphrase: try Self.secret(Self.passphrase), parameters: .interactive,
            deviceKeyPath: dir + "/device.key")
        try keychain.unlock(passphrase: try Self.secret(Self.passphrase))
        self.server = server
    }

    static func secret(_ text: String) throws -> SecureBytes {
        try SecureBytes(count: text.utf8.count) { $0.copyBytes(from: Array(text.utf8)) }
    }

    /// Starts a group with this device (as `sync setup` does).
    func startGroup() throws -> (SyncGroupID, SecureBytes) {
        let connection = try SyncServer(conninfo: server)
        try connection.ensureSchema()
        let group = SyncGroupID.random()
        try connection.createGroup(group.bytes)
        let root = try SyncKeys.newRoot()
        try keychain.joinSyncGroup(
            group: group, root: root, server: server, passphrase: try Self.secret(Self.passphrase))
        return (group, root)
    }

    func join(_ group: SyncGroupID, _ root: SecureBytes) throws {
        try keychain.joinSyncGroup(
            group: group, root: root, server: server, passphrase: try Self.secret(Self.passphrase))
    }

    @discardableResult
    func sync() throws -> SyncRoundReport {
        try SyncRound(keychain: keychain, server: try SyncServer(conninfo: server)).run()
    }

    func add(_ service: String, _ account: String, _ secret: String, sync: Bool = true, extra: Attributes = [:])
        throws
    {
        var attributes: Attributes = [
            Schema.service: .string(service), Schema.account: .string(account), Schema.synchronizable: .bool(sync),
        ]
        for (k, v) in extra { attributes[k] = v }
        try keychain.add(.genericPassword, attributes, data: Array(secret.utf8))
    }

    func query(_ service: String, _ account: String) -> Query {
        Query(
            .genericPassword, [Schema.service: .string(service), Schema.account: .string(account)], returnData: true,
            synchronizableAny: true)
    }

    /// The secret of the item, or nil when there is none.
    func secret(_ service: String, _ account: String) throws -> String? {
        do {
            return try keychain.copyMatching(query(service, account)).first?.data.map {
                String(decoding: $0, as: UTF8.self)
            }
        } catch let e as KeychainError where e.status == .itemNotFound { return nil }
    }

    func update(_ service: String, _ account: String, _ secret: String) throws {
        _ = try keychain.update(
            Query(
                .genericPassword,
                [
                    Schema.service: .string(service), Schema.account: .string(account),
                    Schema.synchronizable: .bool(true),
                ]), attributes: [:], data: Array(secret.utf8))
    }

    func delete(_ service: String, _ account: String) throws {
        _ = try keychain.delete(
            Query(
                .genericPassword,
                [
                    Schema.service: .string(service), Schema.account: .string(account),
                    Schema.synchronizable: .bool(true),
                ]))
    }
}

/// A private PostgreSQL and a directory for a test's devices; both gone at the end.
func withSyncServer(_ body: (PostgresServer, String) throws -> Void) throws {
    try withTempDirectory("keychainfs-test-sync") { dir in
        let server = try PostgresServer()
        defer { server.stop() }
        try body(server, dir)
    }
}

@Suite("Sync between two vaults through a real PostgreSQL", .serialized)
struct SyncDeviceTests {
    @Test("an item added on A is readable on B; an update and a delete follow; non-synchronizable items stay home")
    func addUpdateDelete() throws {
        try withSyncServer { pg, dir in
            let a = try SyncDevice("a", root: dir, server: pg.conninfo)
            let b = try SyncDevice("b", root: dir, server: pg.conninfo)
            try a.add("github.com", "alice", "token-1")
            try a.add("local.only", "me", "stays here", sync: false)
            let (group, root) = try a.startGroup()
            #expect(try a.sync().uploaded == 1)
            try b.join(group, root)
            #expect(try b.sync().applied == 1)
            #expect(try b.secret("github.com", "alice") == "token-1")
            #expect(try b.secret("local.only", "me") == nil)
            try a.update("github.com", "alice", "token-2")
            try a.sync()
            try b.sync()
            #expect(try b.secret("github.com", "alice") == "token-2")
            try b.delete("github.com", "alice")
            try b.sync()
            try a.sync()
            #expect(try a.secret("github.com", "alice") == nil)
            #expect(try a.secret("local.only", "me") == "stays here")
        }
    }

    @Test("the server holds no name, attribute or secret: every column of every table, as bytes and as text")
    func serverSeesCiphertextOnly() throws {
        try withSyncServer { pg, dir in
            let a = try SyncDevice("a", root: dir, server: pg.conninfo)
            try a.add("secret-service-name", "secret-account-name", "secret-value-xyzzy")
            try a.add("device.only", "dora", "device-only-secret", sync: false)
            _ = try a.startGroup()
            try a.sync()
            let dump = try pg.psql(
                "SELECT r::text FROM kcfs_sync.records r UNION ALL SELECT g::text FROM kcfs_sync.groups g UNION ALL SELECT d::text FROM kcfs_sync.devices d"
            )
            #expect(!dump.isEmpty)
            for needle in ["secret-service-name", "secret-account-name", "secret-value-xyzzy", "device.only", "dora"] {
                #expect(!dump.contains(needle), "\(needle)")
                let hex = needle.utf8.map { String(format: "%02x", $0) }.joined()
                #expect(!dump.contains(hex), "\(needle) as hex")
            }
            #expect(try pg.psql("SELECT count(*) FROM kcfs_sync.records").contains("1"))
        }
    }

    @Test("concurrent edits offline: the later clock wins on both devices and the loser is kept")
    func conflictKeepsLoser() throws {
        try withSyncServer { pg, dir in
            let a = try SyncDevice("a", root: dir, server: pg.conninfo)
            let b = try SyncDevice("b", root: dir, server: pg.conninfo)
            try a.add("mail", "me", "v1")
            let (group, root) = try a.startGroup()
            try a.sync()
            try b.join(group, root)
            try b.sync()
            // Both edit without syncing; B's edit is the later one.
            try a.update("mail", "me", "from-a")
            usleep(5_000)
            try b.update("mail", "me", "from-b")
            try a.sync()
            try b.sync()
            try a.sync()
            #expect(try a.secret("mail", "me") == "from-b")
            #expect(try b.secret("mail", "me") == "from-b")
            // B's change won on B, which kept A's; A applied B's and has nothing to keep.
            #expect(try a.keychain.syncConflicts().isEmpty)
            let kept = try b.keychain.syncConflicts()
            #expect(kept.count == 1 && kept.first?.side == "remote", "\(kept)")
            // Restoring the loser makes it the newest change, on both devices.
            try b.keychain.restoreSyncConflict(id: try #require(kept.first).id)
            #expect(try b.keychain.syncConflicts().isEmpty)
            try b.sync()
            try a.sync()
            #expect(try a.secret("mail", "me") == "from-a")
            #expect(try b.secret("mail", "me") == "from-a")
        }
    }

    @Test("delete against edit, in both orders: the later one wins")
    func deleteAgainstEdit() throws {
        try withSyncServer { pg, dir in
            let a = try SyncDevice("a", root: dir, server: pg.conninfo)
            let b = try SyncDevice("b", root: dir, server: pg.conninfo)
            try a.add("one", "x", "v1")
            try a.add("two", "x", "v1")
            let (group, root) = try a.startGroup()
            try a.sync()
            try b.join(group, root)
            try b.sync()
            // one: A edits, then B deletes (later): deleted everywhere.
            try a.update("one", "x", "edited")
            usleep(5_000)
            try b.delete("one", "x")
            // two: A deletes, then B edits (later): edited everywhere.
            try a.delete("two", "x")
            usleep(5_000)
            try b.update("two", "x", "edited")
            try a.sync()
            try b.sync()
            try a.sync()
            #expect(try a.secret("one", "x") == nil && b.secret("one", "x") == nil)
            #expect(try a.secret("two", "x") == "edited" && b.secret("two", "x") == "edited")
        }
    }

    @Test("concurrent creates of one primary key make one row on the server")
    func concurrentCreates() throws {
        try withSyncServer { pg, dir in
            let a = try SyncDevice("a", root: dir, server: pg.conninfo)
            let b = try SyncDevice("b", root: dir, server: pg.conninfo)
            let (group, root) = try a.startGroup()
            try b.join(group, root)
            try a.add("shared", "me", "from-a")
            usleep(5_000)
            try b.add("shared", "me", "from-b")
            try a.sync()
            try b.sync()
            try a.sync()
            #expect(try pg.psql("SELECT count(*) FROM kcfs_sync.records").contains("1"))
            #expect(try a.secret("shared", "me") == "from-b" && b.secret("shared", "me") == "from-b")
        }
    }

    @Test("a tampered blob, a blob swapped between records and a replayed old version are refused; the rest syncs")
    func serverTampering() throws {
        try withSyncServer { pg, dir in
            let a = try SyncDevice("a", root: dir, server: pg.conninfo)
            let b = try SyncDevice("b", root: dir, server: pg.conninfo)
            try a.add("one", "x", "v1")
            try a.add("two", "x", "v1")
            let (group, root) = try a.startGroup()
            try a.sync()
            try b.join(group, root)
            try b.sync()
            let old = try pg.psql(
                "SELECT encode(blob, 'hex') FROM kcfs_sync.records ORDER BY seq LIMIT 1"
            ).trimmingCharacters(in: .whitespacesAndNewlines)
            try a.update("one", "x", "v2")
            try a.update("two", "x", "v2")
            try a.sync()
            // Tamper: flip a byte of the newest blob of one record; swap: give the other
            // record's blob to nothing new, but replay the old v1 blob as version 3 of record 1.
            _ = try pg.psql(
                "UPDATE kcfs_sync.records SET blob = overlay(blob placing '\\xff'::bytea from 40 for 1) WHERE seq = (SELECT max(seq) FROM kcfs_sync.records)"
            )
            let report = try b.sync()
            #expect(report.refused.count == 1, "\(report.refused)")
            #expect(report.refused.first?.contains("does not authenticate") == true)
            let values = [try b.secret("one", "x"), try b.secret("two", "x")]
            #expect(values.contains("v2") && values.contains("v1"), "the untampered record synced: \(values)")
            // A replayed old version under a newer version number does not open either.
            _ = try pg.psql(
                "UPDATE kcfs_sync.records SET blob = decode('\(old)', 'hex'), version = version + 1, seq = seq + 100 WHERE seq = (SELECT min(seq) FROM kcfs_sync.records)"
            )
            _ = try pg.psql("UPDATE kcfs_sync.groups SET seq = seq + 100")
            let replay = try b.sync()
            #expect(replay.refused.count == 1, "\(replay.refused)")
        }
    }

    @Test("a server whose group went back in time (restored from an older copy) is refused before anything is pulled")
    func serverRollback() throws {
        try withSyncServer { pg, dir in
            let a = try SyncDevice("a", root: dir, server: pg.conninfo)
            let b = try SyncDevice("b", root: dir, server: pg.conninfo)
            try a.add("one", "x", "v1")
            let (group, root) = try a.startGroup()
            try a.sync()
            try b.join(group, root)
            try b.sync()
            try a.update("one", "x", "v2")
            try a.sync()
            try b.sync()
            // The server is put back to its state before v2: the newest row and the counter.
            _ = try pg.psql(
                "DELETE FROM kcfs_sync.records WHERE seq = (SELECT max(seq) FROM kcfs_sync.records); UPDATE kcfs_sync.groups SET seq = seq - 1"
            )
            #expect(throws: SyncRollback.self) { try b.sync() }
            #expect(try b.secret("one", "x") == "v2")
        }
    }

    @Test("a device whose clock is an hour behind still wins with an edit made after it saw the other's")
    func skewedClock() throws {
        try withSyncServer { pg, dir in
            let a = try SyncDevice("a", root: dir, server: pg.conninfo)
            let b = try SyncDevice("b", root: dir, server: pg.conninfo)
            try a.add("skew", "x", "v1")
            let (group, root) = try a.startGroup()
            try a.sync()
            try b.join(group, root)
            // A's clock is an hour ahead: its edits carry a wall time an hour in the future.
            a.keychain.sync.skewForTests(milliseconds: 3_600_000)
            try a.update("skew", "x", "from-a-ahead")
            try a.sync()
            try b.sync()
            #expect(try b.secret("skew", "x") == "from-a-ahead")
            // B saw A's time: its next edit is later by the clock, though its wall clock is behind.
            try b.update("skew", "x", "from-b-after")
            try b.sync()
            try a.sync()
            #expect(try a.secret("skew", "x") == "from-b-after")
            #expect(try b.keychain.syncConflicts().isEmpty && a.keychain.syncConflicts().isEmpty)
        }
    }
}
