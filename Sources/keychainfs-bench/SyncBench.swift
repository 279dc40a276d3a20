import Foundation
import Keychain

/// Sync between devices (issue 31's benchmark): two sandboxes A and B (each its own HOME, XDG
/// directories and vault, as two devices), a private PostgreSQL 15 on loopback
/// (`SyncPostgres`), everything pinned to the bench's CPU:
/// - first sync: A holds `--items` synchronizable items; `keychainfs sync setup` on A (the
///   upload) and `keychainfs sync join --recovery-code-file` on B (the pull), each timed from
///   the command's start to its exit;
/// - propagation: A and B mounted; `--changes` overwrites of one synchronizable item through
///   A's mount, each timed from the start of the write to the first read through B's mount
///   that returns the new content (B read at once, then at each inotify event on its
///   directory, the replay of the pulled change, and at least every 5 ms);
/// - the durable write path (SyncBenchWrites.swift): creates+fsync and overwrites+fsync
///   through A's mount (in the group) against a third vault C (the same items, in no group);
/// - idle: the context switches of every thread of A's and C's services and their CPU over
///   `--idle` seconds, the sync thread's apart.
enum SyncBench {
    /// A directory both devices have (A's items are in it, B pulls them): the watch needs it.
    static let service = Layout.smallDirectory

    /// One device: its directory (HOME), vault and the environment of its CLI calls.
    struct Device {
        let name: String
        let home: String
        let vault: BenchVault
        var state: String { BenchVault.stateDirectory(home) }
        var environment: [String] {
            Daemon.cliEnvironment(state: state).filter { !$0.hasPrefix("HOME=") } + ["HOME=\(home)"]
        }

        static func create(_ name: String, items: Int, root: String) throws -> Device {
            let home = root + "/" + name
            try FileManager.default.createDirectory(
                atPath: BenchVault.stateDirectory(home) + "/run", withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
            chmod(BenchVault.stateDirectory(home) + "/run", 0o700)
            let vault = try BenchVault.create(size: items, directory: home)
            if items > 0 {
                guard let keychain = vault.keychain else { throw BenchError("the vault is closed") }
                for start in stride(from: 0, to: items, by: BenchVault.populateBatch) {
                    try keychain.addBatch(
                        (start..<min(items, start + BenchVault.populateBatch)).map { i in
                            NewItem(
                                .genericPassword,
                                [
                                    Schema.service: .string(Layout.service(i)),
                                    Schema.account: .string(Layout.account(i)), Schema.synchronizable: .bool(true),
                                ], data: Layout.secret(i))
                        })
                }
            }
            vault.close()
            return Device(name: name, home: home, vault: vault)
        }

        /// `keychainfs ARGS --vault V --passphrase-file F`, output to `log` (stderr to `errors`,
        /// by default the same); (status, seconds).
        func run(_ cli: String, _ args: [String], passphrase: String, log: String, errors: String? = nil) throws
            -> (Int32, Double)
        {
            let t = Clock.now()
            let pid = try Spawn.start(
                cli, args + ["--vault", vault.path, "--passphrase-file", passphrase], stdout: log,
                stderr: errors ?? log, environment: environment)
            let status = Spawn.wait(pid)
            return (status, Clock.since(t))
        }

        func mount(_ cli: String) throws -> Daemon {
            let mp = home + "/mnt"
            try FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
            let daemon = try Daemon.start(
                .keychainfs(vault, cli: cli, stateDirectory: state), mountpoint: mp, log: home + "/service.log")
            _ = daemon.waitUntilIdle()
            return daemon
        }
    }

    struct Figures {
        var items = 0, setupSeconds = Double.nan, joinSeconds = Double.nan
        var setupOutput = "", joinOutput = ""
        /// Records the join applied (from its last line); nil: not said.
        var joinApplied: Int?
        var propagation = Samples(), writeOnA = Samples()
        var changes = 0, missed = 0, afterEvent = 0
        var writes: SyncWrites.Figures?
        var idle: [SyncIdle.Figures] = []
    }

    static func run(_ o: Options, directory: String) throws {
        guard let cli = o.keychainfs else { throw BenchError("sync needs the keychainfs binary (--keychainfs)") }
        var f = Figures()
        f.items = o.syncItems
        f.changes = o.changes
        let passphrase = try BenchVault.writePassphraseFile(in: directory)
        Out.progress("sync: a PostgreSQL 15 cluster of the bench's own")
        let postgres = try SyncPostgres.start(
            base: o.tmpdir, log: directory + "/postgres-tools.log", cpu: SyncPostgres.serverCPU(o))
        defer { postgres.stop() }

        Out.progress("sync: device A with \(Fmt.grouped(o.syncItems)) synchronizable items, device B empty")
        let a = try Device.create("A", items: o.syncItems, root: directory)
        let b = try Device.create("B", items: 0, root: directory)
        Out.progress("sync: setup on A (uploads its items)")
        let (setup, setupSeconds) = try a.run(
            cli, ["sync", "setup", postgres.conninfo], passphrase: passphrase, log: a.home + "/setup.log")
        f.setupSeconds = setupSeconds
        f.setupOutput = lastLine(a.home + "/setup.log", first: true)
        guard setup == 0 else { throw BenchError("sync setup exited with \(setup): \(f.setupOutput)") }
        let recoveryCode = directory + "/recovery-code"
        guard
            try a.run(
                cli, ["sync", "recovery-code"], passphrase: passphrase, log: recoveryCode,
                errors: a.home + "/recovery-code.log"
            ).0 == 0
        else { throw BenchError("sync recovery-code failed") }
        chmod(recoveryCode, 0o600)
        Out.progress("sync: join on B (pulls \(Fmt.grouped(o.syncItems)) records)")
        let (join, joinSeconds) = try b.run(
            cli, ["sync", "join", postgres.conninfo, "--recovery-code-file", recoveryCode], passphrase: passphrase,
            log: b.home + "/join.log")
        f.joinSeconds = joinSeconds
        f.joinOutput = lastLine(b.home + "/join.log")
        guard join == 0 else { throw BenchError("sync join exited with \(join): \(f.joinOutput)") }
        // "joined sync group …: N records applied, M uploaded"
        f.joinApplied = f.joinOutput.split(separator: ":").last?.split(separator: " ").first.flatMap { Int($0) }

        Out.progress("sync: mounting A and B")
        let kcA = try a.mount(cli)
        defer { try? kcA.stop() }
        do {
            let kcB = try b.mount(cli)
            defer { try? kcB.stop() }
            Out.progress("sync: \(o.changes) changes written through A's mount, each read through B's")
            try propagate(o.changes, from: kcA.mountpoint, to: kcB.mountpoint, into: &f)
            try kcB.stop()
        }

        Out.progress("sync: device C, the same items in no group, for the write path and idle figures")
        let c = try Device.create("C", items: o.syncItems, root: directory)
        let kcC = try c.mount(cli)
        defer { try? kcC.stop() }
        _ = kcA.waitUntilIdle()
        Out.progress(
            "sync: creates+fsync and overwrites+fsync, A (in the group, service pid \(kcA.pid)) against C (in none, pid \(kcC.pid))"
        )
        f.writes = try SyncWrites.measure(on: kcA, off: kcC, server: postgres)
        Out.progress("sync: the services of A and C idle for \(Int(o.idleSeconds)) s")
        f.idle = SyncIdle.measure([("A, in the group", kcA), ("C, in no group", kcC)], seconds: o.idleSeconds)
        try kcC.stop()
        try kcA.stop()
        postgres.stop()
        SyncReport.print(f, o)
    }

    /// `count` overwrites of one synchronizable item through A's mount, each timed until B's
    /// mount reads the new content.
    static func propagate(_ count: Int, from a: String, to b: String, into f: inout Figures) throws {
        let name = "syncbench-item;synchronizable=true"
        let fileA = a + "/genp/\(service)/\(name)", fileB = b + "/genp/\(service)/\(name)"
        // The item (and B's directory for the watch) first, untimed.
        try write(fileA, Array("prop-first".utf8), create: true)
        let deadline = Clock.now() + 30_000_000_000
        while (try? FSBench.readAll(fileB)) != Array("prop-first".utf8) {
            guard Clock.now() < deadline else { throw BenchError("the first item never reached B's mount") }
            Clock.sleep(0.01)
        }
        let watch = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
        guard watch >= 0 else { throw BenchError("inotify_init1: \(String(cString: strerror(errno)))") }
        defer { close(watch) }
        let mask = IN_CLOSE_WRITE | IN_CREATE | IN_MODIFY | IN_MOVED_TO | IN_ATTRIB
        guard inotify_add_watch(watch, b + "/genp/\(service)", UInt32(mask)) >= 0 else {
            throw BenchError("cannot watch B's directory: \(String(cString: strerror(errno)))")
        }
        var buffer = [UInt8](repeating: 0, count: 65_536)
        for i in 0..<count {
            let value = Array(("prop-" + String(format: "%08d", i)).utf8)
            _ = buffer.withUnsafeMutableBytes { read(watch, $0.baseAddress, $0.count) }  // drain
            let t0 = Clock.now()
            try write(fileA, value, create: false)
            f.writeOnA.add(Clock.since(t0))
            var event = false, found = false
            while Clock.since(t0) < 5 {
                if (try? FSBench.readAll(fileB)) == value {
                    f.propagation.add(Clock.since(t0))
                    if event { f.afterEvent += 1 }
                    found = true
                    break
                }
                var p = pollfd(fd: watch, events: Int16(POLLIN), revents: 0)
                event = poll(&p, 1, 5) > 0
                if event { _ = buffer.withUnsafeMutableBytes { read(watch, $0.baseAddress, $0.count) } }
            }
            if !found { f.missed += 1 }
        }
    }

    /// open (O_CREAT or O_TRUNC), write, close: the close commits.
    static func write(_ path: String, _ data: [UInt8], create: Bool) throws {
        let fd = open(path, O_WRONLY | O_TRUNC | (create ? O_CREAT : 0), 0o600)
        guard fd >= 0 else { throw BenchError("open \(path): \(String(cString: strerror(errno)))") }
        let written = data.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        guard written == data.count, close(fd) == 0 else {
            throw BenchError("write \(path): \(String(cString: strerror(errno)))")
        }
    }

    static func lastLine(_ path: String, first: Bool = false) -> String {
        let lines = (try? String(contentsOfFile: path, encoding: .utf8))?.split(separator: "\n") ?? []
        return (first ? lines.first : lines.last).map(String.init) ?? ""
    }
}
