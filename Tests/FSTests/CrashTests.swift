import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 3, Tests: kill -9 of the daemon during writes. Every write whose close returned 0
/// survives a remount; nothing half-written appears.
@Suite("kill -9 during writes")
struct CrashTests {

    /// The value the writer stores under index i (several sizes, all distinct).
    static let valueExpr = "('value-%06d-' % i).encode() + bytes([65 + i % 26]) * (i * 37 % 3000)"

    @Test("a loop of writes killed by kill -9: acknowledged writes survive, nothing half-written")
    func killDuringWriteLoop() throws {
        try withMount(setup: { try $0.addGeneric("crash", "counter", "counter-initial") }) { box in
            let dir = box.mnt + "/genp/crash"
            // New items k<i>, and one item overwritten in place each round. A line is printed
            // only after close() returned 0.
            let writer = try box.spawn(
                "/usr/bin/python3",
                [
                    "-c",
                    pythonPrelude + """
                        d = sys.argv[1]
                        for i in range(100000):
                            v = \(Self.valueExpr)
                            try:
                                fd = os.open(d + '/k%06d' % i, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                                os.write(fd, v)
                                os.close(fd)
                                print('new', i, flush=True)
                                fd = os.open(d + '/counter', os.O_WRONLY | os.O_TRUNC)
                                os.write(fd, b'counter-%06d-' % i + v)
                                os.close(fd)
                                print('upd', i, flush=True)
                            except OSError as e:
                                print('err', i, en(e.errno), flush=True)
                                break
                        """, dir,
                ])
            // Let it get going, then kill the daemon mid-stream.
            let started = waitUntil(15) { writer.stdoutSoFar.split(separator: "\n").count >= 40 }
            #expect(started, "the writer made no progress: \(writer.stdoutSoFar.suffix(200))")
            usleep(UInt32.random(in: 0..<30_000))
            try box.signalDaemon(SIGKILL)
            let w = writer.wait(timeout: 15)
            #expect(!w.timedOut, "the writer hung after the daemon died")
            let lines = w.lines
            let acknowledgedNew = lines.filter { $0.hasPrefix("new ") }.compactMap { Int($0.dropFirst(4)) }
            let acknowledgedUpd = lines.filter { $0.hasPrefix("upd ") }.compactMap { Int($0.dropFirst(4)) }
            #expect(lines.last?.hasPrefix("err ") == true, "the writer did not see the daemon die: \(lines.suffix(3))")

            // Remount (the harness clears the dead mount first) and check every item.
            let u = try box.run("/usr/bin/fusermount3", ["-u", "-z", box.mnt], timeout: 10)
            #expect(u.status == 0, "\(u.summary)")
            try box.mount()
            let check = try box.py(
                """
                d = sys.argv[1]
                for name in sorted(os.listdir(d)):
                    data = read(d + '/' + name)
                    if name == 'counter':
                        if data == b'counter-initial':
                            print('counter', -1)
                        elif data.startswith(b'counter-'):
                            i = int(data[8:14])
                            ok = data == b'counter-%06d-' % i + \(Self.valueExpr)
                            print('counter', i if ok else 'BAD')
                        else:
                            print('counter', 'BAD')
                    elif name.startswith('k'):
                        i = int(name[1:])
                        print('item', i, 'ok' if data == \(Self.valueExpr) else 'BAD:%d' % len(data))
                    else:
                        print('stray', name)
                """, [dir], timeout: 60)
            #expect(check.status == 0, "\(check.summary)")
            var present: [Int: String] = [:]
            var counter: String?
            for line in check.lines {
                let f = line.split(separator: " ").map(String.init)
                if f[0] == "item", f.count == 3, let i = Int(f[1]) { present[i] = f[2] }
                if f[0] == "counter" { counter = f[1] }
                if f[0] == "stray" {
                    Issue.record("stray entry after the crash: \(f.dropFirst().joined(separator: " "))")
                }
            }
            for i in acknowledgedNew {
                #expect(
                    present[i] == "ok",
                    "write k\(i) was acknowledged (close returned 0) but after remount it is \(present[i] ?? "missing")"
                )
            }
            // The one file in flight may exist empty: its creat(2) was acknowledged (it made the
            // item), its write was not. Anything else is half-written.
            let half = present.filter {
                $0.value != "ok" && !($0.value == "BAD:0" && !acknowledgedNew.contains($0.key))
            }
            #expect(
                half.isEmpty,
                "half-written items after kill -9: \(half.sorted { $0.key < $1.key }.map { "k\($0.key)=\($0.value)" })")
            #expect(present.filter { $0.value == "BAD:0" }.count <= 1, "more than one empty item in flight: \(present)")
            let lastUpd = acknowledgedUpd.max() ?? -1
            if let counter, let n = Int(counter) {
                #expect(n >= lastUpd, "the counter item went back to \(n) though update \(lastUpd) was acknowledged")
            } else {
                Issue.record("the overwritten item is \(counter ?? "missing") after kill -9")
            }
            #expect(
                acknowledgedNew.count >= 20,
                "too few writes before the kill to mean anything (\(acknowledgedNew.count))")
        }
    }

    @Test("kill -9 while files are open for writing: the old secret stays, a new file is as creat left it (empty)")
    func killWithOpenWriters() throws {
        try withMount(setup: { try $0.addGeneric("open", "existing", "old-secret") }) { box in
            let pid = try #require(box.daemonPid)
            let res = try box.pyResults(
                """
                d = sys.argv[1]
                fd1 = os.open(d + '/inflight', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.write(fd1, b'never closed')
                fd2 = os.open(d + '/existing', os.O_WRONLY | os.O_TRUNC)
                os.write(fd2, b'new-but-never-closed')
                os.kill(int(sys.argv[2]), signal.SIGKILL)
                time.sleep(0.3)
                t('close1', os.close, fd1)
                t('close2', os.close, fd2)
                """, [box.mnt + "/genp/open", String(pid)])
            #expect(res["close1"] != "OK" && res["close2"] != "OK", "close after the daemon died: \(res)")
            #expect(waitUntil(5) { !box.isAlive(pid) })
            let u = try box.run("/usr/bin/fusermount3", ["-u", "-z", box.mnt], timeout: 10)
            #expect(u.status == 0, "\(u.summary)")
            #expect(
                try box.findGeneric("open", "existing") == Array("old-secret".utf8), "the old secret did not survive")
            let items = try box.dump()
            // creat(2) returned: the item exists, empty; the write was never acknowledged.
            #expect(items.contains { $0["account"] == "inflight" }, "the acknowledged creat left no item")
            #expect(try box.findGeneric("open", "inflight") == [], "bytes never acknowledged were stored")
            try box.mount()
            let ls = try box.sh("ls \(q(box.mnt + "/genp/open"))")
            #expect(ls.lines == ["existing", "inflight"], "\(ls.summary)")
        }
    }
}
