import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A private PostgreSQL 15 cluster for one test: its own temp directory (owned by `postgres`,
/// which initdb and the server must run as: initdb refuses root), listening on 127.0.0.1 on a
/// free port and on a Unix socket in its directory, `fsync=off` (nothing here must survive a
/// crash). It is a copy of one template cluster per test process (initdb takes seconds; a copy
/// a tenth of that). With a `password`, TCP logins need it (scram-sha-256) while `psql`, over
/// the Unix socket, stays trusted. A test calls `stop()` in a `defer`; `deinit` stops it too,
/// and only ever this cluster: pg_ctl is given its data directory.
public final class PostgresServer: @unchecked Sendable {
    // @unchecked: `running` is guarded by `lock`; the rest is immutable.
    public static let binaries = "/usr/lib/postgresql/15/bin"
    public let root: String
    public let dataDir: String
    /// Chosen at start-up (another once, if a parallel test took it first); fixed after.
    public private(set) var port: Int
    /// The superuser's TCP password; nil: TCP is trusted.
    public let password: String?
    private let lock = NSLock()
    private var running = false

    /// Starts a new cluster (a copy of the template).
    public init(password: String? = nil) throws {
        guard getuid() == 0 else {
            throw HarnessError("PostgresServer runs initdb and pg_ctl as postgres: run as root")
        }
        let template = try Self.template()
        port = try Self.freePort()
        root = try makeTempDirectory("keychainfs-pg")
        dataDir = root + "/data"
        self.password = password
        try Self.chownToPostgres(root)
        let copy = try runProcess("/bin/cp", ["-a", template, dataDir], env: childEnvironment(), timeout: 60)
        guard copy.status == 0 else { throw HarnessError("copying the template cluster: \(copy.summary)") }
        if password != nil {
            let hba = "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
            try Data(hba.utf8).write(to: URL(fileURLWithPath: dataDir + "/pg_hba.conf"))
            try Self.chownToPostgres(dataDir + "/pg_hba.conf")
        }
        // A port free a moment ago may be another parallel test's server's by now.
        for attempt in 1... {
            do {
                try start()
                break
            } catch let error as HarnessError where attempt < 4 && error.description.contains("could not bind") {
                port = try Self.freePort()
            }
        }
        if let password {
            try psql("ALTER ROLE postgres PASSWORD \(Self.literal(password))")
        }
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: root)
    }

    /// A libpq conninfo for `user` over TCP (the superuser by default, with its password).
    public func conninfo(user: String = "postgres", password: String? = nil, database: String = "postgres") -> String {
        var info = "host=127.0.0.1 port=\(port) user=\(user) dbname=\(database)"
        if let pw = password ?? (user == "postgres" ? self.password : nil) { info += " password=\(Self.quoted(pw))" }
        return info
    }

    public var conninfo: String { conninfo() }

    /// Starts the server (again, after `stop`) on the same port; waits until it accepts logins.
    public func start() throws {
        try lock.withLock {
            if running { return }
            let options = "-c listen_addresses=127.0.0.1 -p \(port) -c unix_socket_directories=\(root) -c fsync=off"
            let r = try Self.asPostgres(
                "pg_ctl", ["-D", dataDir, "-l", root + "/server.log", "-o", options, "-w", "-t", "60", "start"])
            guard r.status == 0 else {
                let log = (try? String(contentsOfFile: root + "/server.log", encoding: .utf8)) ?? ""
                throw HarnessError("pg_ctl start: \(r.summary)\nserver.log: \(log.suffix(2000))")
            }
            running = true
        }
    }

    /// Stops this cluster (fast shutdown: sessions are ended). Nothing when it is not running.
    public func stop() {
        lock.withLock {
            guard running else { return }
            _ = try? Self.asPostgres("pg_ctl", ["-D", dataDir, "-m", "fast", "-w", "-t", "60", "stop"])
            running = false
        }
    }

    /// Stops and starts again: every session is cut, the data stays.
    public func restart() throws {
        stop()
        try start()
    }

    /// Runs SQL through psql as `user` (the superuser by default) over the Unix socket: rows one
    /// per line, columns separated by a tab, no headers. Throws on any SQL error.
    @discardableResult
    public func psql(_ sql: String, user: String = "postgres", database: String = "postgres") throws -> String {
        let r = try runProcess(
            Self.binaries + "/psql",
            [
                "-X", "-q", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-h", root, "-p", "\(port)", "-U", user,
                "-d", database, "-f", "-",
            ],
            stdin: Array(sql.utf8), env: childEnvironment(["LC_MESSAGES": "C"]), timeout: 60)
        guard r.status == 0 else { throw HarnessError("psql: \(r.summary)") }
        return r.stdout
    }

    /// Creates a login role, with a password (nil: none), member of `memberOf`.
    public func createRole(_ name: String, password: String?, memberOf: [String] = []) throws {
        var sql = "CREATE ROLE \(name) LOGIN"
        if let password { sql += " PASSWORD \(Self.literal(password))" }
        if !memberOf.isEmpty { sql += " IN ROLE " + memberOf.joined(separator: ", ") }
        try psql(sql + ";")
    }

    // MARK: Plumbing

    /// An SQL string literal.
    public static func literal(_ s: String) -> String { "'" + s.replacingOccurrences(of: "'", with: "''") + "'" }

    /// A conninfo value, quoted.
    static func quoted(_ s: String) -> String {
        "'" + s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'") + "'"
    }

    private static func asPostgres(_ tool: String, _ args: [String]) throws -> RunResult {
        try runProcess(
            "/usr/sbin/runuser", ["-u", "postgres", "--", binaries + "/" + tool] + args,
            env: childEnvironment(["LC_MESSAGES": "C"]), cwd: "/", timeout: 90)
    }

    private static func chownToPostgres(_ path: String) throws {
        guard let user = getpwnam("postgres") else { throw HarnessError("no postgres user (install postgresql-15)") }
        guard chown(path, user.pointee.pw_uid, user.pointee.pw_gid) == 0 else {
            throw HarnessError("chown \(path): \(errnoText())")
        }
    }

    /// A port nobody listens on now (the kernel's pick for port 0).
    private static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket: \(errnoText())") }
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
        guard bound else { throw HarnessError("bind: \(errnoText())") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    private static let templateLock = NSLock()
    nonisolated(unsafe) private static var templateRoot: String?

    /// The data directory of this process's template cluster, made by initdb on first use and
    /// removed at exit.
    private static func template() throws -> String {
        try templateLock.withLock {
            if let root = templateRoot { return root + "/data" }
            let root = try makeTempDirectory("keychainfs-pg-template")
            try chownToPostgres(root)
            let r = try asPostgres(
                "initdb",
                ["-D", root + "/data", "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync"])
            guard r.status == 0 else {
                try? FileManager.default.removeItem(atPath: root)
                throw HarnessError("initdb: \(r.summary)")
            }
            templateRoot = root
            atexit {
                PostgresServer.templateLock.withLock {
                    if let root = PostgresServer.templateRoot { try? FileManager.default.removeItem(atPath: root) }
                }
            }
            return root + "/data"
        }
    }
}
