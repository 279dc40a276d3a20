import Foundation
import KeychainSync
import Testing
import TestSupport

/// The kcfs_sync schema: created once, left alone when current, refused untouched when newer.
@Suite("SyncServer schema")
struct SyncSchemaTests {
    @Test("ensureSchema creates the schema, runs again as a no-op, and checkSchema agrees")
    func createAndRerun() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let sync = try SyncServer(conninfo: server.conninfo)
        #expect(throws: SyncServerError.schemaMissing) { try sync.checkSchema() }
        try sync.ensureSchema()
        try sync.checkSchema()
        #expect(try server.psql("SELECT key, value FROM kcfs_sync.meta") == "schema_version\t1\n")
        let tables = try server.psql(
            "SELECT tablename, rowsecurity FROM pg_tables WHERE schemaname = 'kcfs_sync' ORDER BY 1")
        #expect(tables == "devices\tt\ngroups\tt\nmeta\tt\nrecords\tt\nrendezvous\tt\n")
        let group = randomBytes(16)
        try sync.createGroup(group)
        try sync.createGroup(group)  // idempotent
        _ = try sync.push(
            group: group, [PushRequest(recordID: randomBytes(32), expectedVersion: 0, version: 1, blob: [1])])

        // Again, from this connection and another: nothing changes, nothing is lost.
        try sync.ensureSchema()
        let other = try SyncServer(conninfo: server.conninfo)
        try other.ensureSchema()
        #expect(try other.groupExists(group))
        #expect(try other.lastSeq(group: group) == 1)
        #expect(try other.pull(group: group, after: 0, limit: 10).count == 1)
        #expect(SyncServer.schemaVersion == 1)
        // The administrator's script is idempotent too, and keeps the data.
        try server.psql(SyncServer.adminSQL)
        try server.psql(SyncServer.adminSQL)
        #expect(try other.lastSeq(group: group) == 1)
    }

    @Test("a newer schema is refused by name and left untouched, by ensureSchema, checkSchema and adminSQL")
    func newerRefused() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let sync = try SyncServer(conninfo: server.conninfo)
        try sync.ensureSchema()
        // A "version 2" database: its meta says so, and its tables differ from ours.
        try server.psql(
            """
            UPDATE kcfs_sync.meta SET value = 2 WHERE key = 'schema_version';
            DROP FUNCTION kcfs_sync.push_one(bytea, bytea, bigint, bigint, boolean, bytea);
            ALTER TABLE kcfs_sync.records ADD COLUMN future bytea;
            """)
        let before = try server.psql(
            """
            SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'kcfs_sync'
            ORDER BY 1, 2;
            SELECT proname FROM pg_proc WHERE pronamespace = 'kcfs_sync'::regnamespace;
            SELECT * FROM kcfs_sync.meta;
            """)
        let fresh = try SyncServer(conninfo: server.conninfo)
        #expect(throws: SyncServerError.newerSchema(found: 2, supported: 1)) { try fresh.ensureSchema() }
        #expect(throws: SyncServerError.newerSchema(found: 2, supported: 1)) { try fresh.checkSchema() }
        #expect(throws: HarnessError.self) { try server.psql(SyncServer.adminSQL) }
        let after = try server.psql(
            """
            SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'kcfs_sync'
            ORDER BY 1, 2;
            SELECT proname FROM pg_proc WHERE pronamespace = 'kcfs_sync'::regnamespace;
            SELECT * FROM kcfs_sync.meta;
            """)
        #expect(before == after)
        #expect(after.contains("future") && after.contains("schema_version\t2") && !after.contains("push_one"))
        // The connection is still usable after the refusal (its transaction was rolled back).
        #expect(try fresh.connection.execute("SELECT 1").int64(0, 0) == 1)
    }
}

/// The single-user setup: the device's own role creates the schema and owns it.
@Suite("SyncServer schema, single user")
struct SingleUserSchemaTests {
    @Test("a role with CREATE on the database sets the schema up alone, twice at once, without the device role")
    func singleUserRole() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        try server.createRole("solo", password: nil)
        try server.psql("GRANT CREATE ON DATABASE postgres TO solo")
        // Two devices starting at once on an empty database: both succeed, the schema is made once.
        let info = server.conninfo(user: "solo")
        let failures = onThreads(2) { _ in try SyncServer(conninfo: info).ensureSchema() }
        #expect(failures.isEmpty, "\(failures)")
        let solo = try SyncServer(conninfo: info)
        try solo.checkSchema()
        let owners = try server.psql("SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'kcfs_sync'")
        #expect(owners == "solo\n")
        // solo may not create roles: the device role and its grants are the administrator's.
        #expect(try server.psql("SELECT count(*) FROM pg_roles WHERE rolname = 'kcfs_sync_device'") == "0\n")
        let group = randomBytes(16)
        try solo.createGroup(group)
        let request = PushRequest(recordID: randomBytes(32), expectedVersion: 0, version: 1, blob: randomBytes(10))
        #expect(try solo.push(group: group, [request]) == [.stored(seq: 1)])
        #expect(try solo.pull(group: group, after: 0, limit: 5).map(\.blob) == [request.blob])
        #expect(try solo.pull(group: group, after: 0, limit: -1).isEmpty)
        // A role that does not exist is refused as a credential.
        #expect {
            try SyncServer(conninfo: server.conninfo(user: "nobody"))
        } throws: { error in
            guard case .postgres(.authenticationFailed) = error as? SyncServerError else { return false }
            return true
        }
    }
}
