import Foundation
import KeychainSync
import Testing
import TestSupport

/// A multi-user server set up by its administrator with `SyncServer.adminSQL`: device roles see
/// only their own groups, and the server holds nothing but the bytes the devices pushed.
@Suite("SyncServer on a multi-user server")
struct MultiUserTests {
    /// The server, adminSQL applied, and two login roles in kcfs_sync_device.
    private func multiUserServer() throws -> PostgresServer {
        let server = try PostgresServer()
        try server.psql(SyncServer.adminSQL)
        try server.createRole("alice", password: "alice-pw", memberOf: ["kcfs_sync_device"])
        try server.createRole("bob", password: "bob-pw", memberOf: ["kcfs_sync_device"])
        return server
    }

    @Test("each device role sees and writes only its own groups and rendezvous rows")
    func rowLevelSecurity() throws {
        let server = try multiUserServer()
        defer { server.stop() }
        let alice = try SyncServer(conninfo: server.conninfo(user: "alice", password: "alice-pw"))
        let bob = try SyncServer(conninfo: server.conninfo(user: "bob", password: "bob-pw"))
        try alice.ensureSchema()  // current already: nothing to do, nothing refused
        try bob.checkSchema()
        let groupA = randomBytes(16), groupB = randomBytes(16)
        try alice.createGroup(groupA)
        try bob.createGroup(groupB)
        let recordA = PushRequest(recordID: randomBytes(32), expectedVersion: 0, version: 1, blob: randomBytes(50))
        let recordB = PushRequest(recordID: randomBytes(32), expectedVersion: 0, version: 1, blob: randomBytes(50))
        #expect(try alice.push(group: groupA, [recordA]) == [.stored(seq: 1)])
        #expect(try bob.push(group: groupB, [recordB]) == [.stored(seq: 1)])
        try alice.touchDevice(group: groupA, device: [1], cursor: 1)

        // Bob cannot see, read, write, claim or delete Alice's group.
        #expect(try !bob.groupExists(groupA))
        #expect(try bob.pull(group: groupA, after: 0, limit: 10).isEmpty)
        #expect(throws: SyncServerError.unknownGroup) { try bob.push(group: groupA, [recordB]) }
        #expect(throws: SyncServerError.unknownGroup) { try bob.lastSeq(group: groupA) }
        #expect(throws: SyncServerError.unknownGroup) { try bob.createGroup(groupA) }
        #expect(throws: SyncServerError.unknownGroup) { try bob.touchDevice(group: groupA, device: [2], cursor: 0) }
        #expect(try bob.devices(group: groupA).isEmpty)
        try bob.deleteGroup(groupA)
        #expect(try alice.lastSeq(group: groupA) == 1)
        // Nor around the protocol, in plain SQL: row-level security and the grants refuse.
        let raw = bob.connection
        #expect(try raw.execute("SELECT count(*) FROM kcfs_sync.records").int64(0, 0) == 1)
        #expect(try raw.execute("SELECT count(*) FROM kcfs_sync.groups").int64(0, 0) == 1)
        #expect(try raw.execute("SELECT count(*) FROM kcfs_sync.devices").int64(0, 0) == 0)
        func refused(_ sql: String, _ params: [PGValue]) -> String? {
            do {
                try raw.execute(sql, params)
                return nil
            } catch {
                if case .server(let state, _) = error { return state }
                return "\(error)"
            }
        }
        #expect(
            refused(
                "INSERT INTO kcfs_sync.records VALUES ($1, $2, 1, 99, false, '\\x00', now())",
                [.bytes(groupA), .bytes(randomBytes(32))]) == "42501")
        #expect(
            refused(
                "SELECT * FROM kcfs_sync.push_one($1, $2, 0, 1, false, '\\x00')",
                [.bytes(groupA), .bytes(randomBytes(32))])
                == "KC001")
        #expect(refused("UPDATE kcfs_sync.groups SET owner = 'alice' WHERE group_id = $1", [.bytes(groupB)]) == "42501")
        #expect(
            refused("INSERT INTO kcfs_sync.groups (group_id, owner) VALUES ($1, 'alice')", [.bytes(randomBytes(16))])
                == "42501")
        #expect(refused("UPDATE kcfs_sync.meta SET value = 9", []) == "42501")
        #expect(refused("CREATE TABLE kcfs_sync.extra (x int)", []) == "42501")
        #expect(try alice.pull(group: groupA, after: 0, limit: 10).map(\.blob) == [recordA.blob])

        // Rendezvous rows are their owner's: Bob cannot answer Alice's offer.
        let rv = randomBytes(32)
        try alice.rendezvousOffer(id: rv, offer: [1, 2, 3], expiresIn: .seconds(600))
        #expect(throws: SyncServerError.rendezvousUnknown) { try bob.rendezvousAnswer(id: rv, answer: [4]) }
        let alicesOtherDevice = try SyncServer(conninfo: server.conninfo(user: "alice", password: "alice-pw"))
        #expect(try alicesOtherDevice.rendezvousAnswer(id: rv, answer: [4]) == [1, 2, 3])

        // A device role cannot create the schema on a database that lacks it.
        try server.psql("CREATE DATABASE empty")
        let empty = try SyncServer(conninfo: server.conninfo(user: "bob", password: "bob-pw", database: "empty"))
        #expect(throws: SyncServerError.schemaMissing) { try empty.checkSchema() }
        try server.psql("REVOKE CREATE ON DATABASE empty FROM PUBLIC")
        var refusal: SyncServerError?
        do { try empty.ensureSchema() } catch { refusal = error }
        guard case .postgres(.server(let state, _)) = refusal else {
            Issue.record("a device role created the schema, or failed otherwise: \(String(describing: refusal))")
            return
        }
        #expect(state == "42501")
        #expect(throws: SyncServerError.schemaMissing) { try empty.checkSchema() }
    }

    @Test("SELECT * from every kcfs_sync table shows only the bytes the devices sent")
    func serverSeesOnlyOpaqueBytes() throws {
        let server = try multiUserServer()
        defer { server.stop() }
        let alice = try SyncServer(conninfo: server.conninfo(user: "alice", password: "alice-pw"))
        var sent: Set<String> = []
        func note(_ bytes: [UInt8]) -> [UInt8] {
            sent.insert("\\x" + hex(bytes))
            return bytes
        }
        let group = note(randomBytes(16))
        try alice.createGroup(group)
        for _ in 0..<20 {
            _ = try alice.push(
                group: group,
                [
                    PushRequest(
                        recordID: note(randomBytes(32)), expectedVersion: 0, version: 1, deleted: Bool.random(),
                        blob: note(randomBytes(Int.random(in: 1...2000))))
                ])
        }
        try alice.touchDevice(group: group, device: note(randomBytes(16)), cursor: 20)
        try alice.rendezvousOffer(id: note(randomBytes(32)), offer: note(randomBytes(64)), expiresIn: .seconds(60))

        let tables = try server.psql("SELECT tablename FROM pg_tables WHERE schemaname = 'kcfs_sync' ORDER BY 1")
        #expect(tables == "devices\ngroups\nmeta\nrecords\nrendezvous\n")
        var cells = 0
        for table in tables.split(separator: "\n") {
            for line in try server.psql("SELECT * FROM kcfs_sync.\(table)").split(separator: "\n") {
                for cell in line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init) {
                    cells += 1
                    let opaque =
                        sent.contains(cell)  // bytes a device sent
                        || cell.wholeMatch(of: /-?[0-9]+/) != nil  // versions, sequence numbers
                        || ["t", "f", "", "alice", "schema_version"].contains(cell)  // flags, NULL, owner, meta
                        || cell.wholeMatch(of: /[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:.]+[+-][0-9]{2}/) != nil  // times
                    #expect(opaque, "\(table) holds \(cell.prefix(80))")
                }
            }
        }
        #expect(cells > 20 * 7)
        // And every blob is there, byte for byte.
        let blobs = try server.psql("SELECT blob FROM kcfs_sync.records").split(separator: "\n").map(String.init)
        #expect(blobs.count == 20 && blobs.allSatisfy { sent.contains($0) })
    }
}
