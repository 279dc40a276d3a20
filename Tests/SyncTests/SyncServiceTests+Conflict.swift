import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension SyncServiceTests {
    @Test(
        "one item edited on both devices while the server is down: both end with the later edit, the other is kept once; sync restore brings it back on both"
    )
    func offlineEditsOnBothDevices() throws {
        try withSyncPeers(setup: { try $0.a.addGeneric("both.example", "ann", "v0", extra: ["--synchronizable"]) }) {
            p in
            let a = p.a, b = p.b
            try #require(SyncPeers.read(b, SyncPeers.file(b, "both.example", "ann")) == "v0")
            p.server.stop()
            try #require(try SyncPeers.write(a, SyncPeers.file(a, "both.example", "ann"), "from-a"))
            // B's edit is the later one (one machine, one clock).
            usleep(20_000)
            try #require(try SyncPeers.write(b, SyncPeers.file(b, "both.example", "ann"), "from-b"))
            try p.server.start()
            let converged = waitUntil(90) {
                SyncPeers.read(a, SyncPeers.file(a, "both.example", "ann")) == "from-b"
                    && SyncPeers.read(b, SyncPeers.file(b, "both.example", "ann")) == "from-b"
                    && p.outbox(a) == 0 && p.outbox(b) == 0
            }
            #expect(
                converged,
                "A: \(SyncPeers.read(a, SyncPeers.file(a, "both.example", "ann")) ?? "-"), B: \(SyncPeers.read(b, SyncPeers.file(b, "both.example", "ann")) ?? "-")"
            )

            // The losing edit is kept on one device: as A's lost local version, or as the
            // remote version B's later edit beat.
            func kept(_ box: TestSandbox) throws -> [[String: Any]] {
                let r = try box.cli(["sync", "conflicts", "--json"] + box.unlockArgs)
                #expect(r.status == 0, "sync conflicts: \(r.summary)")
                return (try? JSONSerialization.jsonObject(with: Data(r.stdoutBytes))) as? [[String: Any]] ?? []
            }
            let onA = try kept(a), onB = try kept(b)
            #expect(onA.count + onB.count >= 1, "no version kept: A \(onA), B \(onB)")
            let keeper = onA.isEmpty ? b : a
            let entry = try #require((onA.isEmpty ? onB : onA).first)
            let id = try #require(entry["id"] as? Int, "\(entry)")
            #expect("\(entry["item"] ?? "")".contains("both.example"), "\(entry)")

            // Restored where it is kept (the CLI opens the vault itself beside the service):
            // it becomes the newest change, and the service there uploads it.
            let restore = try keeper.cli(["sync", "restore", "\(id)"] + keeper.unlockArgs)
            #expect(restore.status == 0, "sync restore: \(restore.summary)")
            let back = waitUntil(Self.propagation) {
                SyncPeers.read(a, SyncPeers.file(a, "both.example", "ann")) == "from-a"
                    && SyncPeers.read(b, SyncPeers.file(b, "both.example", "ann")) == "from-a"
            }
            #expect(
                back,
                "after restore, A: \(SyncPeers.read(a, SyncPeers.file(a, "both.example", "ann")) ?? "-"), B: \(SyncPeers.read(b, SyncPeers.file(b, "both.example", "ann")) ?? "-"); outbox of the restoring device: \(p.outbox(keeper) ?? -1)"
            )
            #expect(try kept(keeper).allSatisfy { ($0["id"] as? Int) != id }, "the restored version is still listed")
        }
    }
}
