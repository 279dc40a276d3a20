import CFuse
import Dispatch
import Foundation
import Synchronization

/// Creates through the mount (issue 29, items 1 and 2): what a new file costs against an
/// overwrite of an existing one. Three kinds of block, alternated: overwrite (open O_TRUNC,
/// write, close), create (open O_CREAT|O_EXCL, write, close), create+fsync (the same with an
/// fsync before the close); each by one writer and by `writers` at once. Every close is
/// durable when it returns. Per block: closes/s of wall time and the daemon's CPU per close
/// (utime + stime of the daemon). Then one untimed block of creates+fsync under
/// `strace -c -f -p DAEMON` counts the daemon's fdatasync and fsync calls per create.
enum CreateBench {
    enum Kind: Int, CaseIterable {
        case overwrite, create, createFsync
        var name: String {
            switch self {
            case .overwrite: "overwrite (O_TRUNC, write, close)"
            case .create: "create (O_CREAT|O_EXCL, write, close)"
            case .createFsync: "create + fsync (O_CREAT|O_EXCL, write, fsync, close)"
            }
        }
    }

    struct Row {
        var rate: [Double] = []  // closes/s per block
        var cpu: [Double] = []  // daemon CPU seconds per close, per block
    }

    /// A row's key in the results: its kind and writer count.
    static func key(_ kind: Kind, _ writers: Int) -> Int { kind.rawValue * 100 + writers }

    static let writers = 8
    static let perWriter = 40
    static let single = 300
    static let rounds = 3

    static func run(_ o: Options, directory: String) throws {
        let size = 1_000
        Out.progress("creates: a vault of \(Fmt.grouped(size)) items")
        let vault = try BenchVault.create(size: size, directory: directory)
        try vault.populate(upTo: size)
        vault.close()
        let mp = directory + "/mnt-kc-creates"
        try FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        let kc = try Daemon.start(
            .keychainfs(vault, cli: o.keychainfs, stateDirectory: BenchVault.stateDirectory(directory)),
            mountpoint: mp, log: directory + "/kc-creates.log")
        defer { try? kc.stop() }
        _ = kc.waitUntilIdle()
        if let seconds = o.profileSeconds {
            try profile(o, seconds: seconds, daemon: kc.pid, root: mp)
            return
        }
        let rows = try measure(root: mp) { kc.cpuTicks }
        let syncs = try countSyncs(daemon: kc.pid, root: mp, tag: 10_000)
        let read = try FSBench.readAll(mp + "/genp/\(Layout.service(0))/new-\(rounds * 6)-0-0")
        guard read == Layout.secret(0, tag: "new\(rounds * 6)") || read.count == 12 else {
            throw BenchError("the last create did not read back")
        }
        try kc.stop()
        // The peer: gocryptfs on the same disk, when installed (FSBenchCreatesPeer.swift).
        var peer: [Int: Row]?
        if let binary = GocryptfsPeer.binary() {
            Out.progress("creates: the same blocks on gocryptfs (\(binary))")
            let mount = try GocryptfsPeer.start(binary, directory: directory)
            defer { mount.stop() }
            try GocryptfsPeer.prepare(root: mount.plain, files: writers * 30)
            peer = try measure(root: mount.plain) { mount.cpuTicks }
        } else {
            Out.progress("creates: gocryptfs is not installed: no peer rows")
        }
        print(rows, peer: peer, syncs: syncs)
    }

    /// The blocks, alternated over `rounds` (kinds reversed every other round), with the CPU of
    /// the daemon that serves `root` per close.
    static func measure(root: String, cpuTicks: () -> Int) throws -> [Int: Row] {
        var rows: [Int: Row] = [:]
        var serial = 0
        for round in 0..<rounds {
            for count in [1, writers] {
                for kind in (round % 2 == 0 ? Kind.allCases : Kind.allCases.reversed()) {
                    serial += 1
                    let per = count == 1 ? single : perWriter
                    let ticks = cpuTicks()
                    let started = Clock.now()
                    try runBlock(kind, writers: count, each: per, root: root, tag: serial)
                    let wall = Clock.since(started)
                    let cpu = Double(cpuTicks() - ticks) / Double(sysconf(Int32(_SC_CLK_TCK)))
                    var row = rows[key(kind, count)] ?? Row()
                    row.rate.append(Double(count * per) / wall)
                    row.cpu.append(cpu / Double(count * per))
                    rows[key(kind, count)] = row
                }
            }
        }
        return rows
    }

    /// `--profile`: blocks of one kind until `seconds` have passed, for a profiler attached to
    /// the daemon meanwhile; prints the daemon's pid first and the rate and CPU per close after.
    static func profile(_ o: Options, seconds: Double, daemon: pid_t, root: String) throws {
        let kind: Kind =
            switch o.profileKind {
            case "overwrite": .overwrite
            case "create": .create
            default: .createFsync
            }
        Out.line("creates --profile: daemon pid \(daemon); \(kind.name) by \(o.profileWriters) writer(s)")
        let each = o.profileWriters == 1 ? single : perWriter
        let started = Clock.now()
        var closes = 0
        var tag = 20_000
        while Clock.since(started) < seconds {
            tag += 1
            try runBlock(kind, writers: o.profileWriters, each: each, root: root, tag: tag)
            closes += o.profileWriters * each
        }
        Out.line(
            String(
                format: "  %d closes in %.1f s: %.0f/s", closes, Clock.since(started),
                Double(closes) / Clock.since(started)))
    }

    static func median(_ v: [Double]) -> Double { v.isEmpty ? .nan : v.sorted()[v.count / 2] }

    private static func print(
        _ rows: [Int: Row], peer: [Int: Row]?, syncs: (fdatasync: Int, fsync: Int, creates: Int)?
    ) {
        Out.line()
        Out.line(
            "Creates through the mount, 1,000-item vault, in /genp/\(Layout.service(0)) (\(rounds) blocks of each, median; one writer \(single) closes a block, \(writers) writers \(perWriter) each)"
        )
        var table = [["", "writers", "closes/s", "daemon CPU per close", "÷ overwrite CPU"]]
        for kind in Kind.allCases {
            for count in [1, writers] {
                guard let row = rows[key(kind, count)] else { continue }
                let base = rows[key(.overwrite, count)].map { median($0.cpu) } ?? .nan
                table.append([
                    kind.name, "\(count)", Fmt.rate(median(row.rate)), Fmt.duration(median(row.cpu)),
                    Fmt.ratio(median(row.cpu) / base),
                ])
            }
        }
        Out.table(table)
        if let peer { printPeer(rows, peer) }
        if let syncs {
            Out.line(
                String(
                    format:
                        "  daemon syncs per create+fsync+close (strace -c -f -p, %d creates, one writer): %.2f fdatasync, %.2f fsync",
                    syncs.creates, Double(syncs.fdatasync) / Double(syncs.creates),
                    Double(syncs.fsync) / Double(syncs.creates)))
        } else {
            Out.line("  daemon syncs per create: not counted (strace not found or could not attach)")
        }
    }

    /// `count` threads at once, each doing `each` operations of `kind`.
    static func runBlock(_ kind: Kind, writers count: Int, each: Int, root: String, tag: Int) throws {
        try FSBench.onWriterThreads(count) { w in
            for k in 0..<each {
                let path: String
                let flags: Int32
                if kind == .overwrite {
                    let i = w * 30 + k % 30
                    path = root + "/genp/\(Layout.service(i))/\(Layout.account(i))"
                    flags = O_WRONLY | O_TRUNC
                } else {
                    path = root + "/genp/\(Layout.service(0))/new-\(tag)-\(w)-\(k)"
                    flags = O_WRONLY | O_CREAT | O_EXCL
                }
                let data = Layout.secret(k, tag: "new\(tag)")
                let fd = open(path, flags, 0o600)
                guard fd >= 0 else { return "open \(path): \(String(cString: strerror(errno)))" }
                let written = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                let synced = kind == .createFsync ? fsync(fd) == 0 : true
                if written != data.count || !synced || close(fd) != 0 {
                    return "write \(path): \(String(cString: strerror(errno)))"
                }
            }
            return nil
        }
    }

    /// fdatasync and fsync calls of the daemon (all its threads) during 200 creates+fsync by one
    /// writer, from `strace -c -f -p`; nil when strace is not there or did not attach.
    private static func countSyncs(daemon: pid_t, root: String, tag: Int) throws -> (
        fdatasync: Int, fsync: Int, creates: Int
    )? {
        guard access("/usr/bin/strace", X_OK) == 0 else { return nil }
        let output = FileManager.default.temporaryDirectory.path + "/keychainfs-bench-strace-\(getpid()).txt"
        defer { unlink(output) }
        guard
            let tracer = try? Spawn.start(
                "/usr/bin/strace", ["-c", "-f", "-e", "trace=fdatasync,fsync", "-o", output, "-p", "\(daemon)"],
                stdout: "/dev/null", stderr: "/dev/null")
        else { return nil }
        Clock.sleep(1.0)  // strace attaches to every thread
        let creates = 200
        try runBlock(.createFsync, writers: 1, each: creates, root: root, tag: tag)
        Clock.sleep(0.3)  // the rollback mark's deferred fdatasync
        kill(tracer, SIGINT)
        Spawn.wait(tracer)
        guard let text = try? String(contentsOfFile: output, encoding: .utf8) else { return nil }
        var counts: [String: Int] = [:]
        for line in text.split(separator: "\n") {
            let f = line.split(separator: " ", omittingEmptySubsequences: true)
            // % time, seconds, usecs/call, calls, [errors], syscall
            if let name = f.last, f.count >= 5, let calls = Int(f[3]) { counts[String(name)] = calls }
        }
        return (counts["fdatasync"] ?? 0, counts["fsync"] ?? 0, creates)
    }
}
