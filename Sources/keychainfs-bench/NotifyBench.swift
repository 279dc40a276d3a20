import Foundation
import Synchronization

/// Change notification (issue 30's benchmark): a change committed by another process (the CLI,
/// through the mount's service) against what a watcher of the mount and the next reader see.
/// - the watcher: this process's own inotify watch on the item's directory; each update is
///   heard as one IN_CLOSE_WRITE (the replay's `close`), matched to its command in order;
/// - from the command's start to the event, and the command's own time: the commit is between
///   the two, so the first is an upper bound of commit → event; and how many events came
///   before their command returned (the writer waits for its replay);
/// - stale reads: the item read through the mount right after each command returned;
/// - idle: the daemon's context switches (wake-ups, every thread) and CPU over `--idle` seconds
///   with nothing changing.
enum NotifyBench {
    static let service = Layout.smallDirectory

    static func run(_ o: Options, directory: String) throws {
        guard let cli = o.keychainfs else { throw BenchError("notify needs the keychainfs binary (--keychainfs)") }
        Out.progress("notify: a vault of 1,000 items")
        let vault = try BenchVault.create(size: 1_000, directory: directory)
        try vault.populate(upTo: 1_000)
        vault.close()
        let passphraseFile = try BenchVault.writePassphraseFile(in: directory)
        let state = BenchVault.stateDirectory(directory)
        let mp = directory + "/mnt-kc-notify"
        try FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        let kc = try Daemon.start(
            .keychainfs(vault, cli: o.keychainfs, stateDirectory: state), mountpoint: mp,
            log: directory + "/kc-notify.log")
        defer { try? kc.stop() }
        _ = kc.waitUntilIdle()

        let account = Layout.account(0)
        let file = mp + "/genp/\(service)/\(account)"
        let watcher = try Watcher(directory: mp + "/genp/\(service)", name: account)
        defer { watcher.stop() }
        let environment = Daemon.cliEnvironment(state: state)
        let secretFile = directory + "/notify-secret"
        var started: [UInt64] = [], returned: [UInt64] = []
        var stale = 0, failed = 0
        Out.progress("notify: \(o.changes) updates through the CLI, each read back at once")
        for i in 0..<o.changes {
            let value = "ntf-" + String(format: "%08d", i)
            // The secret on stdin, never in argv.
            guard FileManager.default.createFile(atPath: secretFile, contents: Data(value.utf8)) else {
                throw BenchError("cannot write \(secretFile)")
            }
            let t0 = Clock.now()
            let status = try Spawn.run(
                cli,
                [
                    "add-generic-password", "-U", "--vault", vault.path, "--passphrase-file", passphraseFile, "-s",
                    service, "-a", account,
                ], stdin: secretFile, environment: environment)
            let t1 = Clock.now()
            if status != 0 { failed += 1 }
            started.append(t0)
            returned.append(t1)
            if (try? FSBench.readAll(file)) != Array(value.utf8) { stale += 1 }
        }
        let heard = watcher.waitFor(count: o.changes, seconds: 5)
        var sinceStart = Samples(), command = Samples()
        var beforeReturn = 0
        for i in 0..<min(heard.count, started.count) {
            sinceStart.add(Double(heard[i] &- started[i]) / 1e9)
            command.add(Double(returned[i] &- started[i]) / 1e9)
            if heard[i] <= returned[i] { beforeReturn += 1 }
        }

        Out.progress("notify: the daemon idle for \(Int(o.idleSeconds)) s")
        _ = kc.waitUntilIdle()
        let (switches0, ticks0) = (ProcStatus.contextSwitches(pid: kc.pid), kc.cpuTicks)
        Clock.sleep(o.idleSeconds)
        let (switches1, ticks1) = (ProcStatus.contextSwitches(pid: kc.pid), kc.cpuTicks)

        Out.line()
        Out.line("Change notification (keychainfs-bench notify): \(o.changes) updates of one item by the CLI")
        Out.line("through the mount's service, a watcher (this process's inotify) on the item's directory")
        Out.table([
            ["row", "p50", "p99", "note"],
            [
                "command start → watcher's IN_CLOSE_WRITE", Fmt.duration(sinceStart.percentile(0.5)),
                Fmt.duration(sinceStart.percentile(0.99)), "an upper bound of commit → event",
            ],
            [
                "the command's own time", Fmt.duration(command.percentile(0.5)), Fmt.duration(command.percentile(0.99)),
                "start → exit: process start, unlock-free door, commit, replay",
            ],
        ])
        Out.line("  events heard: \(heard.count) of \(o.changes); before their command returned: \(beforeReturn)")
        Out.line(
            "  stale reads (cat right after the command returned): \(stale) of \(o.changes); failed commands: \(failed)"
        )
        Out.line(
            "  idle \(Int(o.idleSeconds)) s: \(switches1 - switches0) daemon context switches (every thread), \(ticks1 - ticks0) CPU ticks"
        )
    }

    /// An inotify watch on one directory, recording when each IN_CLOSE_WRITE of `name` arrives.
    final class Watcher: Sendable {
        private let fd: Int32
        private let times = Mutex<[UInt64]>([])
        private let done = DispatchSemaphore(value: 0)

        init(directory: String, name: String) throws {
            fd = inotify_init1(Int32(IN_CLOEXEC))
            guard fd >= 0, inotify_add_watch(fd, directory, UInt32(IN_CLOSE_WRITE)) >= 0 else {
                throw BenchError("cannot watch \(directory)")
            }
            let thread = Thread { [self] in read(name) }
            thread.start()
        }

        private func read(_ name: String) {
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
                guard n > 0 else { break }
                let now = Clock.now()
                var offset = 0
                while offset + 16 <= n {
                    let length = Int(buffer[offset + 12]) | Int(buffer[offset + 13]) << 8
                    let bytes = buffer[(offset + 16)..<(offset + 16 + length)].prefix { $0 != 0 }
                    if String(decoding: bytes, as: UTF8.self) == name { times.withLock { $0.append(now) } }
                    offset += 16 + length
                }
            }
            done.signal()
        }

        func waitFor(count: Int, seconds: Double) -> [UInt64] {
            let deadline = Clock.now() + UInt64(seconds * 1e9)
            while times.withLock({ $0.count }) < count && Clock.now() < deadline { Clock.sleep(0.01) }
            return times.withLock { $0 }
        }

        func stop() { close(fd) }
    }
}
