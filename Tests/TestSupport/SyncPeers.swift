import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Two devices of one sync group (issue 31) as users have them: two sandboxes A and B (own HOME,
/// XDG dirs, vault, passphrase, mountpoint) and a private PostgreSQL the test starts. Everything
/// goes through the real CLI, the real mounts and the keychain services' sync engines.
public final class SyncPeers: @unchecked Sendable {
    // @unchecked: immutable after init; the sandboxes and the server guard their own state.
    public let server: PostgresServer
    public let a: TestSandbox
    public let b: TestSandbox
    /// The role the devices log in as.
    public let user: String

    init(server: PostgresServer, a: TestSandbox, b: TestSandbox, user: String) {
        self.server = server
        self.a = a
        self.b = b
        self.user = user
    }

    /// The connection string the devices are given: never a password (trusted TCP, or ~/.pgpass).
    public var uri: String { "host=127.0.0.1 port=\(server.port) user=\(user) dbname=postgres" }

    /// `keychainfs sync setup URI` on A: a new group, A's synchronizable items uploaded.
    public func setup(sourceLocation: SourceLocation = #_sourceLocation) throws {
        let r = try a.cli(["sync", "setup"] + a.unlockArgs + [uri], timeout: 60)
        try #require(r.status == 0, "sync setup: \(r.summary)", sourceLocation: sourceLocation)
    }

    /// B joins by the recovery code A prints (`sync recovery-code`, `sync join --recovery-code-file`).
    public func joinByRecoveryCode(sourceLocation: SourceLocation = #_sourceLocation) throws {
        let code = try a.cli(["sync", "recovery-code"] + a.unlockArgs)
        try #require(code.status == 0, "sync recovery-code: \(code.summary)", sourceLocation: sourceLocation)
        let file = b.root + "/recovery-code"
        try Data(code.stdoutBytes).write(to: URL(fileURLWithPath: file))
        let r = try b.cli(["sync", "join"] + b.unlockArgs + [uri, "--recovery-code-file", file], timeout: 60)
        try #require(r.status == 0, "sync join: \(r.summary)", sourceLocation: sourceLocation)
    }

    /// `sync status --json` of a device, parsed (nil: it failed).
    public func status(_ box: TestSandbox) -> [String: Any]? {
        guard let r = try? box.cli(["sync", "status", "--json", "--vault", box.vault]), r.status == 0 else {
            return nil
        }
        return (try? JSONSerialization.jsonObject(with: Data(r.stdoutBytes))) as? [String: Any]
    }

    /// The device's outbox (changes not yet uploaded); nil when the status cannot be read.
    public func outbox(_ box: TestSandbox) -> Int? { status(box)?["outbox"] as? Int }

    /// Rows of kcfs_sync.records on the server (live and deleted), all groups.
    public func serverRecords() throws -> Int {
        Int(try server.psql("SELECT count(*) FROM kcfs_sync.records").trimmingCharacters(in: .whitespacesAndNewlines))
            ?? -1
    }

    /// The path of a generic password's file in a mount: `genp/<service>/<account>`, with
    /// `;synchronizable=true` when it syncs (docs/paths.md).
    public static func file(_ box: TestSandbox, _ service: String, _ account: String, sync: Bool = true) -> String {
        box.mnt + "/genp/" + service + "/" + account + (sync ? ";synchronizable=true" : "")
    }

    /// What `cat` of an item's file prints in a child process (nil: it failed, e.g. no such file).
    public static func read(_ box: TestSandbox, _ path: String) -> String? {
        guard let r = try? box.run("/bin/cat", [path], timeout: 10), r.status == 0 else { return nil }
        return r.stdout
    }

    /// `printf %s VALUE > PATH` in a child process, through the mount (mkdir -p of its directory
    /// first); true when the shell says the write and close succeeded.
    @discardableResult
    public static func write(_ box: TestSandbox, _ path: String, _ value: String) throws -> Bool {
        let dir = (path as NSString).deletingLastPathComponent
        let r = try box.run(
            "/bin/sh", ["-c", "mkdir -p \"$1\" && printf %s \"$2\" > \"$3\"", "sh", dir, value, path], timeout: 10)
        return r.status == 0
    }

    /// Every file under `genp/<service>` of a mount with its content, read in one child process
    /// (nil: the directory could not be read).
    public static func contents(_ box: TestSandbox, service: String) -> [String: String]? {
        let script = """
            d = sys.argv[1]
            if os.path.isdir(d):
                for name in sorted(os.listdir(d)):
                    print(name + '\\t' + read(d + '/' + name).decode())
            """
        guard let r = try? box.py(script, [box.mnt + "/genp/" + service], timeout: 30), r.status == 0 else {
            return nil
        }
        var out: [String: String] = [:]
        for line in r.lines {
            let parts = line.split(separator: "\t", maxSplits: 1, omittingEmptySubsequences: false)
            if parts.count == 2 { out[String(parts[0])] = String(parts[1]) }
        }
        return out
    }

    /// The daemon killed, the dead mount cleared, the vault mounted again.
    public static func remount(_ box: TestSandbox, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let u = try box.run("/usr/bin/fusermount3", ["-u", "-z", box.mnt], timeout: 10)
        #expect(u.status == 0, "fusermount3 -u -z: \(u.summary)", sourceLocation: sourceLocation)
        try box.mount(sourceLocation: sourceLocation)
    }
}

/// Two sandboxes with initialised vaults and a private PostgreSQL; `setup` runs before the group
/// is made (CLI adds on A or B). With `group`, A starts the group and B joins it by the
/// recovery code; with `mount`, both vaults are then mounted. Teardown always unmounts both,
/// ends what they started, and stops the server (by its own `stop`).
/// With `serverPassword`, TCP logins need a password and each device finds its role's in
/// `~/.pgpass` (mode 0600), where `sync setup` tells users to put it: the superuser's, or with
/// `login` that role's (`prepare` makes it, given the running server).
public func withSyncPeers(
    _ label: String = #function, group: Bool = true, mount: Bool = true, serverPassword: String? = nil,
    login: (user: String, password: String)? = nil, prepare: (PostgresServer) throws -> Void = { _ in },
    setup: (SyncPeers) throws -> Void = { _ in },
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: (SyncPeers) throws -> Void
) throws {
    try requireBinary(sourceLocation: sourceLocation)
    let server = try PostgresServer(password: serverPassword)
    defer { server.stop() }
    let a = try TestSandbox(label + "-A")
    defer { a.teardown() }
    let b = try TestSandbox(label + "-B")
    defer { b.teardown() }
    try prepare(server)
    if let password = login?.password ?? serverPassword {
        for box in [a, b] {
            let file = box.home + "/.pgpass"
            try Data("127.0.0.1:\(server.port):*:\(login?.user ?? "postgres"):\(password)\n".utf8).write(
                to: URL(fileURLWithPath: file))
            try #require(chmod(file, 0o600) == 0, sourceLocation: sourceLocation)
        }
    }
    try a.initVault(sourceLocation: sourceLocation)
    try b.initVault(sourceLocation: sourceLocation)
    let peers = SyncPeers(server: server, a: a, b: b, user: login?.user ?? "postgres")
    try setup(peers)
    if group {
        try peers.setup(sourceLocation: sourceLocation)
        try peers.joinByRecoveryCode(sourceLocation: sourceLocation)
    }
    if mount {
        try a.mount(sourceLocation: sourceLocation)
        try b.mount(sourceLocation: sourceLocation)
    }
    try body(peers)
}
