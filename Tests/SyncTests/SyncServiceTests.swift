import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 31 through the faces users use: two devices (sandboxes A and B, each with its vault,
/// its mount and its keychain service) in one sync group on a private PostgreSQL, changed with
/// `printf`, `rm` and the CLI, read with `cat`, `find-generic-password`, `inotifywait` and
/// `sync status`. Every wait polls with a deadline; teardown unmounts both and stops the server.
/// Serialized: each test runs two services and a server, and the timing bounds are the user's.
@Suite("Sync between devices through the faces (issue 31)", .serialized)
struct SyncServiceTests {
    /// How long a change may take to reach the other device when both are connected (the
    /// engines push at commit and hear the server's NOTIFY: ~100 ms on an idle machine).
    static let propagation = 15.0

    @Test(
        "an item written through A's mount is read on B by cat and find-generic-password; update and rm follow; a non-synchronizable one never leaves A"
    )
    func mountWriteReachesTheOtherDevice() throws {
        try withSyncPeers(setup: { try $0.a.addGeneric("github.com", "alice", "s1", extra: ["--synchronizable"]) }) {
            p in
            let a = p.a, b = p.b
            // Pulled at join.
            #expect(SyncPeers.read(b, SyncPeers.file(b, "github.com", "alice")) == "s1")

            // A local-only item first, then a synchronizable one: once the second is on B, the
            // first would have been uploaded before it (the outbox goes oldest first).
            try #require(try SyncPeers.write(a, SyncPeers.file(a, "github.com", "carol", sync: false), "local"))
            let started = Date()
            try #require(try SyncPeers.write(a, SyncPeers.file(a, "github.com", "bob"), "new"))
            let arrived = waitUntil(Self.propagation) {
                SyncPeers.read(b, SyncPeers.file(b, "github.com", "bob")) == "new"
            }
            try #require(
                arrived, "bob did not reach B's mount within \(Self.propagation) s; B's log: \(b.daemonLog.suffix(800))"
            )
            let latency = Date().timeIntervalSince(started)
            let found = try b.cli(["find-generic-password", "-s", "github.com", "-a", "bob", "-w"] + b.unlockArgs)
            #expect(found.status == 0 && found.stdout == "new\n", "find-generic-password on B: \(found.summary)")

            let listing = SyncPeers.contents(b, service: "github.com") ?? [:]
            #expect(
                Set(listing.keys) == ["alice;synchronizable=true", "bob;synchronizable=true"],
                "B lists: \(listing.keys.sorted())")
            #expect(try p.serverRecords() == 2, "the server holds the two synchronizable items only")
            let carol = try b.cli(["find-generic-password", "-s", "github.com", "-a", "carol"] + b.unlockArgs)
            #expect(carol.status != 0, "carol is on B: \(carol.summary)")

            try #require(try SyncPeers.write(a, SyncPeers.file(a, "github.com", "bob"), "newer"))
            let updated = waitUntil(Self.propagation) {
                SyncPeers.read(b, SyncPeers.file(b, "github.com", "bob")) == "newer"
            }
            #expect(
                updated,
                "the update did not reach B: \(SyncPeers.read(b, SyncPeers.file(b, "github.com", "bob")) ?? "-")")
            let again = try b.cli(["find-generic-password", "-s", "github.com", "-a", "bob", "-w"] + b.unlockArgs)
            #expect(again.stdout == "newer\n", "\(again.summary)")

            let rm = try a.run("/bin/rm", [SyncPeers.file(a, "github.com", "bob")])
            try #require(rm.status == 0, "rm on A: \(rm.summary)")
            let gone = waitUntil(Self.propagation) {
                !FileManager.default.fileExists(atPath: SyncPeers.file(b, "github.com", "bob"))
                    && SyncPeers.read(b, SyncPeers.file(b, "github.com", "bob")) == nil
            }
            #expect(gone, "the delete did not reach B's mount")
            let deleted = try b.cli(["find-generic-password", "-s", "github.com", "-a", "bob"] + b.unlockArgs)
            #expect(deleted.status != 0, "B still finds bob: \(deleted.summary)")
            #expect(SyncPeers.read(b, SyncPeers.file(b, "github.com", "alice")) == "s1", "alice stays on B")
            #expect(SyncPeers.read(a, SyncPeers.file(a, "github.com", "carol", sync: false)) == "local")
            // A tombstone stays on the server as a row; still nothing of carol.
            #expect(try p.serverRecords() == 2)
            #expect(p.outbox(a) == 0 && p.outbox(b) == 0)
            print("sync: first propagation A→B through the mounts took \(Int(latency * 1000)) ms")
        }
    }

    @Test("a pulled item is a CREATE to an inotify watcher of B's mount")
    func pulledItemIsHeardByWatcher() throws {
        try withSyncPeers(setup: { try $0.a.addGeneric("watched", "seed", "s", extra: ["--synchronizable"]) }) { p in
            let a = p.a, b = p.b
            try #require(SyncPeers.read(b, SyncPeers.file(b, "watched", "seed")) == "s")
            let watcher = try InotifyWatch.start(b, b.mnt)
            defer {
                watcher.kill(SIGTERM)
                _ = watcher.wait(timeout: 5)
            }
            try #require(try SyncPeers.write(a, SyncPeers.file(a, "watched", "dave"), "d1"))
            let path = SyncPeers.file(b, "watched", "dave")
            let arrived = waitUntil(Self.propagation) { SyncPeers.read(b, path) == "d1" }
            try #require(arrived, "dave did not reach B")
            let next = InotifyWatch.expectEvent(watcher, ["CREATE"], path)
            // A new service on B is a CREATE of its directory (inotifywait -r watches a new
            // directory only once it heard of it, so it may miss the file made in it at once,
            // as on any filesystem: WatcherTests).
            try #require(try SyncPeers.write(a, SyncPeers.file(a, "fresh.example", "erin"), "e1"))
            let fresh = SyncPeers.file(b, "fresh.example", "erin")
            #expect(waitUntil(Self.propagation) { SyncPeers.read(b, fresh) == "e1" }, "erin did not reach B")
            InotifyWatch.expectEvent(watcher, ["CREATE", "ISDIR"], b.mnt + "/genp/fresh.example", after: next)
            // The delete of a pulled tombstone is heard as well.
            let rm = try a.run("/bin/rm", [SyncPeers.file(a, "watched", "dave")])
            try #require(rm.status == 0, "rm on A: \(rm.summary)")
            #expect(waitUntil(Self.propagation) { SyncPeers.read(b, path) == nil }, "the delete did not reach B")
            InotifyWatch.expectEvent(watcher, ["DELETE"], path, after: next)
        }
    }

    @Test(
        "the server stopped: writes on A succeed at once and wait in the outbox; the server back on its port, the outbox drains and B has every change"
    )
    func serverOutageQueuesAndCatchesUp() throws {
        try withSyncPeers(setup: { p in
            try p.a.addGeneric("outage", "kept", "k0", extra: ["--synchronizable"])
            try p.a.addGeneric("outage", "gone", "g0", extra: ["--synchronizable"])
        }) { p in
            let a = p.a, b = p.b
            try #require(SyncPeers.read(b, SyncPeers.file(b, "outage", "gone")) == "g0")
            p.server.stop()

            var expected: [String: String] = ["kept;synchronizable=true": "k1"]
            let started = Date()
            try #require(try SyncPeers.write(a, SyncPeers.file(a, "outage", "kept"), "k1"))
            for i in 0..<5 {
                try #require(try SyncPeers.write(a, SyncPeers.file(a, "outage", "n\(i)"), "v\(i)"))
                expected["n\(i);synchronizable=true"] = "v\(i)"
            }
            let rm = try a.run("/bin/rm", [SyncPeers.file(a, "outage", "gone")])
            try #require(rm.status == 0, "rm: \(rm.summary)")
            let took = Date().timeIntervalSince(started)
            #expect(took < 5, "seven changes on A took \(took) s with the server down: something blocked on it")
            #expect(SyncPeers.contents(a, service: "outage") == expected, "A shows its own changes at once")
            let queued = p.outbox(a) ?? -1
            #expect(queued == 7, "A's outbox while the server is down: \(queued) (status \(p.status(a) ?? [:]))")

            try p.server.start()
            let back = Date()
            let drained = waitUntil(90) { p.outbox(a) == 0 }
            let drainedAfter = Date().timeIntervalSince(back)
            #expect(drained, "A's outbox did not drain: \(p.status(a) ?? [:]); log \(a.daemonLog.suffix(800))")
            let caughtUp = waitUntil(90) { SyncPeers.contents(b, service: "outage") == expected }
            #expect(
                caughtUp,
                "B after the outage: \(SyncPeers.contents(b, service: "outage") ?? [:]); log \(b.daemonLog.suffix(800))"
            )
            #expect(p.outbox(b) == 0)
            // The engines retry with a growing backoff (0.5 s to 30 s) while the server is gone.
            print(
                "sync outage: A's outbox drained \(Int(drainedAfter)) s and B caught up \(Int(Date().timeIntervalSince(back))) s after the server came back"
            )
        }
    }
}
