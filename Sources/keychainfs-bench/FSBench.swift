import CFuse
import Foundation
import Keychain
import KeychainCrypto

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
        // What follows is the steady state: a fresh mount's background integrity pass (niced, on
        // the same CPU) would otherwise run under the first rows at 100,000 items. What a user
        // meets before it ends is measured apart (`MountUsable`: mount until usable, and the
        // first readdir after mounting).
        Out.progress("  open+read+close of each item once, right after the mount")
        let mounted = Clock.now()
        r.kc.firstReads = try readEachOnce(kc.mountpoint)
        r.kc.firstReadsEnded = Clock.since(mounted)
        r.kc.idleAfterMount = r.kc.firstReadsEnded + kc.waitUntilIdle()
        r.floor.firstReads = try readEachOnce(floorMount)
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
            let n = try Self.readAll(secretPath(root)).count
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
        // The same, of items the daemon has not read since its last commit (RecentRows keeps
        // what it read for up to a second, and any commit drops it): one untimed write through
        // the mount, then one getxattr each of 200 different items.
        Out.progress("  getxattr, first since a write")
        var xattrChanges = 0
        try alternate(4) { w, root in
            xattrChanges += 1
            _ = try writeTimed(
                root + "/genp/\(Layout.service(7))/\(Layout.account(7))", Layout.secret(xattrChanges, tag: "xat"))
            for i in 0..<200 {
                let path = root + "/genp/\(Layout.smallDirectory)/\(Layout.account(i))"
                r[keyPath: figures(w)].xattrFirst.add(
                    try getxattrLoop(path, name: "user.keychain.account", expect: 0, iterations: 1))
            }
        }
        Out.progress("  readdir")
        let small = { (root: String) in root + "/genp/" + Layout.smallDirectory }
        let large = { (root: String) in root + "/genp/" + Layout.largeDirectory }
        try alternate(6) { w, root in
            for _ in 0..<3 {
                r[keyPath: figures(w)].readdirSmall.add(try Self.readdirTimed(small(root), expect: Layout.smallCount))
            }
            if r.hasLarge {
                r[keyPath: figures(w)].readdirLarge.add(try Self.readdirTimed(large(root), expect: Layout.largeCount))
            }
        }
        // The first listing after the vault changed (keychainfs's listing cache is keyed on the
        // change stamp, so this is a listing made from the store): an item of the 1,000-entry
        // directory is overwritten through the mount, untimed, on both sides, then the 10,000-entry
        // directory is listed.
        if r.hasLarge {
            Out.progress("  first readdir after a change")
            var changes = 0
            try alternate(6) { w, root in
                for _ in 0..<2 {
                    changes += 1
                    _ = try writeTimed(
                        root + "/" + "genp/\(Layout.service(7))/\(Layout.account(7))",
                        Layout.secret(changes, tag: "chg"))
                    r[keyPath: figures(w)].readdirLargeFirst.add(
                        try Self.readdirTimed(large(root), expect: Layout.largeCount))
                }
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
                // Names in the 1,000-entry directory (just looked up): eight LOOKUPs each round,
                // of names whose entries expired, a different eight every round.
                for i in 0..<8 {
                    let name = Layout.account((k * 8 + i) * 31 % Layout.smallCount)
                    r[keyPath: figures(w)].lookupNameCold.add(try statTimed(small(roots[w]) + "/" + name))
                }
            }
        }

        Out.progress("  durable writes")
        let durableMount = directory + "/mnt-durable-floor-\(vault.size)"
        try FileManager.default.createDirectory(atPath: durableMount, withIntermediateDirectories: true)
        let durableFloor = try Daemon.start(
            .durableFloor(
                database: directory + "/durable-floor-\(vault.size).sqlite", rows: vault.size,
                shape: try vault.rowShape()),
            mountpoint: durableMount, log: directory + "/durable-floor-\(vault.size).log")
        defer { try? durableFloor.stop() }
        var counter = 0
        var lastWritten: [String: (path: String, bytes: [UInt8])] = [:]
        func writeBlock(_ root: String) throws -> Samples {
            var s = Samples()
            for _ in 0..<150 {
                let i = counter % 250
                counter += 1
                let path = root + "/genp/\(Layout.service(i))/\(Layout.account(i))"
                let bytes = Layout.secret(counter, tag: "wrt")
                s.add(try writeTimed(path, bytes))
                lastWritten[root] = (path, bytes)
            }
            return s
        }
        var durableBlocks = 0
        try alternate(4) { w, root in
            r[keyPath: figures(w)].writes.add(try writeBlock(root))
            guard w == 1 else { return }
            // After each keychainfs block, the two durable-commit floors, in alternating order.
            durableBlocks += 1
            for side in (durableBlocks % 2 == 0 ? [0, 1] : [1, 0]) {
                if side == 0 {
                    r.rawUpdate.add(try raw.timedUpdates(150, rng: &rng))
                } else {
                    r.durableFloorWrites.add(try writeBlock(durableFloor.mountpoint))
                }
            }
        }
        // Each mount's last write reads back through it, byte for byte.
        for root in roots + [durableFloor.mountpoint] {
            guard let (path, bytes) = lastWritten[root], try Self.readAll(path) == bytes else {
                throw BenchError("the last write through \(root) did not read back")
            }
        }

        Out.progress("  concurrent durable writers")
        let concurrent = try measureConcurrentWrites(
            keychainfs: kc.mountpoint, durableFloor: durableFloor.mountpoint, raw: raw, rng: &rng)
        r.concurrentWrites = concurrent.keychainfs
        r.durableFloorConcurrentWrites = concurrent.durableFloor
        r.rawUpdateBesideConcurrent = concurrent.rawOne
        try durableFloor.stop()

        r.kc.rssAfterWork = kc.rss
        r.kc.peakRSS = kc.peakRSS
        r.floor.rssAfterWork = floor.rss
        r.floor.peakRSS = floor.peakRSS
        try kc.stop()
        return r
    }

    // MARK: Operations

    static func readAll(_ path: String) throws -> [UInt8] {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { throw BenchError("open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(fd, &buf, buf.count)
            guard n >= 0 else { throw BenchError("read \(path): \(String(cString: strerror(errno)))") }
            if n == 0 { return out }
            out += buf[0..<n]
        }
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

    /// opendir, readdir to the end and closedir of `path`, timed; throws unless it listed
    /// `expect` entries besides `.` and `..`.
    static func readdirTimed(_ path: String, expect: Int) throws -> Double {
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
}
