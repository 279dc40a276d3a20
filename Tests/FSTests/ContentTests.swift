import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 3, point 3: content, writes, commits, unlink, rename, modes, sizes, times.
@Suite("content, writes and renames")
struct ContentTests {

    @Test("read returns the secret bytes exactly (binary, NUL, newline, no trailing newline added)")
    func exactBytes() throws {
        let binary: [UInt8] = [0x00, 0xff, 0x0a, 0x41, 0x00, 0x80, 0x0d, 0x0a] + Array("tail".utf8)
        let big = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) }
        try withMount(setup: { box in
            try box.addGeneric("bin", "b", binary)
            try box.addGeneric("bin", "big", big)
            try box.addGeneric("bin", "empty", [])
        }) { box in
            let res = try box.pyResults(
                """
                d = sys.argv[1]
                t('b', read, d + '/b')
                t('emptyread', read, d + '/empty')
                t('bigsize', lambda: len(read(d + '/big')))
                t('bigsame', lambda: read(d + '/big') == bytes((i * 7 + 3) & 255 for i in range(200000)))
                fd = os.open(d + '/b', os.O_RDONLY)
                t('pread', os.pread, fd, 3, 2)
                t('preadpastend', os.pread, fd, 10, 100)
                os.close(fd)
                """, [box.mnt + "/genp/bin"])
            #expect(res["b"] == "OK " + binary.hex, "\(res)")
            #expect(res["emptyread"] == "OK", "\(res)")
            #expect(res["bigsize"] == "OK 200000", "\(res)")
            #expect(res["bigsame"] == "OK True", "\(res)")
            #expect(res["pread"] == "OK " + Array(binary[2..<5]).hex, "\(res)")
            #expect(res["preadpastend"] == "OK", "\(res)")
            let sizes = try box.sh(
                "stat -c '%s' \(q(box.mnt + "/genp/bin/b")) \(q(box.mnt + "/genp/bin/big")) \(q(box.mnt + "/genp/bin/empty"))"
            )
            #expect(sizes.lines == ["\(binary.count)", "200000", "0"], "\(sizes.summary)")
        }
    }

    @Test("O_TRUNC, O_APPEND (echo >>), writes at offsets, truncate -s behave as on any file")
    func writeModes() throws {
        try withMount(setup: { try $0.addGeneric("w", "f", "0123456789") }) { box in
            let f = box.mnt + "/genp/w/f"
            // O_TRUNC: a shorter secret replaces a longer one completely.
            #expect(try box.sh("printf short > \(q(f))").status == 0)
            #expect(try box.findGeneric("w", "f") == Array("short".utf8))
            // O_APPEND.
            #expect(try box.sh("echo more >> \(q(f))").status == 0)
            #expect(try box.findGeneric("w", "f") == Array("shortmore\n".utf8))
            // Writes at offsets: inside, and past the end (the gap reads as zeros).
            let res = try box.pyResults(
                """
                p = sys.argv[1]
                t('inside', wfd, p, os.O_WRONLY, b'XY', 1)
                t('after1', read, p)
                t('past', wfd, p, os.O_WRONLY, b'Z', 12)
                t('after2', read, p)
                fd = os.open(p, os.O_RDWR)
                os.pwrite(fd, b'AB', 0); os.pwrite(fd, b'CD', 4)
                t('samefd', os.pread, fd, 6, 0)
                t('fstatsize', lambda: os.fstat(fd).st_size)
                os.close(fd)
                t('after3', read, p)
                fd = os.open(p, os.O_WRONLY | os.O_APPEND)
                os.lseek(fd, 0, 0); os.write(fd, b'!')
                os.close(fd)
                t('appendignoresseek', read, p)
                """, [f])
            #expect(res["inside"] == "OK" && res["after1"] == "OK " + "sXYrtmore\n".hexUTF8, "\(res)")
            #expect(res["after2"] == "OK " + ("sXYrtmore\n".hexUTF8 + "0000" + "5a"), "\(res)")
            #expect(res["samefd"] == "OK " + "ABYrCD".hexUTF8, "\(res)")
            #expect(res["fstatsize"] == "OK 13", "\(res)")
            #expect(res["after3"] == "OK " + ("ABYrCDore\n".hexUTF8 + "0000" + "5a"), "\(res)")
            #expect(res["appendignoresseek"] == "OK " + ("ABYrCDore\n".hexUTF8 + "0000" + "5a" + "21"), "\(res)")
            // truncate -s: shrink, then grow with zeros.
            #expect(try box.sh("truncate -s 4 \(q(f))").status == 0)
            #expect(try box.findGeneric("w", "f") == Array("ABYr".utf8))
            #expect(try box.sh("truncate -s 6 \(q(f))").status == 0)
            #expect(try box.findGeneric("w", "f") == Array("ABYr".utf8) + [0, 0])
            #expect(try box.sh("stat -c %s \(q(f))").stdout == "6\n")
            #expect(try box.sh(": > \(q(f))").status == 0)
            #expect(try box.findGeneric("w", "f") == [])
        }
    }

    @Test("O_EXCL on an existing item is EEXIST; O_CREAT of a new one adds it")
    func exclusiveCreate() throws {
        try withMount(setup: { try $0.addGeneric("x", "exists", "old") }) { box in
            let res = try box.pyResults(
                """
                d = sys.argv[1]
                t('excl', wfd, d + '/exists', os.O_WRONLY | os.O_CREAT | os.O_EXCL, b'new')
                t('after', read, d + '/exists')
                t('exclnew', wfd, d + '/fresh', os.O_WRONLY | os.O_CREAT | os.O_EXCL, b'fresh-secret')
                t('excltwice', wfd, d + '/fresh', os.O_WRONLY | os.O_CREAT | os.O_EXCL, b'again')
                t('nocreat', wfd, d + '/missing', os.O_WRONLY, b'x')
                """, [box.mnt + "/genp/x"])
            #expect(res["excl"] == "EEXIST" && res["after"] == "OK " + "old".hexUTF8, "\(res)")
            #expect(res["exclnew"] == "OK" && res["excltwice"] == "EEXIST", "\(res)")
            #expect(res["nocreat"] == "ENOENT", "\(res)")
            #expect(try box.findGeneric("x", "fresh") == Array("fresh-secret".utf8))
        }
    }

    @Test("two handles on a new file: the later close's bytes win, nothing is lost")
    func twoHandlesOnNewFile() throws {
        try withMount { box in
            let res = try box.pyResults(
                """
                p = sys.argv[1]
                os.mkdir(os.path.dirname(p))
                def run():
                    a = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
                    os.write(a, b'first')
                    b = os.open(p, os.O_RDWR)
                    os.close(a)
                    os.lseek(b, 0, 0)
                    os.write(b, b'SECOND-VERSION')
                    os.close(b)
                t('run', run)
                t('content', read, p)
                """, [box.mnt + "/genp/two/handles"])
            #expect(res["run"] == "OK", "\(res)")
            #expect(try box.findGeneric("two", "handles") == Array("SECOND-VERSION".utf8), "\(res)")
        }
    }

    @Test("three descriptors on one item, the first one closed, the item deleted: the others still fstat and read it")
    func handlesOnOneItemOutliveTheFirstAndTheItem() throws {
        try withMount(setup: { try $0.addGeneric("three", "f", "kept-secret") }) { box in
            let res = try box.pyResults(
                """
                p = sys.argv[1]
                a = os.open(p, os.O_RDONLY)
                b = os.open(p, os.O_RDONLY)
                c = os.open(p, os.O_RDONLY)
                os.close(a)
                os.unlink(p)
                t('gone', os.stat, p)
                t('bsize', lambda: os.fstat(b).st_size)
                t('bread', os.pread, b, 100, 0)
                os.close(b)
                t('csize', lambda: os.fstat(c).st_size)
                t('cread', os.pread, c, 100, 0)
                os.close(c)
                """, [box.mnt + "/genp/three/f"])
            let secret = Array("kept-secret".utf8)
            #expect(res["gone"] == "ENOENT", "\(res)")
            // The daemon answers these from the handles still open on the inode, whichever was
            // opened first and whichever closed first.
            #expect(res["bsize"] == "OK \(secret.count)" && res["csize"] == "OK \(secret.count)", "\(res)")
            #expect(res["bread"] == "OK " + secret.hex && res["cread"] == "OK " + secret.hex, "\(res)")
        }
    }

    @Test("exactly 1 MiB is accepted")
    func oneMiB() throws {
        try withMount { box in
            let res = try box.pyResults(
                """
                p = sys.argv[1]
                os.mkdir(os.path.dirname(p))
                data = bytes(range(256)) * 4096
                t('write', write, p, data)
                t('size', lambda: os.stat(p).st_size)
                t('same', lambda: read(p) == data)
                """, [box.mnt + "/genp/big/m"])
            #expect(res["write"] == "OK" && res["size"] == "OK 1048576" && res["same"] == "OK True", "\(res)")
        }
    }

    @Test("a 1 MiB + 1 write fails with EFBIG and leaves the old secret intact")
    func oneMiBPlusOne() throws {
        try withMount(setup: { box in
            try box.addGeneric("big", "rw", "old-rw")
            try box.addGeneric("big", "trunc", "old-trunc")
            try box.addGeneric("big", "ts", "old-ts")
        }) { box in
            // A careful writer: write everything (retrying short writes), then close.
            let res = try box.pyResults(
                """
                def write_all(p, flags, data):
                    fd = os.open(p, flags)
                    err = None
                    try:
                        off = 0
                        while off < len(data):
                            off += os.write(fd, data[off:])
                    except OSError as e:
                        err = e
                    try:
                        os.close(fd)
                    except OSError as e:
                        err = err or e
                    if err: raise err
                d = sys.argv[1]
                big = b'N' * (1048576 + 1)
                t('rw', write_all, d + '/rw', os.O_RDWR, big)
                t('rwafter', read, d + '/rw')
                t('trunc', write_all, d + '/trunc', os.O_WRONLY | os.O_TRUNC, big)
                t('truncafter', read, d + '/trunc')
                t('new', write_all, d + '/newbig', os.O_WRONLY | os.O_CREAT | os.O_EXCL, big)
                t('newafter', lambda: os.path.exists(d + '/newbig') and len(read(d + '/newbig')))
                """, [box.mnt + "/genp/big"], timeout: 30)
            #expect(res["rw"] == "EFBIG", "1 MiB + 1 over an existing item (O_RDWR): \(res["rw"] ?? "nil")")
            #expect(
                res["rwafter"] == "OK " + "old-rw".hexUTF8,
                "old secret not intact after a failed O_RDWR write; now \(res["rwafter"] ?? "nil")")
            #expect(res["trunc"] == "EFBIG", "1 MiB + 1 with O_TRUNC: \(res["trunc"] ?? "nil")")
            #expect(
                res["truncafter"] == "OK " + "old-trunc".hexUTF8,
                "old secret not intact after a failed O_TRUNC write; now \(res["truncafter"] ?? "nil")")
            #expect(res["new"] == "EFBIG", "\(res["new"] ?? "nil")")
            // creat(2) made the item (empty); the refused write stored nothing in it.
            #expect(
                res["newafter"] == "OK 0",
                "a failed new 1 MiB + 1 write left bytes behind: \(res["newafter"] ?? "nil")")
            // truncate(2) past the limit.
            let tr = try box.sh("truncate -s 1048577 \(q(box.mnt + "/genp/big/ts"))")
            #expect(tr.status != 0 && tr.stderr.contains("File too large"), "\(tr.summary)")
            let afterTruncate = try box.secretSummary("big", "ts")
            #expect(afterTruncate == "old-ts", "truncate -s 1048577 changed the secret: \(afterTruncate)")
            // The shell's way.
            let sh = try box.sh("head -c 1048577 /dev/zero > \(q(box.mnt + "/genp/big/ts"))", timeout: 30)
            #expect(sh.status != 0 && sh.stderr.contains("File too large"), "\(sh.summary)")
            #expect(
                try box.secretSummary("big", "ts") == "old-ts", "old secret not intact after head -c 1048577 > item")
        }
    }

    @Test("a commit that fails is reported by close(2)")
    func failedCommitReportedByClose() throws {
        try withMount(setup: { try $0.addGeneric("c", "victim", "old") }) { box in
            // The item disappears (through the CLI) between the write and the close, so the
            // commit at close cannot happen. The writer waits for a go file; no other process
            // holds its descriptor (a forked child's close would flush it early).
            let go = box.root + "/go"
            let writer = try box.spawn(
                "/usr/bin/python3",
                [
                    "-c",
                    pythonPrelude + """
                        p = sys.argv[1]
                        fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
                        os.write(fd, b'new-secret')
                        print('ready', flush=True)
                        for _ in range(1000):
                            if os.path.exists(sys.argv[2]): break
                            time.sleep(0.01)
                        t('close', os.close, fd)
                        """, box.mnt + "/genp/c/victim", go,
                ])
            #expect(waitUntil(10) { writer.stdoutSoFar.contains("ready") }, "writer not ready")
            let del = try box.cli(["delete-generic-password"] + box.unlockArgs + ["-s", "c", "-a", "victim"])
            #expect(del.status == 0, "\(del.summary)")
            FileManager.default.createFile(atPath: go, contents: nil)
            let r = writer.wait(timeout: 20)
            let close = r.lines.first { $0.hasPrefix("close ") }
            #expect(
                close != nil && close != "close OK",
                "close(2) returned 0 for a commit that could not happen: \(r.summary)")
            #expect(try box.findGeneric("c", "victim") == nil, "the deleted item came back")
        }
    }

    @Test("unlink deletes the item")
    func unlink() throws {
        try withMount(setup: { box in
            try box.addGeneric("u", "gone", "bye")
            try box.addGeneric("u", "stays", "hi")
        }) { box in
            let rm = try box.sh("rm \(q(box.mnt + "/genp/u/gone"))")
            #expect(rm.status == 0, "\(rm.summary)")
            #expect(try box.findGeneric("u", "gone") == nil)
            #expect(try box.findGeneric("u", "stays") == Array("hi".utf8))
            #expect(try box.sh("ls \(q(box.mnt + "/genp/u"))").lines == ["stays"])
            let again = try box.pyResults("t('unlink', os.unlink, sys.argv[1])", [box.mnt + "/genp/u/gone"])
            #expect(again["unlink"] == "ENOENT", "\(again)")
        }
    }

    @Test(
        "rename: changes key attributes, replaces a target atomically, honours RENAME_NOREPLACE, EXDEV across classes")
    func rename() throws {
        try withMount(setup: { box in
            try box.addGeneric("r", "src", "source-secret", extra: ["-j", "keep this comment"])
            try box.addGeneric("r", "target", "target-secret")
            try box.addGeneric("r", "other", "other-secret")
            try box.addGeneric("r2", "exists", "r2-secret")
            try box.addGeneric("r", "cross", "cross-secret")
        }) { box in
            let g = box.mnt + "/genp"
            // mv within a service: the account changes, attributes and content travel.
            #expect(try box.sh("mv \(q(g + "/r/src")) \(q(g + "/r/renamed"))").status == 0)
            let items = try box.dump()
            let moved = try #require(
                items.first { $0["service"] == "r" && $0["account"] == "renamed" }, "\(items.map(\.attributes))")
            #expect(moved["comment"] == "keep this comment")
            #expect(!items.contains { $0["account"] == "src" })
            #expect(try box.findGeneric("r", "renamed") == Array("source-secret".utf8))
            // mv onto an existing item replaces it: one item left, with the source's secret.
            let countBefore = items.count
            #expect(try box.sh("mv \(q(g + "/r/renamed")) \(q(g + "/r/target"))").status == 0)
            #expect(try box.findGeneric("r", "target") == Array("source-secret".utf8))
            #expect(try box.findGeneric("r", "renamed") == nil)
            #expect(try box.dump().count == countBefore - 1)
            // mv -n does not replace.
            _ = try box.sh("mv -n \(q(g + "/r/other")) \(q(g + "/r/target"))")
            #expect(try box.findGeneric("r", "target") == Array("source-secret".utf8))
            #expect(try box.findGeneric("r", "other") == Array("other-secret".utf8))
            let res = try box.pyResults(
                """
                g = sys.argv[1]
                t('noreplace', renameat2, g + '/r/other', g + '/r/target', 1)
                t('exchange', renameat2, g + '/r/other', g + '/r/target', 2)
                t('plain', os.rename, g + '/r/other', g + '/r2/moved')
                t('plainover', os.rename, g + '/r2/moved', g + '/r2/exists')
                t('xdev', os.rename, g + '/r/cross', sys.argv[2] + '/keys/cross')
                t('xdevinet', os.rename, g + '/r/cross', sys.argv[2] + '/inet/cross')
                t('badname', os.rename, g + '/r/cross', g + '/r/bad%zz')
                t('missing', os.rename, g + '/r/nope', g + '/r/nope2')
                t('listing', os.listdir, g + '/r2')
                """, [g, box.mnt])
            #expect(res["noreplace"] == "EEXIST", "\(res)")
            #expect(res["exchange"] == "EINVAL" || res["exchange"] == "OK", "\(res)")
            #expect(res["plain"] == "OK" && res["plainover"] == "OK", "\(res)")
            #expect(res["listing"] == "OK exists", "\(res)")
            #expect(try box.findGeneric("r2", "exists") == Array("other-secret".utf8))
            #expect(res["xdev"] == "EXDEV" && res["xdevinet"] == "EXDEV", "\(res)")
            #expect(res["badname"] == "EINVAL" && res["missing"] == "ENOENT", "\(res)")
            #expect(try box.findGeneric("r", "cross") == Array("cross-secret".utf8), "a refused rename lost the item")
            // Renaming a service directory moves every item in it.
            #expect(try box.sh("mv \(q(g + "/r2")) \(q(g + "/r3"))").status == 0)
            #expect(try box.findGeneric("r3", "exists") == Array("other-secret".utf8))
            #expect(try box.findGeneric("r2", "exists") == nil)
        }
    }

    @Test("files are 0600 and directories 0700, owned by the mounting user; sizes and times from the item")
    func modesOwnersSizesTimes() throws {
        try withMount(setup: { box in
            try box.addGeneric("m", "a", "twelve bytes")
            try box.addInternet(["-s", "host.example", "-a", "u"], "inet")
        }) { box in
            let uid = getuid(), gid = getgid()
            let files = try box.sh("cd \(q(box.mnt)) && stat -c '%a %u %g %s %F' genp/m/a inet/host.example/u")
            #expect(
                files.lines == ["600 \(uid) \(gid) 12 regular file", "600 \(uid) \(gid) 4 regular file"],
                "\(files.summary)")
            let dirs = try box.sh(
                "cd \(q(box.mnt)) && stat -c '%a %u %g %F' . genp genp/m inet inet/host.example cert keys idnt")
            #expect(
                dirs.lines.count == 8 && dirs.lines.allSatisfy { $0 == "700 \(uid) \(gid) directory" },
                "\(dirs.summary)")
            // chmod is accepted (editors call it) but the mode stays 0600.
            _ = try box.sh("chmod 644 \(q(box.mnt + "/genp/m/a"))")
            #expect(try box.sh("stat -c %a \(q(box.mnt + "/genp/m/a"))").stdout == "600\n")
            // mtime is the item's modificationDate.
            let xattr = try box.sh(
                "getfattr --absolute-names --only-values -n user.keychain.modificationDate \(q(box.mnt + "/genp/m/a"))")
            let iso = ISO8601DateFormatter()
            let mdat = try #require(
                iso.date(from: xattr.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), "\(xattr.summary)")
            let mtime = try box.sh("stat -c %Y \(q(box.mnt + "/genp/m/a"))").stdout.trimmingCharacters(
                in: .whitespacesAndNewlines)
            #expect(Int(mtime) == Int(mdat.timeIntervalSince1970), "mtime \(mtime) vs modificationDate \(mdat)")
            // A write changes size and mtime.
            usleep(1_100_000)
            #expect(try box.sh("printf 'much longer secret now' > \(q(box.mnt + "/genp/m/a"))").status == 0)
            let after = try box.sh("stat -c '%s %Y' \(q(box.mnt + "/genp/m/a"))").stdout.split(separator: " ")
            #expect(after.first == "22", "\(after)")
            #expect(
                (Int(after.last?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "") ?? 0)
                    > Int(mdat.timeIntervalSince1970), "mtime did not advance: \(after)")
        }
    }
}
