import Foundation
import TestSupport
import Testing

extension SyncServiceTests {
    @Test(
        "sync now refuses a tampered record and audits it (sync-refuse, via=sync) as the service's engine does; the item never reaches B"
    )
    func syncNowAuditsRefusals() throws {
        try withSyncPeers(mount: false) { p in
            let a = p.a, b = p.b
            try a.addGeneric("audit.example", "zq-acct", "v1", extra: ["--synchronizable"])
            let up = try a.cli(["sync", "now"] + a.unlockArgs, timeout: 60)
            try #require(up.status == 0 && up.stdout.contains("uploaded 1"), "sync now on A: \(up.summary)")
            _ = try p.server.psql(
                "UPDATE kcfs_sync.records SET blob = overlay(blob placing '\\xff'::bytea from 40 for 1) WHERE seq = (SELECT max(seq) FROM kcfs_sync.records)"
            )
            let now = try b.cli(["sync", "now"] + b.unlockArgs, timeout: 60)
            #expect(now.status == 0, "sync now on B: \(now.summary)")
            #expect(now.stderr.contains("refused") && now.stdout.contains("pulled 0 records"), "\(now.summary)")
            let audit = (try? String(contentsOfFile: b.auditPath, encoding: .utf8)) ?? ""
            let refusals = audit.split(separator: "\n").filter { $0.contains("sync-refuse") }
            #expect(refusals.count == 1 && refusals.allSatisfy { $0.contains("via=sync") }, "audit: \(audit)")
            #expect(
                !audit.contains("audit.example") && !audit.contains("zq-acct"), "the audit names the item: \(audit)")
            let found = try b.cli(
                ["find-generic-password", "-s", "audit.example", "-a", "zq-acct", "-w"] + b.unlockArgs)
            #expect(found.status != 0, "the tampered item was applied on B: \(found.summary)")
        }
    }
}
