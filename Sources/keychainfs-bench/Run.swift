import CFuse
import CSQLite
import CSodium
import Foundation
import Keychain
import KeychainStore

struct HelpRequested: Error {}

struct Options {
    enum Command: String { case core, fs, all, faces, agent, creates, notify, sync }
    var command: Command = .all
    var sizes: [Int] = [1_000, 100_000]
    var cpu = 0
    /// `sync`: the CPU the PostgreSQL server runs on (a server is another machine: here another
    /// CPU when there is one); nil: the CPU after `cpu`, or `cpu` itself on a one-CPU machine.
    var serverCPU: Int?
    var tmpdir = "/tmp"
    /// The `keychainfs` binary the fs benchmark mounts with; nil: the built-in daemon.
    var keychainfs: String? = {
        let besideUs = (Spawn.selfPath as NSString).deletingLastPathComponent + "/keychainfs"
        return access(besideUs, X_OK) == 0 ? besideUs : nil
    }()

    /// Another build's `keychainfs` whose mount-until-usable is measured alternately beside it.
    var baselineKeychainfs: String?

    /// `faces`: calls per face through the service, and through a direct open (Argon2id each).
    var calls = 200
    var directCalls = 10
    /// `notify`: changes made, and the idle time the daemon's wake-ups are counted over.
    var changes = 1_000
    var idleSeconds = 60.0
    /// `sync`: the synchronizable items of the device the other joins.
    var syncItems = 10_000
    /// `creates`: instead of the tables, create blocks (`--profile-kind`, `--profile-writers`)
    /// for this many seconds with the daemon's pid printed first, for `perf record -p` or
    /// `strace -c -f -p` attached meanwhile.
    var profileSeconds: Double?
    var profileKind = "create-fsync"
    var profileWriters = 1
    /// git's contrib/credential/libsecret/git-credential-libsecret.c, built at run time (Debian's
    /// git package ships it; the project does not carry git's source).
    var gitLibsecretSource: String? = {
        let debian = "/usr/share/doc/git/contrib/credential/libsecret/git-credential-libsecret.c"
        return access(debian, R_OK) == 0 ? debian : nil
    }()

    static let usage = """
        usage: keychainfs-bench core|fs|all [--items N,N,…] [--cpu N] [--tmpdir DIR]
                                            [--keychainfs PATH | --builtin-daemon]
                                            [--baseline-keychainfs PATH]
               keychainfs-bench faces [--calls N] [--direct-calls N] [--git-libsecret-source FILE]
                                      [--cpu N] [--tmpdir DIR] [--keychainfs PATH]
               keychainfs-bench agent [--calls N] [--cpu N] [--tmpdir DIR] [--keychainfs PATH]
               keychainfs-bench creates [--cpu N] [--tmpdir DIR] [--keychainfs PATH]
                                        [--profile SECONDS [--profile-kind KIND] [--profile-writers N]]
               keychainfs-bench notify [--changes N] [--idle SECONDS] [--cpu N] [--tmpdir DIR] [--keychainfs PATH]
               keychainfs-bench sync [--changes N] [--items N] [--idle SECONDS] [--cpu N] [--server-cpu N] [--tmpdir DIR]
                                     [--keychainfs PATH]

          core   the keychain core: add, find, update ops/s, unlock time, bytes per item,
                 against raw SQLite and libsodium baselines measured in the same run
          fs     the mounted filesystem against an in-memory FUSE floor mounted in the same run
          all    both, sharing the vaults (default)
          faces  git credential fill, docker-credential-keychainfs get and find-generic-password -w
                 answered by a live mount's service, against git's store file, git's libsecret
                 helper, docker-credential-secretservice and secret-tool on a gnome-keyring the
                 bench starts on a private session bus; RSS of both daemons (a missing peer is
                 skipped with a note); then the agent's rows (below)
          agent  keychainfs ssh-agent over vaults of 1 and 21 keys against OpenSSH's ssh-agent:
                 REQUEST_IDENTITIES and SIGN_REQUEST round trips (5 × --calls each, at least
                 200), and the identity check a socket request pays (pidfd, credentials)
          creates  new files through the mount against overwrites: closes/s and the daemon's
                 CPU per close, one writer and 8, with and without fsync; the daemon's
                 fdatasync calls per create (strace -c -f -p). Not part of `all`
          notify  --changes updates of one item by the CLI through a mount's service (default
                 1000): command start → a watcher's IN_CLOSE_WRITE (p50, p99), events heard
                 before their command returned, stale reads right after; the daemon's wake-ups
                 over --idle seconds of nothing changing (default 60). Not part of `all`
          sync   two devices through a private PostgreSQL 15 on loopback (run as root): sync setup
                 of --items synchronizable items (default 10000) and sync join of the other
                 device; --changes writes through one mount, each until the other mount reads
                 it (p50, p99); creates+fsync and overwrites+fsync in a group against in none;
                 the services' wake-ups over --idle seconds. Not part of `all`

          --items   vault sizes, comma-separated, each ≥ 1000 (k suffix allowed: 1k,100k);
                    default 1000,100000. The 10,000-entry directory exists from 11,000 items.
          --cpu     the CPU the bench and its daemons are pinned to (default 0)
          --server-cpu
                    sync: the CPU its PostgreSQL server is pinned to (default: the next CPU,
                    as a server is another machine; the same one on a one-CPU machine)
          --tmpdir  where the temp vaults and mountpoints go (default /tmp; use a real disk:
                    durable-commit figures on tmpfs mean nothing)
          --keychainfs PATH
                    the keychainfs binary whose `mount -f` daemon is measured (default: the
                    one beside this binary, built with --product keychainfs)
          --builtin-daemon
                    mount with this binary's own copy of the daemon set-up instead
                    (FuseSession + KeychainFileSystem + audit log, no CLI around it)
          --baseline-keychainfs PATH
                    another build's keychainfs (say main's): its `mount` until usable is
                    measured in the same rounds, alternated, and divided by this one's
          --profile SECONDS
                    creates: no tables; blocks of one kind (--profile-kind overwrite, create or
                    create-fsync, default create-fsync) by --profile-writers writers (default 1)
                    for SECONDS, the daemon's pid printed first (attach perf or strace to it)
          --calls N  faces: timed calls of each face and peer, alternated in rounds (default 200)
          --direct-calls N
                    faces: timed `git credential fill` calls with no service, each opening the
                    vault with Argon2id (default 10)
          --git-libsecret-source FILE
                    faces: git's git-credential-libsecret.c, built with gcc into the temp
                    directory (default: the copy Debian's git package ships, when present)

        Prints figures and ratios; never fails on a timing. Everything it mounts or creates
        is removed on exit, on errors and on SIGINT/SIGTERM.
        """

    static func parse(_ args: [String]) throws -> Options {
        var o = Options()
        var rest = args[...]
        guard let first = rest.popFirst() else { return o }
        if first == "help" || first == "-h" || first == "--help" { throw HelpRequested() }
        guard let c = Command(rawValue: first) else { throw BenchError("unknown command '\(first)'") }
        o.command = c
        while let arg = rest.popFirst() {
            var name = arg, value: String?
            if let eq = arg.firstIndex(of: "="), arg.hasPrefix("--") {
                name = String(arg[..<eq]); value = String(arg[arg.index(after: eq)...])
            }
            func next() throws -> String {
                if let value { return value }
                guard let v = rest.popFirst() else { throw BenchError("\(name) needs a value") }
                return v
            }
            switch name {
            case "--items" where o.command == .sync:
                var s = try next().lowercased().replacingOccurrences(of: "_", with: "")
                var scale = 1
                if s.hasSuffix("k") { scale = 1_000; s.removeLast() }
                guard let n = Int(s), n * scale >= 1, n * scale <= 1_000_000 else {
                    throw BenchError("sync --items takes a count from 1 to 1000000")
                }
                o.syncItems = n * scale
            case "--items":
                o.sizes = try next().split(separator: ",").map { part in
                    var s = part.trimmingCharacters(in: .whitespaces).lowercased().replacingOccurrences(
                        of: "_", with: "")
                    var scale = 1
                    if s.hasSuffix("k") { scale = 1_000; s.removeLast() }
                    guard let n = Int(s), n * scale >= 1_000 else {
                        throw BenchError("--items takes sizes ≥ 1000, got '\(part)'")
                    }
                    return n * scale
                }
                o.sizes = Array(Set(o.sizes)).sorted()
            case "--cpu":
                guard let n = Int(try next()), n >= 0, n < sysconf(Int32(_SC_NPROCESSORS_ONLN)) else {
                    throw BenchError("--cpu takes an online CPU number")
                }
                o.cpu = n
            case "--server-cpu":
                guard let n = Int(try next()), n >= 0, n < sysconf(Int32(_SC_NPROCESSORS_ONLN)) else {
                    throw BenchError("--server-cpu takes an online CPU number")
                }
                o.serverCPU = n
            case "--tmpdir":
                o.tmpdir = try next()
            case "--keychainfs":
                let path = try next()
                guard access(path, X_OK) == 0 else { throw BenchError("--keychainfs \(path): not an executable") }
                o.keychainfs = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
            case "--calls", "--direct-calls":
                guard let n = Int(try next()), n >= 1, n <= 100_000 else {
                    throw BenchError("\(name) takes a count from 1 to 100000")
                }
                if name == "--calls" { o.calls = n } else { o.directCalls = n }
            case "--git-libsecret-source":
                let path = try next()
                guard access(path, R_OK) == 0 else { throw BenchError("--git-libsecret-source \(path): not readable") }
                o.gitLibsecretSource = path
            case "--changes":
                guard let n = Int(try next()), n >= 1, n <= 100_000 else {
                    throw BenchError("--changes takes a count from 1 to 100000")
                }
                o.changes = n
            case "--idle":
                guard let n = Double(try next()), n >= 0, n <= 3_600 else {
                    throw BenchError("--idle takes seconds from 0 to 3600")
                }
                o.idleSeconds = n
            case "--profile":
                guard let n = Double(try next()), n > 0, n <= 3_600 else {
                    throw BenchError("--profile takes seconds from 0 to 3600")
                }
                o.profileSeconds = n
            case "--profile-kind":
                let kind = try next()
                guard ["overwrite", "create", "create-fsync"].contains(kind) else {
                    throw BenchError("--profile-kind takes overwrite, create or create-fsync")
                }
                o.profileKind = kind
            case "--profile-writers":
                guard let n = Int(try next()), n >= 1, n <= 8 else {
                    throw BenchError("--profile-writers takes a count from 1 to 8")
                }
                o.profileWriters = n
            case "--builtin-daemon":
                o.keychainfs = nil
            case "--baseline-keychainfs":
                let path = try next()
                guard access(path, X_OK) == 0 else {
                    throw BenchError("--baseline-keychainfs \(path): not an executable")
                }
                o.baselineKeychainfs =
                    path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
            default:
                throw BenchError("unknown option '\(arg)'")
            }
        }
        return o
    }
}

enum Runner {
    static func header(_ o: Options) {
        var u = utsname()
        uname(&u)
        let kernel = withUnsafeBytes(of: &u.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let cpuModel =
            (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8))?
            .split(separator: "\n").first { $0.hasPrefix("model name") }?
            .split(separator: ":").last?.trimmingCharacters(in: .whitespaces) ?? "?"
        let load =
            (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8))?.split(separator: " ").prefix(3).joined(
                separator: " ") ?? "?"
        let formatter = ISO8601DateFormatter()
        #if DEBUG
            let build = "DEBUG build (figures are not representative: use -c release)"
        #else
            let build = "release build"
        #endif
        Out.line(
            "keychainfs-bench \(o.command.rawValue) "
                + (o.command == .faces || o.command == .agent
                    ? "--calls \(o.calls) --direct-calls \(o.directCalls)"
                    : o.command == .notify
                        ? "--changes \(o.changes) --idle \(Int(o.idleSeconds))"
                        : o.command == .sync
                            ? "--changes \(o.changes) --items \(o.syncItems) --idle \(Int(o.idleSeconds))"
                            : "--items \(o.sizes.map(String.init).joined(separator: ","))"))
        Out.line("date \(formatter.string(from: Date())); \(build)")
        Out.line(
            "machine: \(sysconf(Int32(_SC_NPROCESSORS_ONLN))) CPUs (\(cpuModel)), Linux \(kernel), load average at start \(load)"
        )
        Out.line(
            "libraries: libfuse \(String(cString: fuse_pkgversion())), SQLite \(String(cString: sqlite3_libversion())), libsodium \(String(cString: sodium_version_string()))"
        )
        Out.line(
            "temp files in \(o.tmpdir) (\(filesystemType(o.tmpdir))); pinned: this process, its daemons and every command it runs all on CPU \(o.cpu) (sched_setaffinity; now allowed: \(Affinity.current().map(String.init).joined(separator: ",")))"
        )
        if o.command != .core {
            let autogroup =
                (try? String(contentsOfFile: "/proc/sys/kernel/sched_autogroup_enabled", encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
            let daemons =
                o.command == .agent
                ? "keychainfs ssh-agent, OpenSSH's ssh-agent"
                : o.command == .faces
                    ? "keychainfs, dbus-daemon, gnome-keyring-daemon"
                    : o.command == .sync
                        ? "the keychainfs services of devices A, B and C; PostgreSQL (pg_ctl's own)"
                        : "the floors and keychainfs"
            let clients =
                o.command == .agent
                ? "the bench's own agent client"
                : o.command == .faces
                    ? "the git, helper, CLI and secret-tool runs"
                    : o.command == .sync ? "the sync CLI runs and the loops" : "the cat/ls runs and the loops"
            Out.line(
                "sessions: every daemon (\(daemons)) in a session of its own, as users run them; \(clients) in this one (kernel.sched_autogroup_enabled=\(autogroup): the scheduler groups tasks by session)"
            )
            Out.line(
                "keychainfs daemon: "
                    + (o.keychainfs.map { "\($0) mount VAULT MOUNTPOINT -f (the CLI's daemon, default mount options)" }
                        ?? "built-in (FuseSession + KeychainFileSystem + audit log; the keychainfs binary was not found beside this one)")
            )
        }
        Out.line(
            o.command == .faces || o.command == .agent
                ? "ratios are cost ratios, keychainfs ÷ peer: 1.00× = as fast as the peer, 2.00× = twice the time"
                : o.command == .sync
                    ? "ratios are throughput ratios, in a sync group ÷ in none: 1.00× = as fast, 0.50× = half the closes/s"
                    : "ratios are cost ratios, keychainfs (or the keychain) ÷ floor: 1.00× = as cheap as the floor, 2.00× = twice the time (or the bytes)"
        )
    }

    static func run(_ o: Options) throws {
        let root = try makeTempDirectory(
            base: o.tmpdir, prefix: o.command == .sync ? "keychainfs-bench-syncbench-" : "keychainfs-bench-")
        Out.progress("temp directory \(root)")
        if o.command == .faces {
            try FacesBench.run(o, directory: root)
            return try AgentBench.run(o, directory: root)
        }
        if o.command == .agent { return try AgentBench.run(o, directory: root) }
        if o.command == .creates { return try CreateBench.run(o, directory: root) }
        if o.command == .notify { return try NotifyBench.run(o, directory: root) }
        if o.command == .sync { return try SyncBench.run(o, directory: root) }

        Out.progress("crypto baseline")
        let crypto = try CryptoBaseline.measure()
        CoreBench.printCrypto(crypto)

        var vaults: [Int: BenchVault] = [:]
        var core: [CoreFigures] = []
        if o.command == .core || o.command == .all {
            for size in o.sizes {
                Out.progress("core: a vault of \(Fmt.grouped(size)) items (populating, then measuring)")
                let (f, vault) = try CoreBench.measure(size: size, directory: root)
                CoreBench.printFigures(f, crypto: crypto)
                core.append(f)
                vaults[size] = vault
            }
            CoreBench.printFlatness(core)
        }

        var fs: [FSSizeFigures] = []
        if o.command == .fs || o.command == .all {
            let bench = FSBench(directory: root, cli: o.keychainfs)
            Out.progress("fs: mounting the floor (3 times)")
            try bench.startFloor()
            FSBench.printFloor(bench)
            for size in o.sizes {
                let vault: BenchVault
                if let v = vaults[size] {
                    vault = v
                } else {
                    Out.progress("fs: creating and populating a vault of \(Fmt.grouped(size)) items")
                    vault = try BenchVault.create(size: size, directory: root)
                    try vault.populate(upTo: size)
                    vault.close()
                    Out.line()
                    Out.line(
                        "Vault of \(Fmt.grouped(size)) items populated in \(Fmt.seconds(vault.populateSeconds)) (\(Fmt.rate(Double(vault.populateCount) / vault.populateSeconds)) items, \(Fmt.grouped(BenchVault.populateBatch)) per durable transaction)"
                    )
                }
                Out.progress("fs: measuring at \(Fmt.grouped(size)) items")
                let r = try bench.measure(vault)
                FSBench.printFigures(r, kdf: crypto.argon2Interactive)
                fs.append(r)
                if let cli = o.keychainfs {
                    Out.progress("fs: mount until usable at \(Fmt.grouped(size)) items (5 mounts)")
                    let figures = try MountUsable.measure(
                        vault, cli: cli, baseline: o.baselineKeychainfs, directory: root)
                    MountUsable.print(
                        figures, size: size, floorReaddir: r.hasLarge ? r.floor.readdirLarge.p50 : nil)
                }
            }
            try bench.stopFloor()
            FSBench.printFlatness(fs)
        }
    }
}
