import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension ConsistencyTests {
    // An O_TRUNC open takes no change stamp (its edits start with the truncation, replayed on
    // nothing). On an item that was empty at its open too (issue 29, item 5: docs/paths.md's
    // rule, one rule for every O_TRUNC handle): its writes replace what another process
    // committed meanwhile, whole. Replaying them on the stored value instead left a value nobody
    // wrote ("abXXXXXX"), the mixed reads of two overlapping `> f` writers.
    @Test("an O_TRUNC handle on an empty item replaces what was committed since its open, whole")
    func truncatingAnEmptyItemReplacesLaterCommits() throws {
        try withMount(setup: { try $0.addGeneric("empty", "f", "not yet empty") }) { box in
            let f = box.mnt + "/genp/empty/f"
            let flag = box.root + "/go"
            #expect(try box.sh("truncate -s 0 '\(f)'").status == 0)
            try #require(try box.findGeneric("empty", "f") == [], "the item is not empty before the test")
            let script = """
                import os, sys, time
                a = os.open(sys.argv[1], os.O_WRONLY | os.O_TRUNC)
                open(sys.argv[2] + ".opened", "w").close()
                while not os.path.exists(sys.argv[2]): time.sleep(0.02)
                os.write(a, b"ab")
                os.close(a)
                print("read", open(sys.argv[1], "rb").read().decode())
                """
            let writer = try box.spawn("/usr/bin/python3", ["-c", script, f, flag])
            #expect(Self.waitFor(10) { FileManager.default.fileExists(atPath: flag + ".opened") })
            try box.addGeneric("empty", "f", "XXXXXXXX", extra: ["-U"])
            _ = FileManager.default.createFile(atPath: flag, contents: Data())
            let result = writer.wait(timeout: 20)
            #expect(result.lines == ["read ab"], "\(result.summary)")
            #expect(try box.findGeneric("empty", "f") == Array("ab".utf8))
        }
    }

    // Issue 9, item 3: a commit drops the kernel's cached attributes of the item before the
    // FLUSH is answered (an attribute-only notice from the committing thread; it used to be
    // handed to another thread, and a `stat` right after `close` could beat it: 1–4 in 300).
    // The stat between write and close makes the kernel cache the uncommitted size and the old
    // mtime for a second; the stat after close must show the commit.
    @Test("stat right after close shows the committed size and mtime, also where attributes were cached before it")
    func statAfterCloseIsCurrent() throws {
        try withMount(setup: { try $0.addGeneric("attrs", "f", "old") }) { box in
            let f = box.mnt + "/genp/attrs/f"
            let script = """
                import os, sys, subprocess
                p, stale = sys.argv[1], []
                for k in range(200):
                    want = b'a longer secret %06d' % k + b'x' * (k % 7)
                    fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
                    os.write(fd, want)
                    cached = os.stat(p)
                    os.close(fd)
                    now = os.stat(p)
                    if now.st_size != len(want) or now.st_mtime_ns <= cached.st_mtime_ns:
                        stale.append((k, now.st_size, len(want), cached.st_mtime_ns, now.st_mtime_ns))
                    if open(p, 'rb').read() != want: stale.append((k, 'content'))
                print('stale', len(stale))
                for s in stale[:3]: print('example', s)
                want = b'the last one, from another process'
                cached = os.stat(p)
                fd = os.open(p, os.O_WRONLY | os.O_TRUNC); os.write(fd, want); os.close(fd)
                other = subprocess.run(['stat', '-c', '%s %.9Y', p], capture_output=True, text=True).stdout.split()
                seconds, _, nanos = other[1].partition('.')
                print('other', int(other[0]) == len(want) and int(seconds + nanos) > cached.st_mtime_ns)
                """
            let r = try box.run("/usr/bin/python3", ["-c", script, f], timeout: 120)
            #expect(r.status == 0, "\(r.summary)")
            #expect(labelled(r)["stale"] == "0", "\(r.stdout)")
            #expect(labelled(r)["other"] == "True", "\(r.stdout)")
            #expect(try box.findGeneric("attrs", "f") == Array("the last one, from another process".utf8))
        }
    }
}
