import CFuse
import Foundation
import Keychain
import KeychainCrypto

/// Figures of one mounted filesystem (the floor or keychainfs at one vault size).
struct FSFigures {
    var openReadClose = Samples()
    var cat = Samples()
    var xattrValue = Samples()  // getxattr user.keychain.account (a real value)
    var xattrAbsent = Samples()  // getxattr security.selinux (ENODATA: what ls -l asks)
    var readdirSmall = Samples()  // opendir + getdents to the end + closedir, 1,000 entries
    var readdirLarge = Samples()  // … 10,000 entries
    var lsSmallCold = Samples(), lsSmallWarm = Samples()
    var lsLargeCold = Samples(), lsLargeWarm = Samples()
    var lookupSmallCold = Samples()  // stat of /genp/d1k after the entry timeout expired
    var lookupLargeCold = Samples()  // stat of /genp/d10k …
    var writes = Samples()  // open O_WRONLY|O_TRUNC, write 12 bytes, close
    var startup = Samples()  // spawn → live mount
    var reportedOpen = Samples(), reportedUnlock = Samples(), reportedMount = Samples()  // built-in daemon only
    var benchOpen = Samples(), benchUnlock = Samples()  // Keychain.open / unlock in the bench process
    var benchKDF = Samples()  // Argon2id alone, next to each of those unlocks
    var rssAfterMount = Double.nan
    var rssAfterWork = Double.nan
    var peakRSS = Double.nan
}

struct FSSizeFigures {
    var size = 0
    var floor = FSFigures()
    var kc = FSFigures()
    var hasLarge = false
    /// Durable-commit floor: a raw SQLite autocommit update of one row at this size.
    var rawUpdate = Samples()
    var cpus = ""
}

/// Runs the filesystem measurements: the floor and keychainfs mounted side by side, each
/// figure measured in alternating blocks (floor, keychainfs, keychainfs, floor, …) so slow
/// drift of the machine hits both alike.
final class FSBench {
    let directory: String
    /// The built `keychainfs` binary, or nil for the built-in daemon.
    let cli: String?
    private var floor: Daemon?
    private(set) var floorStartup = Samples()
    private(set) var floorReported = Samples()
    private(set) var floorRSSAfterMount = Double.nan

    init(directory: String, cli: String?) {
        self.directory = directory
        self.cli = cli
    }

    var floorMount: String { directory + "/mnt-floor" }
    func kcMount(_ size: Int) -> String { directory + "/mnt-kc-\(size)" }

    /// Mounts the floor three times (timing each) and keeps the last mount.
    func startFloor() throws {
        try FileManager.default.createDirectory(atPath: floorMount, withIntermediateDirectories: true)
        for round in 0..<3 {
            let d = try Daemon.start(.floor, mountpoint: floorMount, log: directory + "/floor.log")
            floorStartup.add(d.startupSeconds)
            floorReported.add(d.reported["mount_s"] ?? .nan)
            if round < 2 { try d.stop() } else { floor = d }
        }
        floorRSSAfterMount = floor!.rss
    }

    func stopFloor() throws { try floor?.stop(); floor = nil }

    func measure(_ vault: BenchVault) throws -> FSSizeFigures {
        guard let floor else { throw BenchError("the floor is not mounted") }
        var r = FSSizeFigures()
        r.size = vault.size
        r.hasLarge = Layout.hasLargeDirectory(vault.size)
        // The durable-commit floor: a raw SQLite table of the same rows and size.
        let raw = try RawSQLite(path: directory + "/raw-fs-\(vault.size).sqlite", shape: try vault.rowShape())
        try raw.fill(vault.size)
        var rng = SeededRandom(seed: 0xF5 ^ UInt64(vault.size))
        let mp = kcMount(vault.size)
        try FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)

        // What open + unlock cost at this size, measured here (the CLI daemon reports no breakdown).
        let passphrase = try BenchVault.passphrase()
        for _ in 0..<3 {
            let salt = Sodium.randomBytes(PasswordHashParameters.saltBytes)
            r.kc.benchKDF.add(
                try Clock.time {
                    _ = try KeyDerivation.passwordKey(passphrase: passphrase, salt: salt, parameters: .interactive)
                })
            var k: Keychain?
            r.kc.benchOpen.add(try Clock.time { k = try vault.open() })
            r.kc.benchUnlock.add(try Clock.time { try k!.unlock(passphrase: passphrase) })
        }

        // Mount + unlock, three times; the last mount stays for the measurements.
        Out.progress("  mounting keychainfs over \(Fmt.grouped(vault.size)) items (3 times)")
        var kc: Daemon!
        for round in 0..<3 {
            let d = try Daemon.start(
                .keychainfs(vault, cli: cli, stateDirectory: BenchVault.stateDirectory(directory)),
                mountpoint: mp, log: directory + "/kc-\(vault.size).log")
            r.kc.startup.add(d.startupSeconds)
            r.kc.reportedOpen.add(d.reported["open_s"] ?? .nan)
            r.kc.reportedUnlock.add(d.reported["unlock_s"] ?? .nan)
            r.kc.reportedMount.add(d.reported["mount_s"] ?? .nan)
            if round < 2 { try d.stop() } else { kc = d }
        }
        defer { try? kc.stop() }
        r.kc.rssAfterMount = kc.rss
        r.floor.startup = floorStartup
        r.floor.reportedMount = floorReported
        r.floor.rssAfterMount = floorRSSAfterMount
        r.cpus =
            "bench \(Affinity.current().map(String.init).joined(separator: ",")), floor daemon \(floor.cpus), keychainfs daemon \(kc.cpus)"

        let roots = [floor.mountpoint, kc.mountpoint]
        let secretIndex = 42
        let secretPath = { (root: String) in
            root + "/genp/\(Layout.service(secretIndex))/\(Layout.account(secretIndex))"
        }
        for root in roots {
            let n = try readOnce(secretPath(root))
            guard n == 12 else { throw BenchError("\(secretPath(root)) read \(n) bytes, expected 12") }
        }

        // Alternating blocks: round k measures floor then keychainfs if k is even, else the reverse.
        func alternate(_ rounds: Int, _ body: (_ which: Int, _ root: String) throws -> Void) rethrows {
            for k in 0..<rounds {
                for which in (k % 2 == 0 ? [0, 1] : [1, 0]) { try body(which, roots[which]) }
            }
        }
        func figures(_ which: Int) -> WritableKeyPath<FSSizeFigures, FSFigures> { which == 0 ? \.floor : \.kc }

        Out.progress("  open+read+close")
        try alternate(6) { w, root in
            let s = try openReadClose(secretPath(root), iterations: 2_000)
            r[keyPath: figures(w)].openReadClose.add(s)
        }
        Out.progress("  cat from a fresh process")
        try alternate(4) { w, root in
            for _ in 0..<50 {
                let (status, t) = try Spawn.run("/usr/bin/cat", [secretPath(root)])
                guard status == 0 else { throw BenchError("cat \(secretPath(root)) exited \(status)") }
                r[keyPath: figures(w)].cat.add(t)
            }
        }
        Out.progress("  getxattr")
        try alternate(4) { w, root in
            r[keyPath: figures(w)].xattrValue.add(
                try getxattrLoop(secretPath(root), name: "user.keychain.account", expect: 0, iterations: 1_000))
            r[keyPath: figures(w)].xattrAbsent.add(
                try getxattrLoop(secretPath(root), name: "security.selinux", expect: ENODATA, iterations: 1_000))
        }
        Out.progress("  readdir")
        let small = { (root: String) in root + "/genp/" + Layout.smallDirectory }
        let large = { (root: String) in root + "/genp/" + Layout.largeDirectory }
        try alternate(6) { w, root in
            for _ in 0..<3 {
                r[keyPath: figures(w)].readdirSmall.add(try readdirTimed(small(root), expect: Layout.smallCount))
            }
            if r.hasLarge {
                r[keyPath: figures(w)].readdirLarge.add(try readdirTimed(large(root), expect: Layout.largeCount))
            }
        }

        // `ls -l` and directory lookups, cold: after sleeping past the 1 s entry/attr
        // timeout, so every name is looked up again (as for a user who runs ls now and then).
        // Warm: the same ls again at once.
        Out.progress("  ls -l (cold and warm)")
        let env = ["LC_ALL=C", "PATH=/usr/bin:/bin"]
        func ls(
            _ dir: String, cold: WritableKeyPath<FSFigures, Samples>, warm: WritableKeyPath<FSFigures, Samples>,
            _ w: Int
        ) throws {
            let (s1, t1) = try Spawn.run("/usr/bin/ls", ["-l", dir], environment: env)
            let (s2, t2) = try Spawn.run("/usr/bin/ls", ["-l", dir], environment: env)
            guard s1 == 0, s2 == 0 else { throw BenchError("ls -l \(dir) failed (\(s1), \(s2))") }
            r[keyPath: figures(w).appending(path: cold)].add(t1)
            r[keyPath: figures(w).appending(path: warm)].add(t2)
        }
        for k in 0..<4 {
            Clock.sleep(1.2)
            for w in (k % 2 == 0 ? [0, 1] : [1, 0]) {
                try ls(small(roots[w]), cold: \.lsSmallCold, warm: \.lsSmallWarm, w)
            }
        }
        if r.hasLarge {
            for k in 0..<4 {
                Clock.sleep(1.2)
                for w in (k % 2 == 0 ? [0, 1] : [1, 0]) {
                    try ls(large(roots[w]), cold: \.lsLargeCold, warm: \.lsLargeWarm, w)
                }
            }
        }
        Out.progress("  cold directory lookups")
        for k in 0..<4 {
            Clock.sleep(1.2)
            for w in (k % 2 == 0 ? [0, 1] : [1, 0]) {
                // /genp itself is looked up untimed first, so each timed stat is one LOOKUP.
                _ = try statTimed(roots[w] + "/genp")
                r[keyPath: figures(w)].lookupSmallCold.add(try statTimed(small(roots[w])))
                if r.hasLarge { r[keyPath: figures(w)].lookupLargeCold.add(try statTimed(large(roots[w]))) }
            }
        }

        Out.progress("  durable writes")
        var counter = 0
        try alternate(4) { w, root in
            for _ in 0..<150 {
                let i = counter % 250
                counter += 1
                let path = root + "/genp/\(Layout.service(i))/\(Layout.account(i))"
                r[keyPath: figures(w)].writes.add(try writeTimed(path, Layout.secret(counter, tag: "wrt")))
            }
            if w == 1 { r.rawUpdate.add(try raw.timedUpdates(150, rng: &rng)) }
        }
        // The last write must be readable through the mount.
        for root in roots {
            let i = (counter - 1) % 250
            guard try readOnce(root + "/genp/\(Layout.service(i))/\(Layout.account(i))") == 12 else {
                throw BenchError("a written item did not read back")
            }
        }

        r.kc.rssAfterWork = kc.rss
        r.kc.peakRSS = kc.peakRSS
        r.floor.rssAfterWork = floor.rss
        r.floor.peakRSS = floor.peakRSS
        try kc.stop()
        return r
    }

    // MARK: Operations

    private func readOnce(_ path: String) throws -> Int {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { throw BenchError("open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var buf = [UInt8](repeating: 0, count: 4096)
        return read(fd, &buf, buf.count)
    }

    private func openReadClose(_ path: String, iterations: Int) throws -> Samples {
        var s = Samples()
        var buf = [UInt8](repeating: 0, count: 4096)
        try path.withCString { p in
            try buf.withUnsafeMutableBytes { b in
                for _ in 0..<iterations {
                    let t = Clock.now()
                    let fd = open(p, O_RDONLY)
                    guard fd >= 0 else { throw BenchError("open \(path): \(String(cString: strerror(errno)))") }
                    let n = read(fd, b.baseAddress, b.count)
                    let c = close(fd)
                    s.add(Clock.since(t))
                    guard n == 12, c == 0 else { throw BenchError("read \(path): \(n) bytes, close \(c)") }
                }
            }
        }
        return s
    }

    private func getxattrLoop(_ path: String, name: String, expect: Int32, iterations: Int) throws -> Samples {
        var s = Samples()
        var buf = [UInt8](repeating: 0, count: 1024)
        for _ in 0..<iterations {
            let t = Clock.now()
            let n = lgetxattr(path, name, &buf, buf.count)
            let e = errno
            s.add(Clock.since(t))
            if expect == 0 {
                guard n > 0 else { throw BenchError("getxattr \(name) on \(path): \(String(cString: strerror(e)))") }
            } else {
                guard n < 0, e == expect else {
                    throw BenchError("getxattr \(name) on \(path): expected errno \(expect), got \(n < 0 ? e : 0)")
                }
            }
        }
        return s
    }

    private func readdirTimed(_ path: String, expect: Int) throws -> Double {
        let t = Clock.now()
        guard let d = opendir(path) else { throw BenchError("opendir \(path): \(String(cString: strerror(errno)))") }
        var n = 0
        while readdir(d) != nil { n += 1 }
        closedir(d)
        let elapsed = Clock.since(t)
        guard n == expect + 2 else { throw BenchError("readdir \(path): \(n) entries, expected \(expect + 2)") }
        return elapsed
    }

    private func statTimed(_ path: String) throws -> Double {
        var st = stat()
        let t = Clock.now()
        let rc = stat(path, &st)
        let elapsed = Clock.since(t)
        guard rc == 0 else { throw BenchError("stat \(path): \(String(cString: strerror(errno)))") }
        return elapsed
    }

    private func writeTimed(_ path: String, _ data: [UInt8]) throws -> Double {
        let t = Clock.now()
        let fd = open(path, O_WRONLY | O_TRUNC)
        guard fd >= 0 else { throw BenchError("open \(path) for writing: \(String(cString: strerror(errno)))") }
        let n = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        let c = close(fd)
        let elapsed = Clock.since(t)
        guard n == data.count, c == 0 else {
            throw BenchError("write \(path): wrote \(n), close \(c): \(String(cString: strerror(errno)))")
        }
        return elapsed
    }

    // MARK: Printing

    static func printFloor(_ b: FSBench) {
        Out.line()
        Out.line(
            "Floor: in-memory low-level FUSE filesystem in a child process, same layout (/genp/d1k: 1,000 and /genp/d10k: 10,000 12-byte files), 1.0 s entry/attr timeouts, direct_io, ENODATA xattrs"
        )
        Out.line(
            "  mount (spawn → live, median of 3) \(Fmt.duration(b.floorStartup.p50)) (fuse_session_mount alone \(Fmt.duration(b.floorReported.p50))); RSS after mount \(Fmt.bytes(b.floorRSSAfterMount))"
        )
    }

    static func printFigures(_ r: FSSizeFigures, kdf: Double) {
        let f = r.floor, k = r.kc
        Out.line()
        Out.line("Filesystem at \(Fmt.grouped(r.size)) items (pinned: \(r.cpus))")
        var rows: [[String]] = [["figure", "floor", "keychainfs", "ratio", "target"]]
        func lat(_ name: String, _ a: Samples, _ b: Samples, target: String = "") {
            rows.append([name, Fmt.duration(a.p50), Fmt.duration(b.p50), Fmt.ratio(b.p50 / a.p50), target])
        }
        lat(
            "open+read+close p50", f.openReadClose, k.openReadClose,
            target: "≤ 1.50× " + verdict(k.openReadClose.p50 / f.openReadClose.p50, 1.5))
        rows.append([
            "open+read+close p99", Fmt.duration(f.openReadClose.p99), Fmt.duration(k.openReadClose.p99),
            Fmt.ratio(k.openReadClose.p99 / f.openReadClose.p99), "",
        ])
        rows.append([
            "open+read+close max", Fmt.duration(f.openReadClose.max), Fmt.duration(k.openReadClose.max),
            Fmt.ratio(k.openReadClose.max / f.openReadClose.max), "",
        ])
        lat("cat, fresh process, p50", f.cat, k.cat)
        lat("getxattr user.keychain.account p50", f.xattrValue, k.xattrValue)
        lat("getxattr security.selinux (ENODATA) p50", f.xattrAbsent, k.xattrAbsent)
        lat("readdir 1,000 entries p50", f.readdirSmall, k.readdirSmall)
        if r.hasLarge {
            lat(
                "readdir 10,000 entries p50", f.readdirLarge, k.readdirLarge,
                target: "≤ 2.00× " + verdict(k.readdirLarge.p50 / f.readdirLarge.p50, 2))
        }
        lat("ls -l 1,000 entries, cold p50", f.lsSmallCold, k.lsSmallCold)
        lat("ls -l 1,000 entries, warm p50", f.lsSmallWarm, k.lsSmallWarm)
        if r.hasLarge {
            lat(
                "ls -l 10,000 entries, cold p50", f.lsLargeCold, k.lsLargeCold,
                target: "≤ 2.00× " + verdict(k.lsLargeCold.p50 / f.lsLargeCold.p50, 2))
            lat("ls -l 10,000 entries, warm p50", f.lsLargeWarm, k.lsLargeWarm)
        } else {
            rows.append(["ls -l / readdir 10,000 entries", "", "", "", "needs ≥ 11,000 items"])
        }
        lat("cold lookup of a 1,000-entry dir", f.lookupSmallCold, k.lookupSmallCold)
        if r.hasLarge { lat("cold lookup of a 10,000-entry dir", f.lookupLargeCold, k.lookupLargeCold) }
        rows.append([
            "durable writes/s (open O_TRUNC, write, close)", Fmt.rate(f.writes.rate), Fmt.rate(k.writes.rate),
            Fmt.ratio(f.writes.rate / k.writes.rate), "floor is not durable",
        ])
        rows.append([
            "  vs raw SQLite durable update", Fmt.rate(r.rawUpdate.rate), Fmt.rate(k.writes.rate),
            Fmt.ratio(r.rawUpdate.rate / k.writes.rate), "durable-commit floor (alternated)",
        ])
        rows.append([
            "mount+unlock (spawn → live) p50", Fmt.duration(f.startup.p50), Fmt.duration(k.startup.p50),
            Fmt.ratio(k.startup.p50 / f.startup.p50), "flat 1k→100k",
        ])
        rows.append([
            "daemon RSS after mount", Fmt.bytes(f.rssAfterMount), Fmt.bytes(k.rssAfterMount),
            Fmt.ratio(k.rssAfterMount / f.rssAfterMount), "",
        ])
        rows.append([
            "daemon RSS after the workload", Fmt.bytes(f.rssAfterWork), Fmt.bytes(k.rssAfterWork),
            Fmt.ratio(k.rssAfterWork / f.rssAfterWork), "",
        ])
        rows.append([
            "daemon peak RSS (VmHWM)", Fmt.bytes(f.peakRSS), Fmt.bytes(k.peakRSS), Fmt.ratio(k.peakRSS / f.peakRSS),
            "incl. Argon2id's \(Fmt.bytes(Double(PasswordHashParameters.interactive.memLimit))) at unlock",
        ])
        Out.table(rows)
        if k.reportedUnlock.count > 0 && !k.reportedUnlock.p50.isNaN {
            let unlock = k.reportedUnlock.p50
            Out.line(
                "  keychainfs mount breakdown (median of 3, measured in the built-in daemon): Keychain.open \(Fmt.duration(k.reportedOpen.p50)), unlock \(Fmt.duration(unlock)) (Argon2id alone \(Fmt.duration(kdf)), rest \(Fmt.duration(unlock - kdf))), fuse mount \(Fmt.duration(k.reportedMount.p50)); process start and the rest \(Fmt.duration(k.startup.p50 - k.reportedOpen.p50 - unlock - k.reportedMount.p50))"
            )
        } else {
            let openUnlock = k.benchOpen.p50 + k.benchUnlock.p50
            let kdf = k.benchKDF.p50
            Out.line(
                "  keychainfs mount (medians of 3): spawn → live \(Fmt.duration(k.startup.p50)); Keychain.open + unlock of the same vault in the bench process \(Fmt.duration(openUnlock)) = Argon2id \(Fmt.duration(kdf)) + manifest check and the rest \(openUnlock > kdf ? Fmt.duration(openUnlock - kdf) : "≈ 0 (below Argon2id's run-to-run noise)"); the rest of the daemon's start (process, audit log, control socket, fuse mount) is the difference, about \(Fmt.duration(max(0, k.startup.p50 - openUnlock))); the floor's whole start \(Fmt.duration(f.startup.p50))"
            )
        }
        Out.line(
            "  samples: open+read+close \(Fmt.grouped(k.openReadClose.count)) per fs, cat \(k.cat.count), getxattr \(Fmt.grouped(k.xattrValue.count)), ls -l \(k.lsSmallCold.count) cold + \(k.lsSmallWarm.count) warm, writes \(k.writes.count)"
        )
    }

    static func verdict(_ ratio: Double, _ target: Double) -> String {
        ratio.isNaN ? "" : (ratio <= target ? "(within)" : "(over)")
    }

    static func printFlatness(_ all: [FSSizeFigures]) {
        guard all.count >= 2, let a = all.first, let b = all.last else { return }
        Out.line()
        Out.line(
            "Filesystem flatness, \(Fmt.grouped(a.size)) → \(Fmt.grouped(b.size)) items (keychainfs at the larger size ÷ at the smaller; target: flat, 1.00×)"
        )
        Out.table([
            ["figure", "ratio", "at \(Fmt.grouped(a.size))", "at \(Fmt.grouped(b.size))"],
            [
                "open+read+close p50", Fmt.ratio(b.kc.openReadClose.p50 / a.kc.openReadClose.p50),
                Fmt.duration(a.kc.openReadClose.p50), Fmt.duration(b.kc.openReadClose.p50),
            ],
            [
                "open+read+close p99", Fmt.ratio(b.kc.openReadClose.p99 / a.kc.openReadClose.p99),
                Fmt.duration(a.kc.openReadClose.p99), Fmt.duration(b.kc.openReadClose.p99),
            ],
            [
                "getxattr (value) p50", Fmt.ratio(b.kc.xattrValue.p50 / a.kc.xattrValue.p50),
                Fmt.duration(a.kc.xattrValue.p50), Fmt.duration(b.kc.xattrValue.p50),
            ],
            [
                "ls -l 1,000 entries, cold", Fmt.ratio(b.kc.lsSmallCold.p50 / a.kc.lsSmallCold.p50),
                Fmt.duration(a.kc.lsSmallCold.p50), Fmt.duration(b.kc.lsSmallCold.p50),
            ],
            [
                "durable write", Fmt.ratio(b.kc.writes.p50 / a.kc.writes.p50), Fmt.duration(a.kc.writes.p50),
                Fmt.duration(b.kc.writes.p50),
            ],
            [
                "mount+unlock (spawn → live)", Fmt.ratio(b.kc.startup.p50 / a.kc.startup.p50),
                Fmt.duration(a.kc.startup.p50), Fmt.duration(b.kc.startup.p50),
            ],
            [
                "  of which open + unlock",
                Fmt.ratio((b.kc.benchOpen.p50 + b.kc.benchUnlock.p50) / (a.kc.benchOpen.p50 + a.kc.benchUnlock.p50)),
                Fmt.duration(a.kc.benchOpen.p50 + a.kc.benchUnlock.p50),
                Fmt.duration(b.kc.benchOpen.p50 + b.kc.benchUnlock.p50),
            ],
            [
                "daemon RSS after mount", Fmt.ratio(b.kc.rssAfterMount / a.kc.rssAfterMount),
                Fmt.bytes(a.kc.rssAfterMount), Fmt.bytes(b.kc.rssAfterMount),
            ],
        ])
    }
}
