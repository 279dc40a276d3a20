import Foundation
import Keychain
import KeychainCrypto
import KeychainAccess
import KeychainFS

/// A FUSE daemon in a child process. A child process gives each daemon its own RSS and its
/// own `/proc/<pid>/status`, and lets a mount be timed from process start to a live mount.
///
/// - the floor: this same binary re-run as `_serve-floor`;
/// - the durable floor: the same with `--durable`, a raw SQLite table of its own
///   (`FloorCommits`);
/// - keychainfs: the built CLI, `keychainfs mount VAULT MOUNTPOINT -f --passphrase-fd 3
///   --ready-fd 4` (the daemon exactly as users run it: audit log, control socket, access
///   layer), started through `setpriv --pdeathsig TERM` so it unmounts if the bench dies;
///   or, without the CLI binary, this binary re-run as `_serve-keychainfs`, which sets up
///   FuseSession + KeychainFileSystem + audit log the way `mount -f` does.
///
/// Children inherit the bench's CPU pinning and start a session of their own, as a daemon a
/// user starts does; they report readiness on fd 4 and read the passphrase from fd 3 (never
/// argv).
final class Daemon {
    enum Kind {
        case floor
        /// The floor whose FLUSH commits a row of a raw SQLite table of `rows` rows of `shape`
        /// at `database` (created by the child).
        case durableFloor(database: String, rows: Int, shape: RawSQLite.RowShape)
        /// `cli`: path of the built `keychainfs` binary; nil for the built-in daemon.
        case keychainfs(BenchVault, cli: String?, stateDirectory: String)
        var name: String {
            switch self {
            case .floor: "floor"
            case .durableFloor: "durable floor"
            case .keychainfs: "keychainfs"
            }
        }
    }

    let kind: Kind
    let pid: pid_t
    let mountpoint: String
    /// Wall time from spawn to "mounted" (process start + open + unlock + mount).
    let startupSeconds: Double
    /// Figures the child measured itself (open_s, unlock_s, mount_s).
    let reported: [String: Double]
    let log: String
    private var stopped = false

    private init(
        kind: Kind, pid: pid_t, mountpoint: String, startupSeconds: Double, reported: [String: Double], log: String
    ) {
        self.kind = kind
        self.pid = pid
        self.mountpoint = mountpoint
        self.startupSeconds = startupSeconds
        self.reported = reported
        self.log = log
    }

    static func start(_ kind: Kind, mountpoint: String, log: String) throws -> Daemon {
        if MountTable.isMounted(mountpoint) { throw BenchError("\(mountpoint) is already mounted") }
        var ready: [Int32] = [0, 0], secret: [Int32] = [0, 0]
        guard pipe(&ready) == 0, pipe(&secret) == 0 else {
            throw BenchError("pipe: \(String(cString: strerror(errno)))")
        }
        for fd in ready + secret { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var program = Spawn.selfPath
        var args: [String]
        var environment: [String]?
        switch kind {
        case .floor:
            args = ["_serve-floor", mountpoint]
        case .durableFloor(let database, let rows, let shape):
            args = [
                "_serve-floor", mountpoint, "--durable", database, "\(rows)", "\(shape.attrs)", "\(shape.itemKey)",
                "\(shape.data)",
            ]
        case .keychainfs(let v, let cli?, let state):
            program = "/usr/bin/setpriv"
            args = [
                "--pdeathsig", "TERM", "--", cli, "mount", v.path, mountpoint, "-f", "--passphrase-fd", "3",
                "--ready-fd", "4",
            ]
            environment = cliEnvironment(state: state)
        case .keychainfs(let v, nil, let state):
            args = ["_serve-keychainfs", v.path, mountpoint, v.deviceKeyPath, state + "/keychainfs/audit.log"]
        }
        Cleanup.shared.addMountpoint(mountpoint)
        let t = Clock.now()
        let pid: pid_t
        do {
            // Every daemon in a session of its own, as users run them (`Spawn.start`).
            pid = try Spawn.start(
                program, args, stdout: log, stderr: log, fds: [(secret[0], 3), (ready[1], 4)], environment: environment,
                newSession: true)
        } catch {
            for fd in ready + secret { close(fd) }
            throw error
        }
        Cleanup.shared.addChild(pid)
        close(secret[0]); close(ready[1])
        if case .keychainfs = kind {
            let p = Array(BenchVault.passphraseText.utf8)
            _ = p.withUnsafeBytes { write(secret[1], $0.baseAddress, $0.count) }
        }
        close(secret[1])
        let line = readLine(fd: ready[0], timeout: 600)
        close(ready[0])
        let startup = Clock.since(t)
        guard let line, line.hasPrefix("ok") else {
            kill(pid, SIGTERM)
            if Spawn.wait(pid, timeout: 10) == nil {
                MountTable.lazyUnmount(mountpoint); kill(pid, SIGKILL); Spawn.wait(pid)
            }
            Cleanup.shared.removeChild(pid)
            let tail =
                (try? String(contentsOfFile: log, encoding: .utf8))?.split(separator: "\n").suffix(5).joined(
                    separator: " | ") ?? ""
            throw BenchError("the \(kind.name) daemon did not mount on \(mountpoint): \(line ?? "no answer") \(tail)")
        }
        var reported: [String: Double] = [:]
        for field in line.split(separator: " ").dropFirst() {
            let kv = field.split(separator: "=")
            if kv.count == 2, let v = Double(kv[1]) { reported[String(kv[0])] = v }
        }
        // Assert the mount is live before any I/O (else writes go to the empty directory).
        guard MountTable.isMounted(mountpoint) else {
            throw BenchError(
                "the \(kind.name) daemon said it mounted, but \(mountpoint) is not in /proc/self/mountinfo")
        }
        return Daemon(
            kind: kind, pid: pid, mountpoint: mountpoint, startupSeconds: startup, reported: reported, log: log)
    }

    /// The environment the `keychainfs` CLI runs in: its state (device key, audit log,
    /// control socket) in the run's temp directory.
    static func cliEnvironment(state: String) -> [String] {
        ProcessInfo.processInfo.environment
            .filter { !$0.key.hasPrefix("XDG_") && $0.key != "KEYCHAINFS_VAULT" }
            .map { "\($0.key)=\($0.value)" }
            + [
                "XDG_STATE_HOME=\(state)", "XDG_RUNTIME_DIR=\(state)/run", "XDG_DATA_HOME=\(state)/data",
                "XDG_CONFIG_HOME=\(state)/config",
            ]
    }

    static func readLine(fd: Int32, timeout: Double) -> String? {
        var bytes: [UInt8] = []
        let deadline = Clock.now() + UInt64(timeout * 1e9)
        while Clock.now() < deadline {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let r = poll(&p, 1, 1000)
            if r < 0 && errno == EINTR { continue }
            if r == 0 { continue }
            var b: UInt8 = 0
            let n = read(fd, &b, 1)
            if n <= 0 { return bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self) }
            if b == 10 { return String(decoding: bytes, as: UTF8.self) }
            bytes.append(b)
        }
        return nil
    }

    var rss: Double { ProcStatus.kilobytes("VmRSS", pid: pid) }
    var peakRSS: Double { ProcStatus.kilobytes("VmHWM", pid: pid) }
    var cpus: String { Affinity.allowedList(pid: pid) }

    /// CPU time the daemon has used, in clock ticks (utime + stime of /proc/PID/stat).
    var cpuTicks: Int { ProcStatus.cpuTicks(pid: pid) }

    /// Waits until the daemon has used no CPU for `quiet` seconds (its work after the mount,
    /// such as the background integrity pass, done), at most `limit` seconds; returns the wait.
    func waitUntilIdle(quiet: Double = 0.2, limit: Double = 60) -> Double {
        let start = Clock.now()
        var last = cpuTicks
        var quietSince = Clock.now()
        while Clock.since(start) < limit {
            Clock.sleep(0.05)
            let now = cpuTicks
            if now != last {
                last = now
                quietSince = Clock.now()
            } else if Clock.since(quietSince) >= quiet {
                break
            }
        }
        return Clock.since(start)
    }

    /// SIGTERM (the daemon unmounts itself), wait; lazy unmount and SIGKILL if it hangs.
    func stop() throws {
        guard !stopped else { return }
        stopped = true
        kill(pid, SIGTERM)
        var status = Spawn.wait(pid, timeout: 15)
        if status == nil {
            MountTable.lazyUnmount(mountpoint)
            kill(pid, SIGKILL)
            status = Spawn.wait(pid, timeout: 5)
        }
        Cleanup.shared.removeChild(pid)
        if MountTable.isMounted(mountpoint) { MountTable.lazyUnmount(mountpoint) }
        if MountTable.isMounted(mountpoint) {
            throw BenchError("\(mountpoint) is still mounted after stopping the \(kind.name) daemon")
        }
        // libfuse's loop returns the signal number that ended it (15 for SIGTERM): a clean stop.
        if let status, status != 0, status != SIGTERM, status != 128 + SIGTERM {
            let last =
                (try? String(contentsOfFile: log, encoding: .utf8))?.split(separator: "\n").last.map(String.init) ?? ""
            Out.progress(
                "note: the \(kind.name) daemon exited with status \(status) after SIGTERM (the mount is gone); its last log line: \(last)"
            )
        }
    }
}

// MARK: Child entry points

enum DaemonMain {
    private static func report(_ line: String) {
        let s = line + "\n"
        _ = s.withCString { write(4, $0, strlen($0)) }
        close(4)
    }

    /// `_serve-floor MOUNTPOINT [--durable DATABASE ROWS ATTRS_BYTES KEY_BYTES DATA_BYTES]`
    static func serveFloor(_ args: [String]) -> Int32 {
        ParentDeath.terminateWithParent()
        var commits: FloorCommits?
        switch args.count {
        case 1: break
        case 7 where args[1] == "--durable":
            guard let rows = Int(args[3]), rows > 0, let attrs = Int(args[4]), attrs >= 0, let key = Int(args[5]),
                key >= 0, let data = Int(args[6]), data >= 0
            else { report("error usage"); return 2 }
            do {
                for suffix in ["", "-wal", "-shm"] { unlink(args[2] + suffix) }
                let raw = try RawSQLite(
                    path: args[2], shape: RawSQLite.RowShape(attrs: attrs, itemKey: key, data: data))
                try raw.fill(rows)
                commits = FloorCommits(database: raw)
            } catch {
                report("error \(error)"); return 1
            }
        default: report("error usage"); return 2
        }
        let fs = FloorFS(directories: Layout.floorDirectories(), commits: commits)
        let t = Clock.now()
        do { try fs.mount(args[0]) } catch { report("error \(error)"); return 1 }
        report("ok mount_s=\(Clock.since(t))")
        return withExtendedLifetime(fs) { fs.run() }
    }

    /// `_serve-keychainfs VAULT MOUNTPOINT DEVICE_KEY AUDIT_LOG`, passphrase on fd 3: the
    /// core of `keychainfs mount VAULT MOUNTPOINT -f` (open, unlock, FuseSession over
    /// KeychainFileSystem with the default mount options and an audit log), without the CLI
    /// around it (no vault lock file, control socket or pinentry). Used only when the
    /// `keychainfs` binary is not built.
    static func serveKeychainFS(_ args: [String]) -> Int32 {
        ParentDeath.terminateWithParent()
        guard args.count == 4 else { report("error usage"); return 2 }
        do {
            var bytes: [UInt8] = []
            var buf = [UInt8](repeating: 0, count: 256)
            while true {
                let n = read(3, &buf, buf.count)
                if n <= 0 { break }
                bytes += buf[0..<n]
            }
            close(3)
            let passphrase = try SecureBytes(copying: bytes)
            Sodium.wipe(&bytes)
            let t0 = Clock.now()
            let keychain = try Keychain.open(at: args[0], deviceKeyPath: args[2])
            let t1 = Clock.now()
            try keychain.unlock(passphrase: passphrase)
            let t2 = Clock.now()
            let audit = try AuditLog(path: args[3], buffered: true)  // as `keychainfs mount`
            defer { audit.flush() }
            let session = FuseSession(
                fs: KeychainFileSystem(access: AccessLayer(keychain: keychain, audit: audit)), mountpoint: args[1],
                options: MountOptions())
            try session.mount()
            let t3 = Clock.now()
            report(
                "ok open_s=\(Double(t1 - t0) / 1e9) unlock_s=\(Double(t2 - t1) / 1e9) mount_s=\(Double(t3 - t2) / 1e9)")
            return session.run()
        } catch {
            report("error \(error)")
            return 1
        }
    }
}
