import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 3, point 6: changes made behind the mount's back show within one second.
@Suite("consistency with the CLI")
struct ConsistencyTests {

    /// Polls `check` (each call spawns a process) until true or 1.5 s; returns the time taken.
    static func within(_ seconds: Double = 1.5, _ check: () throws -> Bool) rethrows -> Double? {
        let start = Date()
        while true {
            if try check() { return Date().timeIntervalSince(start) }
            if Date().timeIntervalSince(start) > seconds { return nil }
            usleep(50_000)
        }
    }

    @Test("items added, changed and deleted through the CLI show through the mount within 1 s")
    func cliChangesVisible() throws {
        try withMount(setup: { try $0.addGeneric("cons", "x", "first") }) { box in
            let f = box.mnt + "/genp/cons/x"
            // Warm the kernel's caches: names, attributes, the directory listing.
            #expect(try box.sh("ls -l \(q(box.mnt + "/genp/cons")) >/dev/null && cat \(q(f))").stdout == "first")

            // Change (a longer secret: the cached size must not cut it).
            try box.addGeneric("cons", "x", "second, and longer", extra: ["-U"])
            let changed = try Self.within {
                try box.sh("cat \(q(f)); echo; stat -c %s \(q(f))").stdout == "second, and longer\n18\n"
            }
            #expect(changed != nil, "an update through the CLI is not visible after 1.5 s")

            // Add: a new service directory and item.
            try box.addGeneric("cons-new", "y", "added")
            let added = try Self.within {
                let r = try box.sh("ls \(q(box.mnt + "/genp")); cat \(q(box.mnt + "/genp/cons-new/y"))")
                return r.lines.contains("cons-new") && r.stdout.hasSuffix("added")
            }
            #expect(added != nil, "an add through the CLI is not visible after 1.5 s")

            // Delete.
            let del = try box.cli(["delete-generic-password"] + box.unlockArgs + ["-s", "cons", "-a", "x"])
            #expect(del.status == 0, "\(del.summary)")
            let deleted = try Self.within {
                let r = try box.sh("test -e \(q(f)) && echo present; ls \(q(box.mnt + "/genp/cons"))")
                return !r.stdout.contains("present") && !r.lines.contains("x")
            }
            #expect(deleted != nil, "a delete through the CLI is not visible after 1.5 s")

            // Attributes changed behind the mount's back.
            #expect(
                try box.sh(
                    "getfattr --absolute-names --only-values -n user.keychain.comment \(q(box.mnt + "/genp/cons-new/y"))"
                ).status != 0)
            try box.addGeneric("cons-new", "y", "added", extra: ["-U", "-j", "late comment"])
            let attr = try Self.within {
                try box.sh(
                    "getfattr --absolute-names --only-values -n user.keychain.comment \(q(box.mnt + "/genp/cons-new/y"))"
                ).stdout == "late comment"
            }
            #expect(attr != nil, "an attribute change through the CLI is not visible after 1.5 s")
        }
    }

    @Test("an open descriptor reads its snapshot; a new open sees a CLI update at once (direct_io, no page cache)")
    func readsReachTheStore() throws {
        try withMount(setup: { try $0.addGeneric("d", "x", "version-1") }) { box in
            let go = box.root + "/go"
            let reader = try box.spawn(
                "/usr/bin/python3",
                [
                    "-c",
                    pythonPrelude + """
                        fd = os.open(sys.argv[1], os.O_RDONLY)
                        print('first', os.pread(fd, 100, 0).decode(), flush=True)
                        for _ in range(1000):
                            if os.path.exists(sys.argv[2]): break
                            time.sleep(0.01)
                        print('second', os.pread(fd, 100, 0).decode(), flush=True)
                        os.close(fd)
                        fd = os.open(sys.argv[1], os.O_RDONLY)
                        print('reopened', os.pread(fd, 100, 0).decode(), flush=True)
                        os.close(fd)
                        """, box.mnt + "/genp/d/x", go,
                ])
            #expect(waitUntil(10) { reader.stdoutSoFar.contains("first") }, "reader not started")
            try box.addGeneric("d", "x", "version-2, longer", extra: ["-U"])
            FileManager.default.createFile(atPath: go, contents: nil)
            let r = reader.wait(timeout: 20)
            #expect(
                r.lines == ["first version-1", "second version-1", "reopened version-2, longer"], "\(r.summary)")
        }
    }

    @Test("a change through the mount is visible to the CLI at once, and to another process on the mount")
    func mountChangesVisible() throws {
        try withMount(setup: { try $0.addGeneric("m", "x", "before") }) { (box: FSSandbox) throws in
            let f = box.mnt + "/genp/m/x"
            #expect(try box.sh("cat \(q(f))").stdout == "before")
            #expect(try box.sh("printf after > \(q(f))").status == 0)
            #expect(try box.findGeneric("m", "x") == Array("after".utf8))
            #expect(try box.sh("cat \(q(f)); stat -c %s \(q(f))").stdout == "after5\n")
            #expect(
                try box.sh("setfattr -n user.keychain.account -v y \(q(f)) && ls \(q(box.mnt + "/genp/m"))").lines == [
                    "y"
                ])
            #expect(try box.findGeneric("m", "y") == Array("after".utf8))
        }
    }
}
