import Foundation

/// The sync section's table: each figure against issue 31's target.
enum SyncReport {
    static func verdict(_ pass: Bool?) -> String {
        guard let pass else { return "n/a" }
        return pass ? "pass" : "FAIL"
    }

    static func print(_ f: SyncBench.Figures, _ o: Options) {
        let p50 = f.propagation.p50, p99 = f.propagation.p99
        let complete = f.missed == 0 && f.propagation.count == f.changes
        Out.line()
        Out.line(
            "Sync (keychainfs-bench sync): devices A and B, each its own HOME, XDG directories and vault, through a"
        )
        let serverCPU = SyncPostgres.serverCPU(o)
        Out.line(
            "PostgreSQL 15 of the bench's own on 127.0.0.1 (default settings: fsync on); the bench, its writers and every"
        )
        Out.line(
            "keychainfs process on CPU \(o.cpu), the server "
                + (serverCPU == o.cpu
                    ? "on the same CPU (a one-CPU machine, or --server-cpu)"
                    : "on CPU \(serverCPU) (a server is another machine; --server-cpu \(o.cpu) puts it beside them)"))
        var rows = [["figure", "measured", "target", "verdict"]]
        rows.append([
            "propagation, A's mount → B's mount, p50", Fmt.duration(p50), "≤ 50 ms",
            verdict(p50.isNaN ? nil : p50 <= 0.050 && complete),
        ])
        rows.append([
            "propagation, A's mount → B's mount, p99", Fmt.duration(p99), "≤ 250 ms",
            verdict(p99.isNaN ? nil : p99 <= 0.250 && complete),
        ])
        rows.append([
            "first sync: sync join of \(Fmt.grouped(f.items)) items (B)", Fmt.duration(f.joinSeconds), "≤ 10 s",
            verdict(f.joinSeconds.isNaN ? nil : f.joinSeconds <= 10 && f.joinApplied == f.items),
        ])
        rows.append(["sync setup, uploading \(Fmt.grouped(f.items)) items (A)", Fmt.duration(f.setupSeconds), "", ""])
        if let w = f.writes {
            for kind in SyncWrites.Kind.allCases {
                let r = w.ratio(kind)
                rows.append([
                    "\(kind.name): in a group ÷ in none", String(format: "%.2f×", r), "≥ 0.90×",
                    verdict(r.isNaN ? nil : r >= 0.9),
                ])
            }
        }
        if let a = f.idle.first {
            let sync = a.syncThread.map { "\($0)" } ?? "no thread named kcfs-sync"
            rows.append([
                "idle \(Int(o.idleSeconds)) s, A in the group: the sync thread's context switches", sync, "0",
                verdict(a.syncThread.map { $0 == 0 }),
            ])
        }
        Out.table(rows)
        Out.line(
            "  propagation: \(f.changes) overwrites of one synchronizable item, each from the start of its write on A"
        )
        Out.line(
            "  to the first read on B returning the new content (B read at once, then at each inotify event on its"
        )
        Out.line(
            "  directory and at least every 5 ms): \(f.propagation.count) arrived, \(f.missed) missed (5 s), \(f.afterEvent) read right after an event;"
        )
        Out.line(
            "  max \(Fmt.duration(f.propagation.max)); the write on A alone (open, write, close: the commit) p50 \(Fmt.duration(f.writeOnA.p50)), p99 \(Fmt.duration(f.writeOnA.p99))"
        )
        Out.line("  sync setup said: \(f.setupOutput)")
        Out.line(
            "  sync join said: \(f.joinOutput)"
                + (f.joinApplied == f.items ? "" : " (not the \(f.items) items A holds: the verdict is FAIL)"))
        if let w = f.writes {
            Out.line()
            Out.line(
                "  The durable write path, one writer, synchronizable items in /genp/\(SyncBench.service) (\(SyncWrites.rounds) blocks of \(SyncWrites.perBlock) each, median):"
            )
            var table = [["", "sync", "closes/s", "service CPU per close (until idle)", "server CPU per close"]]
            for kind in SyncWrites.Kind.allCases {
                for on in [false, true] {
                    table.append([
                        kind.name, on ? "in a group (A)" : "in none (C)", Fmt.rate(w.median(on, kind)),
                        Fmt.duration(w.median(on, kind, cpu: true)), on ? Fmt.duration(w.serverMedian(kind)) : "",
                    ])
                }
            }
            Out.table(table, indent: 4)
            let names = ["fdatasync", "fsync", "pwrite64", "sendto", "recvfrom"]
            for on in [false, true] {
                guard let calls = w.calls[on] else { continue }
                Out.line(
                    "    service calls per create+fsync+close, \(on ? "in a group" : "in none") (strace -c -f -p, 100 creates, until idle): "
                        + names.map { String(format: "%.2f \($0)", calls[$0] ?? 0) }.joined(separator: ", "))
            }
        }
        Out.line()
        Out.line("  Idle \(Int(o.idleSeconds)) s, nothing changing (context switches of every thread, CPU ticks):")
        var idle = [["service", "context switches", "CPU ticks", "threads", "threads that woke"]]
        for i in f.idle {
            idle.append([
                i.name, "\(i.switches)", "\(i.ticks)", "\(i.threads)",
                i.woke.isEmpty
                    ? "none"
                    : i.woke.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(
                        separator: ", "),
            ])
        }
        Out.table(idle, indent: 4)
    }
}
