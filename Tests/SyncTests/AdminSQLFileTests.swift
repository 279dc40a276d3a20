import Foundation
import KeychainSync
import Testing

/// docs/sync-admin.sql is `SyncServer.adminSQL` as a file an administrator can give psql.
@Suite("the administrator's SQL file")
struct AdminSQLFileTests {
    @Test("docs/sync-admin.sql is SyncServer.adminSQL, byte for byte")
    func sameText() throws {
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().path
        let path = repository + "/docs/sync-admin.sql"
        let header = "-- keychainfs sync: what a server's administrator runs once as a superuser (docs/sync.md).\n"
        let expected = header + SyncServer.adminSQL
        let file = try? String(contentsOfFile: path, encoding: .utf8)
        if file != expected, ProcessInfo.processInfo.environment["KEYCHAINFS_WRITE_ADMIN_SQL"] == "1" {
            try expected.write(toFile: path, atomically: true, encoding: .utf8)
        }
        #expect(
            file == expected,
            "docs/sync-admin.sql differs from SyncServer.adminSQL: run this test with KEYCHAINFS_WRITE_ADMIN_SQL=1")
    }
}
