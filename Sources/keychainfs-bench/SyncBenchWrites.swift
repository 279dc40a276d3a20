import Foundation

/// The durable write path with sync on and off: blocks of creates+fsync (O_CREAT|O_EXCL,
/// write, fsync, close) and of overwrites+fsync (O_TRUNC, write, fsync, close) of synchronizable
/// items, one writer, through the mount of a vault in a group (`on`) and of one in none
/// (`off`), alternated over `rounds` (order reversed every other round). Per block: closes/s
/// of wall time, and the service's CPU per close counted until it is idle again (so the
/// upload a commit leaves to the sync thread is in it; the PostgreSQL server's own CPU is not).
enum SyncWrites {
    enum Kind: Int, CaseIterable {
        case create, overwrite
        var name: String {
            switch self {
            case .create: "create + fsync (O_CREAT|O_EXCL, write, fsync, close)"
            case .overwrite: "overwrite + fsync (O_TRUNC, write, fsync, close)"
            }
        }
    }

    static let rounds = 5
    static let perBlock = 200
    /// Items the overwrites cycle through.
    static let targets = 30

    struct Figures {
        /// [on?][kind]: closes/s and CPU seconds per close, one value per block.
        var rate: [Bool: [Kind: [Double]]] = [:]
        var cpu: [Bool: [Kind: [Double]]] = [:]
        /// [on?]: the service's system calls per create+fsync (strace), by name.
        var calls: [Bool: [String: Double]] = [:]
        /// [kind]: the PostgreSQL server's CPU seconds per close in the group, one per block.
        var serverCPU: [Kind: [Double]] = [:]

        func serverMedian(_ kind: Kind) -> Double {
            let v = (serverCPU[kind] ?? []).sorted()
            return v.isEmpty ? .nan : v[v.count / 2]
        }

        func median(_ on: Bool, _ kind: Kind, cpu wantCPU: Bool = false) -> Double {
            let v = ((wantCPU ? cpu : rate)[on]?[kind] ?? []).sorted()
            return v.isEmpty ? .nan : v[v.count / 2]
        }

        /// Throughput with sync on ÷ off (the target's ratio: ≥ 0.9×).
        func ratio(_ kind: Kind) -> Double { median(true, kind) / median(false, kind) }
    }

    static func directory(_ mp: String) -> String { mp + "/genp/\(SyncBench.service)" }

    static func measure(on: Daemon, off: Daemon, server: SyncPostgres) throws -> Figures {
        for d in [on, off] {
            for k in 0..<targets {
                try SyncBench.write(
                    directory(d.mountpoint) + "/ow-\(k);synchronizable=true", Layout.secret(k, tag: "ow0"),
                    create: true)
            }
            _ = d.waitUntilIdle()
        }
        var f = Figures()
        var serial = 0
        for round in 0..<rounds {
            for kind in (round % 2 == 0 ? Kind.allCases : Kind.allCases.reversed()) {
                for isOn in (round % 2 == 0 ? [true, false] : [false, true]) {
                    serial += 1
                    let d = isOn ? on : off
                    let ticks = d.cpuTicks, serverTicks = server.cpuTicks
                    let wall = try block(kind, root: directory(d.mountpoint), tag: serial)
                    _ = d.waitUntilIdle()
                    let hz = Double(sysconf(Int32(_SC_CLK_TCK)))
                    let cpu = Double(d.cpuTicks - ticks) / hz
                    if isOn {
                        f.serverCPU[kind, default: []].append(
                            Double(server.cpuTicks - serverTicks) / hz / Double(perBlock))
                    }
                    f.rate[isOn, default: [:]][kind, default: []].append(Double(perBlock) / wall)
                    f.cpu[isOn, default: [:]][kind, default: []].append(cpu / Double(perBlock))
                }
            }
        }
        for (isOn, d) in [(true, on), (false, off)] { f.calls[isOn] = try countCalls(d, tag: 900 + (isOn ? 1 : 0)) }
        return f
    }

    /// The service's system calls during `creates` creates+fsync by one writer and until it is
    /// idle again (the upload they leave included), from `strace -c -f -p`: calls per create by
    /// name; nil when strace is not there or did not attach.
    static func countCalls(_ d: Daemon, creates: Int = 100, tag: Int) throws -> [String: Double]? {
        guard access("/usr/bin/strace", X_OK) == 0 else { return nil }
        let output = d.log + ".strace"
        guard
            let tracer = try? Spawn.start(
                "/usr/bin/strace",
                ["-c", "-f", "-e", "trace=fdatasync,fsync,pwrite64,sendto,recvfrom", "-o", output, "-p", "\(d.pid)"],
                stdout: "/dev/null", stderr: "/dev/null")
        else { return nil }
        Cleanup.shared.addChild(tracer)
        defer { Cleanup.shared.removeChild(tracer) }
        Clock.sleep(1.0)  // strace attaches to every thread
        _ = try block(.create, root: directory(d.mountpoint), tag: tag, count: creates)
        _ = d.waitUntilIdle(quiet: 0.5)
        kill(tracer, SIGINT)
        Spawn.wait(tracer)
        guard let text = try? String(contentsOfFile: output, encoding: .utf8) else { return nil }
        var counts: [String: Double] = [:]
        for line in text.split(separator: "\n") {
            let f = line.split(separator: " ", omittingEmptySubsequences: true)
            // % time, seconds, usecs/call, calls, [errors], syscall
            if let name = f.last, f.count >= 5, let calls = Int(f[3]) {
                counts[String(name)] = Double(calls) / Double(creates)
            }
        }
        return counts
    }

    /// One block; its wall time.
    static func block(_ kind: Kind, root: String, tag: Int, count: Int = perBlock) throws -> Double {
        let started = Clock.now()
        for k in 0..<count {
            let path: String
            let flags: Int32
            if kind == .overwrite {
                path = root + "/ow-\(k % targets);synchronizable=true"
                flags = O_WRONLY | O_TRUNC
            } else {
                path = root + "/new-\(tag)-\(k);synchronizable=true"
                flags = O_WRONLY | O_CREAT | O_EXCL
            }
            let data = Layout.secret(k, tag: String(format: "%03d", tag % 1_000))
            let fd = open(path, flags, 0o600)
            guard fd >= 0 else { throw BenchError("open \(path): \(String(cString: strerror(errno)))") }
            let written = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            let synced = fsync(fd) == 0
            guard written == data.count, synced, close(fd) == 0 else {
                throw BenchError("write \(path): \(String(cString: strerror(errno)))")
            }
        }
        return Clock.since(started)
    }
}

/// Services idle: the context switches of each of their threads and their CPU over the same
/// `seconds`, nothing changing; the sync thread (named `kcfs-sync`) apart.
enum SyncIdle {
    struct Figures {
        var name = ""
        var switches = 0, ticks = 0, threads = 0
        /// The thread named `kcfs-sync`'s switches; nil: no such thread was seen.
        var syncThread: Int?
        /// Threads that woke, by name: switches.
        var woke: [String: Int] = [:]
    }

    /// Thread id → (name, voluntary + involuntary context switches).
    static func threads(_ pid: pid_t) -> [String: (String, Int)] {
        let switches = ProcStatus.contextSwitches(pid: pid)
        var out: [String: (String, Int)] = [:]
        for (tid, n) in switches {
            let comm = (try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/comm", encoding: .utf8)) ?? "?"
            out[tid] = (comm.trimmingCharacters(in: .whitespacesAndNewlines), n)
        }
        return out
    }

    static func measure(_ daemons: [(String, Daemon)], seconds: Double) -> [Figures] {
        for (_, d) in daemons { _ = d.waitUntilIdle() }
        // The one-shot work the last commits leave (the rollback mark's sync, the audit log's
        // flush a second later) is done by then.
        Clock.sleep(3)
        let before = daemons.map { (threads($0.1.pid), $0.1.cpuTicks) }
        Clock.sleep(seconds)
        return daemons.enumerated().map { i, entry in
            let after = threads(entry.1.pid)
            var f = Figures(name: entry.0)
            f.ticks = entry.1.cpuTicks - before[i].1
            f.threads = after.count
            for (tid, (name, n)) in after {
                // A thread that ended meanwhile took its count with it; a new one brings all of its own.
                let delta = n - (before[i].0[tid]?.1 ?? 0)
                f.switches += delta
                if delta > 0 { f.woke[name, default: 0] += delta }
                if name == "kcfs-sync" { f.syncThread = (f.syncThread ?? 0) + delta }
            }
            return f
        }
    }
}
