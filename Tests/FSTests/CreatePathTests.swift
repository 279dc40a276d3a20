import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 29, items 1 and 5: the create path. A created file is read back at once by another
/// process and after a remount, whatever the writer's sequence; it costs one durable commit
/// (one fdatasync of the log, counted with strace on the daemon); and two writers that each
/// open an empty item with O_TRUNC leave one writer's whole value, never a mix.
@Suite("the create path")
struct CreatePathTests {
    static let sequences = """
        d = sys.argv[1]
        def put(p, v, flags, sync):
            fd = os.open(p, os.O_WRONLY | flags, 0o600)
            os.write(fd, v)
            if sync: os.fsync(fd)
            os.close(fd)
        # open(O_CREAT), write, fsync, close
        put(d + '/fsynced', b'value-fsynced', os.O_CREAT, True)
        # open(O_CREAT|O_EXCL), write, close
        put(d + '/exclusive', b'value-exclusive', os.O_CREAT | os.O_EXCL, False)
        # a shell's > f: O_CREAT|O_TRUNC
        put(d + '/shell', b'value-shell', os.O_CREAT | os.O_TRUNC, False)
        # touch, then write
        os.close(os.open(d + '/touched', os.O_WRONLY | os.O_CREAT, 0o600))
        put(d + '/touched', b'value-touched', os.O_TRUNC, False)
        # touch alone: an empty item
        os.close(os.open(d + '/empty', os.O_WRONLY | os.O_CREAT, 0o600))
        # the name is there for every process while the creator still holds it open
        fd = os.open(d + '/held', os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        r = subprocess.run(['/usr/bin/stat', '-c', '%s', d + '/held'], capture_output=True)
        print('held-seen', r.returncode, r.stdout.decode().strip())
        os.write(fd, b'value-held')
        os.close(fd)
        print('done')
        """

    static let expected = [
        "fsynced": "value-fsynced", "exclusive": "value-exclusive", "shell": "value-shell",
        "touched": "value-touched", "empty": "", "held": "value-held",
    ]

    /// `cat` of each expected file, each from a process of its own.
    static func readBack(_ box: TestSandbox, _ dir: String, _ when: String) throws {
        for (name, value) in expected.sorted(by: { $0.key < $1.key }) {
            let r = try box.run("/usr/bin/cat", [dir + "/" + name])
            #expect(r.status == 0 && r.stdout == value, "\(when): cat \(name): \(r.summary)")
        }
    }

    @Test("create sequences read back at once from another process, and after a remount")
    func sequencesReadBack() throws {
        try withMount(setup: { try $0.addGeneric("made", "seed", "s") }) { box in
            let dir = box.mnt + "/genp/made"
            let r = try box.py("import subprocess\n" + Self.sequences, [dir])
            #expect(r.status == 0 && r.lines.last == "done", "\(r.summary)")
            #expect(r.lines.contains("held-seen 0 0"), "the new name was not there for another process: \(r.stdout)")
            try Self.readBack(box, dir, "at once")
            try box.unmount()
            try box.mount()
            try Self.readBack(box, dir, "after a remount")
        }
    }

    /// The daemon's fsync and fdatasync calls on the vault's log (and main file) while `body`
    /// runs, from `strace -f -y -p DAEMON`.
    static func logSyncs(_ box: TestSandbox, _ body: () throws -> Void) throws -> [String] {
        let pid = try #require(box.daemonPid, "no daemon")
        let trace = box.root + "/syncs-\(UInt32.random(in: 0...UInt32.max))"
        let tracer = try box.spawn(
            "/usr/bin/strace", ["-f", "-y", "-e", "trace=fsync,fdatasync", "-o", trace, "-p", "\(pid)"])
        defer {
            tracer.kill(SIGINT)
            _ = tracer.wait(timeout: 10)
        }
        // strace attaches to each thread, one by one: wait until it is on all of them.
        usleep(1_500_000)
        try body()
        usleep(200_000)
        tracer.kill(SIGINT)
        _ = tracer.wait(timeout: 10)
        let text = (try? String(contentsOfFile: trace, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map(String.init).filter {
            ($0.contains("fsync(") || $0.contains("fdatasync(")) && $0.contains(box.vault)
        }
    }

    @Test("a create + write + fsync + close costs one fdatasync of the vault, and so does a touch")
    func oneSyncPerCreate() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/strace") else { return }
        try withMount(setup: { try $0.addGeneric("synced", "seed", "s") }) { box in
            let dir = box.mnt + "/genp/synced"
            let creates = 20
            // One create first: the first commit after the mount starts the log over, and SQLite
            // syncs a new log's header once (a restart after each full checkpoint, not per commit).
            let warm = try box.sh("printf warm > \(q(dir + "/warm"))")
            #expect(warm.status == 0, "\(warm.summary)")
            let syncs = try Self.logSyncs(box) {
                let r = try box.py(
                    """
                    d = sys.argv[1]
                    for i in range(int(sys.argv[2])):
                        fd = os.open(d + '/f%03d' % i, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                        os.write(fd, b'value-%03d' % i)
                        os.fsync(fd)
                        os.close(fd)
                    print('done')
                    """, [dir, "\(creates)"])
                #expect(r.lines.last == "done", "\(r.summary)")
            }
            #expect(
                syncs.count == creates,
                "\(syncs.count) syncs of the vault for \(creates) creates:\n\(syncs.joined(separator: "\n"))")
            let touched = try Self.logSyncs(box) {
                let r = try box.sh("touch \(q(dir + "/touched"))")
                #expect(r.status == 0, "\(r.summary)")
            }
            #expect(
                touched.count == 1,
                "a touch synced the vault \(touched.count) times:\n\(touched.joined(separator: "\n"))")
            let r = try box.run("/usr/bin/cat", [dir + "/f007"])
            #expect(r.stdout == "value-007", "\(r.summary)")
        }
    }

    @Test(
        "8 writers creating with fsync in one directory at once: every file reads back, one fdatasync per create at most"
    )
    func concurrentCreates() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/strace") else { return }
        try withMount(setup: { try $0.addGeneric("many", "seed", "s") }) { box in
            let dir = box.mnt + "/genp/many"
            let warm = try box.sh("printf warm > \(q(dir + "/warm"))")
            #expect(warm.status == 0, "\(warm.summary)")
            // Creates join the batches of the other writers' fsyncs (CommitQueue.swift): each
            // returns at its commit, and the fsyncs after it cover them.
            let syncs = try Self.logSyncs(box) {
                let r = try box.py(
                    """
                    import threading
                    d = sys.argv[1]
                    errors = []
                    def writer(w):
                        try:
                            for i in range(15):
                                fd = os.open(d + '/c%d-%02d' % (w, i), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                                os.write(fd, b'value-%d-%02d' % (w, i))
                                os.fsync(fd)
                                os.close(fd)
                        except OSError as e:
                            errors.append('%d: %s' % (w, e))
                    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
                    for t in threads: t.start()
                    for t in threads: t.join()
                    print('errors', len(errors), errors[:3])
                    print('done')
                    """, [dir])
                #expect(r.lines.last == "done" && r.lines.contains("errors 0 []"), "\(r.summary)")
            }
            // At most one per create (a create's own commit never syncs), and the few of SQLite's
            // checkpoints (the log, then the vault file, each ~1,000 pages of log: ~25 a create).
            #expect(syncs.count <= 120 + 12, "\(syncs.count) syncs of the vault for 120 creates")
            func readBack(_ when: String) throws {
                let r = try box.py(
                    """
                    d = sys.argv[1]
                    bad = [n for n in ('c%d-%02d' % (w, i) for w in range(8) for i in range(15))
                           if read(d + '/' + n) != b'value-' + n[1:].encode()]
                    print('bad', len(bad), bad[:3])
                    """, [dir])
                #expect(r.lines.last == "bad 0 []", "\(when): \(r.summary)")
            }
            try readBack("at once")
            try box.unmount()
            try box.mount()
            try readBack("after a remount")
        }
    }

    @Test("two writers opening an empty item with O_TRUNC leave one whole value, 10 times of 10")
    func truncatingWritersOnEmpty() throws {
        try withMount(setup: { try $0.addGeneric("trunc", "seed", "s") }) { box in
            let dir = box.mnt + "/genp/trunc"
            let r = try box.py(
                """
                d = sys.argv[1]
                for i in range(10):
                    p = d + '/e%02d' % i
                    os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
                    short, long = b'short-%02d' % i, b'the-longer-value-%02d' % i
                    a = os.open(p, os.O_WRONLY | os.O_TRUNC)
                    b = os.open(p, os.O_WRONLY | os.O_TRUNC)
                    first, second = (a, b) if i % 2 == 0 else (b, a)
                    os.write(b, long)
                    os.write(a, short)
                    os.close(first)
                    os.close(second)
                    got = read(p)
                    whole = got in (short, long)
                    print('e%02d' % i, 'whole' if whole else 'MIXED ' + got.decode(errors='replace'))
                # and from two processes at once
                for i in range(10):
                    p = d + '/p%02d' % i
                    os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
                    values = [b'writer-one-%02d' % i, b'w2-%02d' % i]
                    go_r, go_w = os.pipe()
                    kids = []
                    for v in values:
                        pid = os.fork()
                        if pid == 0:
                            fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
                            os.read(go_r, 1)
                            os.write(fd, v)
                            os.close(fd)
                            os._exit(0)
                        kids.append(pid)
                    time.sleep(0.05)
                    os.write(go_w, b'xx')
                    for k in kids: os.waitpid(k, 0)
                    got = read(p)
                    print('p%02d' % i, 'whole' if got in values else 'MIXED ' + got.decode(errors='replace'))
                """, [dir])
            #expect(r.status == 0, "\(r.summary)")
            let results = labelled(r)
            #expect(results.count == 20, "\(r.summary)")
            for (name, result) in results.sorted(by: { $0.key < $1.key }) {
                #expect(result == "whole", "\(name): \(result)")
            }
        }
    }
}
