import Foundation
import Testing

/// Issue 30, point 4: `/views/changes`, the change feed as a pollable file. A reader that opened
/// it before a change made by another process (the CLI through the service) is woken by poll(2)
/// within 2 s, reads one `SEQ OP CLASS PATH` line per change (PATH from the mount's root: `genp/…`) from its open on, and then nothing
/// (0 bytes) until the next; `keychainfs watch --once` shows the same lines.
@Suite("/views/changes: a pollable change feed (issue 30)")
struct ChangesViewTests {
    static let reader = """
        import os, select, sys, time
        fd = os.open(sys.argv[1], os.O_RDONLY)
        p = select.poll()
        p.register(fd, select.POLLIN)
        print("before:", "ready" if p.poll(0) else "empty", "read:", repr(os.read(fd, 4096)), flush=True)
        print("waiting", flush=True)
        for expected in range(int(sys.argv[2])):
            start = time.monotonic()
            events = p.poll(5000)
            print("woke", "%.3f" % (time.monotonic() - start), "POLLIN" if events else "timeout", flush=True)
            sys.stdout.write(os.read(fd, 65536).decode())
            sys.stdout.flush()
        print("after:", repr(os.read(fd, 4096)), flush=True)
        """

    @Test("poll wakes on a CLI add and delete; read gives their lines once, in order, then nothing")
    func pollAndRead() throws {
        try withMount(setup: { try $0.addGeneric("feed", "seed", "x") }) { box in
            let reader = try box.spawn("/usr/bin/python3", ["-c", Self.reader, box.mnt + "/views/changes", "2"])
            waitUntil(10) { reader.stdoutSoFar.contains("waiting") || !reader.isRunning }
            try #require(reader.stdoutSoFar.contains("before: empty read: b''"), "\(reader.stdoutSoFar)")
            let add = try box.cli(["add-generic-password"] + box.unlockArgs + ["-s", "feed", "-a", "alice", "-w", "s"])
            try #require(add.status == 0, "add: \(add.summary)")
            waitUntil(5) { reader.stdoutSoFar.contains(" add genp genp/feed/alice\n") || !reader.isRunning }
            let delete = try box.cli(["delete-generic-password"] + box.unlockArgs + ["-s", "feed", "-a", "alice"])
            try #require(delete.status == 0, "delete: \(delete.summary)")
            let done = reader.wait(timeout: 15)
            #expect(done.status == 0, "reader: \(done.summary)")
            let lines = done.stdout.split(separator: "\n").map(String.init)
            let woke = lines.filter { $0.hasPrefix("woke ") }
            #expect(woke.count == 2 && woke.allSatisfy { $0.hasSuffix("POLLIN") }, "\(lines)")
            #expect(
                woke.allSatisfy { Double($0.split(separator: " ")[1]) ?? 9 < 2 }, "a wake took 2 s or more: \(woke)")
            let changes = lines.filter { $0.first?.isNumber == true }
            #expect(
                changes.map { $0.split(separator: " ").dropFirst().joined(separator: " ") } == [
                    "add genp genp/feed/alice", "delete genp genp/feed/alice",
                ])
            #expect(lines.last == "after: b''", "\(lines)")
            // The same changes, by the same numbers, as `keychainfs watch` prints them.
            let watch = try box.cli(["watch", "--once", "--vault", box.vault, "genp/feed/alice"])
            #expect(watch.lines == changes, "watch: \(watch.summary)")
        }
    }
}
