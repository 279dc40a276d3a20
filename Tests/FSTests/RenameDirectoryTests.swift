import Foundation
import Testing

/// Issue 28, point 8 (pjdfstest's rename/20.t found it): a service/server directory renamed onto
/// an empty one replaces it. The listing shows the new name once, at once, and `rmdir` removes
/// it from the listing at once; the name that was replaced does not come back. Real `mv -T`
/// (RENAME_NOREPLACE first, then a plain rename), `ls`, `rmdir` and `stat`, with no sleeps.
@Suite("directory rename onto an empty directory (issue 28)")
struct RenameDirectoryTests {
    /// Runs `script` in `dir` and returns its stdout lines; the script must succeed.
    func lines(_ box: TestSandbox, _ dir: String, _ script: String, sourceLocation: SourceLocation = #_sourceLocation)
        throws -> [String]
    {
        let r = try box.sh("cd \(q(dir)) && \(script)")
        #expect(r.status == 0, "\(script): \(r.summary)", sourceLocation: sourceLocation)
        return r.lines
    }

    @Test("mv -T of an empty directory onto an empty one: listed once, rmdir removes it", arguments: ["genp", "inet"])
    func emptyOntoEmpty(_ classDir: String) throws {
        try withMount("emptyOntoEmpty-\(classDir)") { box in
            let dir = box.mnt + "/" + classDir
            let (a, b) = classDir == "genp" ? ("A", "B") : ("https:a.example", "https:b.example")
            #expect(try lines(box, dir, "mkdir \(a) \(b) && ls") == [a, b])
            #expect(try lines(box, dir, "mv -T \(a) \(b) && ls") == [b])
            #expect(try lines(box, dir, "stat -c %F \(b)") == ["directory"])
            #expect(try lines(box, dir, "rmdir \(b) && ls") == [])
            let gone = try box.sh("cd \(q(dir)) && stat \(b)")
            #expect(gone.status != 0 && gone.stderr.contains("No such file"), "\(gone.summary)")
            #expect(try lines(box, dir, "ls") == [])
        }
    }

    @Test("mv -T of a directory with items onto an empty one: listed once, with its items; rmdir after they go")
    func fullOntoEmpty() throws {
        try withMount { box in
            let dir = box.mnt + "/genp"
            #expect(try lines(box, dir, "mkdir C D && printf one > C/u && printf two > C/v && ls") == ["C", "D"])
            #expect(try lines(box, dir, "mv -T C D && ls") == ["D"])
            #expect(try lines(box, dir, "ls D && cat D/u") == ["u", "v", "one"])
            #expect(try box.secretSummary("D", "v") == "two")
            #expect(try box.secretSummary("C", "u") == "<not found>")
            let notEmpty = try box.sh("cd \(q(dir)) && rmdir D")
            #expect(notEmpty.status != 0 && notEmpty.stderr.contains("not empty"), "\(notEmpty.summary)")
            #expect(try lines(box, dir, "rm D/u D/v && rmdir D && ls") == [])
            let gone = try box.sh("cd \(q(dir)) && stat D")
            #expect(gone.status != 0 && gone.stderr.contains("No such file"), "\(gone.summary)")
        }
    }

    @Test("RENAME_NOREPLACE onto an empty directory is EEXIST; onto one with items, a plain rename is ENOTEMPTY")
    func noReplaceAndNotEmpty() throws {
        try withMount { box in
            let dir = box.mnt + "/genp"
            let r = try box.run(
                "/usr/bin/python3",
                [
                    "-c",
                    """
                    import ctypes, errno, os, sys
                    libc = ctypes.CDLL(None, use_errno=True)
                    d = sys.argv[1]
                    os.mkdir(d + '/E'); os.mkdir(d + '/F'); os.mkdir(d + '/G')
                    open(d + '/G/x', 'w').write('x')
                    rc = libc.renameat2(-100, (d + '/E').encode(), -100, (d + '/F').encode(), 1)
                    print('noreplace', errno.errorcode.get(ctypes.get_errno(), 'OK') if rc else 'OK')
                    try:
                        os.rename(d + '/E', d + '/G'); print('notempty OK')
                    except OSError as e:
                        print('notempty', errno.errorcode[e.errno])
                    print('ls', ' '.join(sorted(os.listdir(d))))
                    """, dir,
                ])
            #expect(r.lines == ["noreplace EEXIST", "notempty ENOTEMPTY", "ls E F G"], "\(r.summary)")
        }
    }
}
