import Foundation
import CPlatform

/// The sync benchmark's own PostgreSQL 15 cluster (the steps of the tests' PostgresServer,
/// which the bench cannot import): initdb as `postgres` in a temp directory of its own,
/// `pg_ctl start` on 127.0.0.1 and a free port, its socket in that directory, TCP trusted
/// (nothing is secret in a benchmark cluster). The server's settings are PostgreSQL's
/// defaults (fsync on), as a user's server has them. Stopped by `pg_ctl -m fast stop` on its
/// data directory, by `stop()` or by `Cleanup` (also on errors and signals).
final class SyncPostgres: Sendable {
    static let binaries = "/usr/lib/postgresql/15/bin"
    let root: String
    let port: Int
    var dataDir: String { root + "/data" }
    /// A libpq conninfo for the superuser over TCP (no password: trusted).
    var conninfo: String { "host=127.0.0.1 port=\(port) user=postgres dbname=postgres" }

    private init(root: String, port: Int) {
        self.root = root
        self.port = port
    }

    static func available() -> Bool {
        access(binaries + "/initdb", X_OK) == 0 && access("/usr/sbin/runuser", X_OK) == 0 && getuid() == 0
            && getpwnam("postgres") != nil
    }

    /// The CPU `start` pins the server to, for the report.
    static func serverCPU(_ o: Options) -> Int {
        o.serverCPU
            ?? (sysconf(Int32(_SC_NPROCESSORS_ONLN)) > 1 ? (o.cpu + 1) % sysconf(Int32(_SC_NPROCESSORS_ONLN)) : o.cpu)
    }

    /// The CPU ticks (user + system) of the server: its postmaster and every process it forked
    /// (the device's backend, the WAL writer, the checkpointer…), alive now.
    var cpuTicks: Int {
        guard let text = try? String(contentsOfFile: dataDir + "/postmaster.pid", encoding: .utf8),
            let first = text.split(separator: "\n").first, let postmaster = pid_t(first)
        else { return 0 }
        var total = ProcStatus.cpuTicks(pid: postmaster)
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = pid_t(entry),
                let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { continue }
            // After the command: state, then the parent's pid.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 1, pid_t(fields[1]) == postmaster { total += ProcStatus.cpuTicks(pid: pid) }
        }
        return total
    }

    static func start(base: String, log: String, cpu: Int) throws -> SyncPostgres {
        guard available() else {
            throw BenchError("sync needs root, the postgres user and PostgreSQL 15 in \(binaries) (postgresql-15)")
        }
        let root = try makeTempDirectory(base: base, prefix: "syncbench-pg-")
        guard let user = getpwnam("postgres"), chown(root, user.pointee.pw_uid, user.pointee.pw_gid) == 0 else {
            throw BenchError("chown \(root) to postgres: \(String(cString: strerror(errno)))")
        }
        let initdb = try asPostgres(
            "initdb",
            ["-D", root + "/data", "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync"], log: log)
        guard initdb == 0 else { throw BenchError("initdb exited with \(initdb) (see \(log))") }
        let server = SyncPostgres(root: root, port: try freePort())
        let options = "-c listen_addresses=127.0.0.1 -p \(server.port) -c unix_socket_directories=\(root)"
        Cleanup.shared.addStop { server.stop() }
        let started = try asPostgres(
            "pg_ctl", ["-D", server.dataDir, "-l", root + "/server.log", "-o", options, "-w", "-t", "60", "start"],
            log: log, cpu: cpu)
        guard started == 0 else {
            let tail = (try? String(contentsOfFile: root + "/server.log", encoding: .utf8))?.suffix(500) ?? ""
            throw BenchError("pg_ctl start exited with \(started): \(tail)")
        }
        return server
    }

    /// Fast shutdown of this cluster only (pg_ctl is given its data directory); nothing when
    /// it is not running.
    func stop() {
        guard access(dataDir + "/postmaster.pid", F_OK) == 0 else { return }
        _ = try? Self.asPostgres(
            "pg_ctl", ["-D", dataDir, "-m", "fast", "-w", "-t", "60", "stop"], log: "/dev/null")
    }

    /// A PostgreSQL tool run as `postgres` from `/` (its home may not be the bench's directory).
    /// `cpu`: the tool (and the server it starts) pinned there by taskset; nil: the bench's CPU.
    private static func asPostgres(_ tool: String, _ args: [String], log: String, cpu: Int? = nil) throws -> Int32 {
        let environment = ProcessInfo.processInfo.environment.map { "\($0.key)=\($0.value)" } + ["LC_MESSAGES=C"]
        let pinned = cpu.map { ["/usr/bin/taskset", "-c", "\($0)"] } ?? []
        let pid = try Spawn.start(
            "/usr/bin/env",
            ["-C", "/"] + pinned + ["/usr/sbin/runuser", "-u", "postgres", "--", binaries + "/" + tool] + args,
            stdout: log, stderr: log, environment: environment)
        return Spawn.wait(pid)
    }

    /// A port nobody listens on now (the kernel's pick for port 0).
    private static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw BenchError("socket: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { p in
                bind(fd, p, length) == 0 && getsockname(fd, p, &length) == 0
            }
        }
        guard bound else { throw BenchError("bind: \(String(cString: strerror(errno)))") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
