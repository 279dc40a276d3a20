import Foundation
import Keychain
import KeychainAPI
import Synchronization

/// Change notification (issue 30's benchmark): a change committed by another process (the CLI,
/// through the mount's service) against what a watcher of the mount and the next reader see.
/// - the watcher: this process's own inotify watch on the item's directory; each update is
///   heard as one IN_CLOSE_WRITE (the replay's `close`), matched to its command in order;
/// - from the command's start to the event, and the command's own time: the commit is between
///   the two, so the first is an upper bound of commit → event; and how many events came
///   before their command returned (the writer waits for its replay). The same through the
///   service's API socket from this process (no process start): the bound is then tight;
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
        Out.progress("notify: \(o.changes) updates through the CLI, each read back at once")
        let byCLI = try measure(o.changes, file: file, watcher: watcher) { value in
            // The secret on stdin, never in argv.
            guard FileManager.default.createFile(atPath: secretFile, contents: Data(value.utf8)) else {
                throw BenchError("cannot write \(secretFile)")
            }
            // No passphrase: a user's CLI call while the vault is mounted (one given is proved
            // by the service with Argon2id, for the groups its holder acts in: docs/service.md).
            let arguments = ["add-generic-password", "-U", "--vault", vault.path, "-s", service, "-a", account]
            return try Spawn.run(cli, arguments, stdin: secretFile, environment: environment) == 0
        }
        Out.progress("notify: \(o.changes) updates through the service's API socket, each read back at once")
        let byAPI = try throughAPI(o.changes, vault: vault.path, state: state, file: file, watcher: watcher)

        Out.progress("notify: the daemon idle for \(Int(o.idleSeconds)) s")
        _ = kc.waitUntilIdle()
        // The one-shot work a burst of commits leaves (the rollback mark's sync and the audit
        // log's flush a second later, the held read's end) is done by then.
        Clock.sleep(3)
        let (switches0, ticks0) = (ProcStatus.contextSwitches(pid: kc.pid), kc.cpuTicks)
        Clock.sleep(o.idleSeconds)
        let (switches1, ticks1) = (ProcStatus.contextSwitches(pid: kc.pid), kc.cpuTicks)
        // Per thread: a thread that ended meanwhile took its count with it; a new one brings all of its own.
        let wakeups = switches1.reduce(0) { $0 + $1.value - (switches0[$1.key] ?? 0) }

        Out.line()
        Out.line("Change notification (keychainfs-bench notify): \(o.changes) updates of one item, a watcher (this")
        Out.line("process's inotify) on the item's directory, the item read through the mount right after each")
        Out.table(
            [["row", "p50", "p99", "heard", "before return", "stale reads", "failed"]] + byCLI.rows("CLI process")
                + byAPI.rows("API socket, this process"))
        Out.line("  start → event: from the update's start to the watcher's IN_CLOSE_WRITE, an upper bound of")
        Out.line("  commit → event (the commit is between the update's start and its return)")
        Out.line(
            "  idle \(Int(o.idleSeconds)) s: \(wakeups) daemon context switches (every thread), \(ticks1 - ticks0) CPU ticks"
        )
    }

    struct Figures {
        var sinceStart = Samples(), own = Samples()
        var heard = 0, beforeReturn = 0, stale = 0, failed = 0, changes = 0

        func rows(_ name: String) -> [[String]] {
            [
                [
                    "\(name): start → event", Fmt.duration(sinceStart.percentile(0.5)),
                    Fmt.duration(sinceStart.percentile(0.99)), "\(heard)/\(changes)", "\(beforeReturn)",
                    "\(stale)", "\(failed)",
                ],
                [
                    "\(name): the update's own time", Fmt.duration(own.percentile(0.5)),
                    Fmt.duration(own.percentile(0.99)), "", "", "", "",
                ],
            ]
        }
    }

    /// The updates through the service's API socket from this process; the connection is
    /// closed before the idle count (its thread in the daemon would end a minute later).
    static func throughAPI(_ count: Int, vault: String, state: String, file: String, watcher: Watcher) throws
        -> Figures
    {
        let runtime = ["XDG_RUNTIME_DIR": state + "/run"]
        guard
            let client = try ServiceClient.connect(
                vault: vault, directory: ServiceLocator.directory(environment: runtime))
        else { throw BenchError("the mount's service does not answer on its API socket") }
        let attributes: Attributes = [Schema.service: .string(service), Schema.account: .string(Layout.account(0))]
        return try measure(count, file: file, watcher: watcher) { value in
            (try? client.addOrUpdate(.genericPassword, attributes, data: Array(value.utf8), extras: [])) != nil
        }
    }

    /// `count` updates by `update` (the value to store → success), each read back at once.
    static func measure(_ count: Int, file: String, watcher: Watcher, _ update: (String) throws -> Bool) throws
        -> Figures
    {
        var f = Figures()
        f.changes = count
        let first = watcher.count
        var started: [UInt64] = [], returned: [UInt64] = []
        for i in 0..<count {
            let value = "ntf-" + String(format: "%08d", i)
            let t0 = Clock.now()
            let ok = try update(value)
            returned.append(Clock.now())
            started.append(t0)
            if !ok { f.failed += 1 }
            if (try? FSBench.readAll(file)) != Array(value.utf8) { f.stale += 1 }
        }
        let heard = Array(watcher.waitFor(count: first + count, seconds: 5).dropFirst(first))
        f.heard = heard.count
        for i in 0..<min(heard.count, started.count) {
            f.sinceStart.add(Double(heard[i] &- started[i]) / 1e9)
            f.own.add(Double(returned[i] &- started[i]) / 1e9)
            if heard[i] <= returned[i] { f.beforeReturn += 1 }
        }
        return f
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

        var count: Int { times.withLock { $0.count } }

        func stop() { close(fd) }
    }
}
