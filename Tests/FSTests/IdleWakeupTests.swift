import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 30 (and 31): "daemon CPU while nothing changes: no wake-ups over 60 s". Before, an idle
/// mount daemon woke once a second for good: the first use of a DispatchQueue (the audit log's
/// delayed flush, the rollback mark's deferred sync, the end of a held read, the invalidation
/// queue) started libdispatch's workqueue, whose pool monitor is a 1 Hz timer on Linux (about
/// 10 context switches in 10 s). Those now run on SerialWorkers, which block without a timeout,
/// and the `-o lock_after` locker, which looked at the clock every second, sleeps until it is due.
@Suite("an idle mount daemon does not wake (issue 30)")
struct IdleWakeupTests {
    /// Each thread of `pid`: its name and its voluntary plus involuntary context switches so far.
    static func threads(_ pid: pid_t) -> [String: (name: String, switches: Int)] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        var result: [String: (String, Int)] = [:]
        for tid in tasks {
            guard let status = try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/status", encoding: .utf8)
            else { continue }
            var name = ""
            var switches = 0
            for line in status.split(separator: "\n") {
                let parts = line.split(separator: ":", maxSplits: 1)
                guard parts.count == 2 else { continue }
                let value = parts[1].trimmingCharacters(in: .whitespaces)
                if parts[0] == "Name" { name = value }
                if parts[0].hasSuffix("ctxt_switches") { switches += Int(value) ?? 0 }
            }
            result[tid] = (name, switches)
        }
        return result
    }

    /// With `-o lock_after`, the idle locker's one pending check sleeps until it is due.
    @Test(
        "after changes through the CLI and the mount, a quiet daemon makes no context switch in 10 s",
        arguments: [[], ["lock_after=120"]])
    func idleDaemonSleeps(options: [String]) throws {
        try withMount(
            options: options,
            setup: { box in
                try box.addGeneric("idle", "a", "first-secret")
            }
        ) { box in
            let pid = try #require(box.daemonPid, "no daemon pid")
            let f = box.mnt + "/genp/idle/a"
            // Every path that used a DispatchQueue runs: reads (a held read transaction), commits
            // (the rollback mark's deferred sync), audit lines (the buffered log's delayed flush),
            // page and name invalidations (a key attribute moves the file; a change made through
            // the CLI is replayed to the mount).
            #expect(try box.sh("cat \(f)").stdout == "first-secret")
            #expect(try box.sh("setfattr -n user.keychain.comment -v quiet \(f)").status == 0)
            #expect(try box.sh("setfattr -n user.keychain.account -v b \(f)").status == 0)
            #expect(try box.sh("cat \(box.mnt)/genp/idle/b").stdout == "first-secret")
            try box.addGeneric("idle", "c", "from-the-cli")
            #expect(try box.sh("cat \(box.mnt)/genp/idle/c").stdout == "from-the-cli")
            #expect(try box.sh("ls \(box.mnt)/genp/idle").stdout.split(separator: "\n").sorted() == ["b", "c"])
            // Quiet: the audit flush and the rollback sync come a second after the last change.
            usleep(3_000_000)
            let audit = (try? String(contentsOfFile: box.auditPath, encoding: .utf8)) ?? ""
            #expect(audit.contains("op="), "the buffered audit lines were not written by the delayed flush")
            let before = Self.threads(pid)
            let names = Set(before.values.map(\.name))
            #expect(names.contains("kcfs-deferred"), "threads: \(names.sorted())")
            #expect(names.contains("kcfs-invalidate"), "threads: \(names.sorted())")
            if !options.isEmpty { #expect(names.contains("kcfs-idle-lock"), "threads: \(names.sorted())") }
            #expect(!names.contains { $0.contains("qos") }, "libdispatch's workqueue runs: \(names.sorted())")
            usleep(10_000_000)
            let after = Self.threads(pid)
            var woke: [String] = []
            var total = 0
            for (tid, then) in before {
                guard let now = after[tid], now.switches != then.switches else { continue }
                total += now.switches - then.switches
                woke.append("\(then.name) (\(tid)): \(now.switches - then.switches)")
            }
            print("idle daemon \(options): \(total) context switches in 10 s over \(before.count) threads")
            #expect(total == 0, "threads that woke while nothing changed: \(woke.sorted())")
        }
    }
}
