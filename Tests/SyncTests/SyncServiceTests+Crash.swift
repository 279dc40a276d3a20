import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension SyncServiceTests {
    /// Cycles of the kill -9 test, and the time they may take (fewer cycles when the machine is
    /// slow: the count run is printed, and at least `minimumCycles` must run).
    static let killCycles = 50
    static let killBudget = 180.0
    static let minimumCycles = 10

    @Test(
        "kill -9 of A's service 0–50 ms after writes, a sync now racing its engine, 50 times, remounting each time: both vaults end equal, nothing lost, nothing doubled, no conflict"
    )
    func killNineDuringSync() throws {
        try withSyncPeers(setup: { try $0.a.addGeneric("kill", "counter", "c-initial", extra: ["--synchronizable"]) }) {
            p in
            let a = p.a, b = p.b
            let bin = try requireBinary()
            // What A acknowledged: the file names of genp/kill and their contents.
            var model: [String: String] = ["counter;synchronizable=true": "c-initial"]
            var generator = SystemRandomNumberGenerator()
            let started = Date()
            var cycles = 0
            while cycles < Self.killCycles && Date().timeIntervalSince(started) < Self.killBudget {
                let c = cycles
                // Two new items and the counter through the mount, in one child; a line per
                // write whose close returned 0.
                let script =
                    (0..<2).map { j in "printf v\(c)-\(j) > 'n\(c)-\(j);synchronizable=true' && echo n\(c)-\(j)" }
                    .joined(separator: " && ") + " && printf c\(c) > 'counter;synchronizable=true' && echo counter"
                let w = try a.sh(script, timeout: 20, cwd: a.mnt + "/genp/kill")
                try #require(w.status == 0, "cycle \(c): the writes failed: \(w.summary)")
                for j in 0..<2 { model["n\(c)-\(j);synchronizable=true"] = "v\(c)-\(j)" }
                model["counter;synchronizable=true"] = "c\(c)"
                // Every third cycle the CLI (through the service) deletes an item of an earlier one.
                if c % 3 == 2 {
                    let victim = "n\(c - 2)-1"
                    let d = try a.cli(["delete-generic-password", "-s", "kill", "-a", victim] + a.unlockArgs)
                    try #require(d.status == 0, "cycle \(c): delete \(victim): \(d.summary)")
                    model[victim + ";synchronizable=true"] = nil
                }
                // A `sync now` of the CLI races the service's engine for the same outbox rows
                // (each seals its own bytes: the loser meets its twin on the server).
                let now = try a.spawn(bin, ["sync", "now"] + a.unlockArgs)
                usleep(UInt32.random(in: 0...50_000, using: &generator))
                try a.signalDaemon(SIGKILL)
                let ran = now.wait(timeout: 60)
                #expect(ran.status == 0 && ran.stderr.isEmpty, "cycle \(c): sync now beside the engine: \(ran.summary)")
                try SyncPeers.remount(a)
                cycles += 1
            }
            print("sync kill -9: \(cycles) cycles in \(Int(Date().timeIntervalSince(started))) s")
            #expect(cycles >= Self.minimumCycles, "only \(cycles) cycles ran in \(Self.killBudget) s")

            // Let both sync (the engines would; `sync now` makes it one bounded step each).
            for box in [a, b, a, b] {
                let r = try box.cli(["sync", "now"] + box.unlockArgs, timeout: 60)
                #expect(r.status == 0 && r.stderr.isEmpty, "sync now: \(r.summary)")
            }
            let settled = waitUntil(60) {
                p.outbox(a) == 0 && SyncPeers.contents(a, service: "kill") == model
                    && SyncPeers.contents(b, service: "kill") == model
            }
            let onA = SyncPeers.contents(a, service: "kill") ?? [:]
            let onB = SyncPeers.contents(b, service: "kill") ?? [:]
            #expect(settled, "not equal within 60 s; outbox of A: \(p.outbox(a) ?? -1)")
            for (name, value) in model.sorted(by: { $0.key < $1.key }) {
                #expect(onA[name] == value, "A: \(name) is \(onA[name] ?? "missing"), acknowledged \(value)")
                #expect(onB[name] == value, "B: \(name) is \(onB[name] ?? "missing"), acknowledged \(value)")
            }
            #expect(
                Set(onA.keys).subtracting(model.keys).isEmpty, "A has extra: \(Set(onA.keys).subtracting(model.keys))")
            #expect(
                Set(onB.keys).subtracting(model.keys).isEmpty, "B has extra: \(Set(onB.keys).subtracting(model.keys))")
            // Only A wrote: no version may have lost to another, on either device.
            for box in [a, b] {
                let conflicts = try box.cli(["sync", "conflicts", "--json"] + box.unlockArgs)
                #expect(conflicts.status == 0 && conflicts.stdout == "[]\n", "sync conflicts: \(conflicts.summary)")
            }
            // The server holds one row per record: every item ever written, live or deleted.
            let deleted = (0..<cycles).filter { $0 % 3 == 2 }.count
            #expect(try p.serverRecords() == model.count + deleted)
        }
    }
}
