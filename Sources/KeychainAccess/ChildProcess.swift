import CPlatform
import FoundationEssentials
import Glibc
import SystemPackage

/// Starting a helper process (the mount daemon, pinentry) with exactly the descriptors it
/// should have: posix_spawn with file actions, so nothing the parent holds leaks into the
/// child except what is named here (every other descriptor of ours is close-on-exec).
public enum ChildProcess {
    /// What a descriptor of the child is.
    public enum Descriptor: Sendable {
        /// /dev/null, read-only.
        case null
        /// A file opened for appending (created 0600).
        case appending(String)
        /// A descriptor of ours, duplicated.
        case duplicate(Int32)
    }

    /// Spawns `path` with `arguments` (argv[0] included) and `environment` (nil: ours), its
    /// descriptors set in order (a `.duplicate` may name one set before it). `newSession` puts
    /// the child in a session of its own (a daemon that outlives the terminal).
    public static func spawn(
        _ path: String, arguments: [String], environment: [String]? = nil,
        descriptors: [(Int32, Descriptor)], newSession: Bool = false
    ) throws(Errno) -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for (target, descriptor) in descriptors {
            switch descriptor {
            case .null: posix_spawn_file_actions_addopen(&actions, target, "/dev/null", O_RDONLY, 0)
            case .appending(let file):
                posix_spawn_file_actions_addopen(&actions, target, file, O_WRONLY | O_APPEND | O_CREAT, 0o600)
            case .duplicate(let source): posix_spawn_file_actions_adddup2(&actions, source, target)
            }
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // The child starts with the default action for the signals a parent may ignore or
        // handle itself (`keychainfs run` forwards SIGTERM and SIGHUP; Swift ignores SIGPIPE).
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGTERM, SIGHUP, SIGINT, SIGQUIT, SIGPIPE] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        // And with no signal blocked: the service and the ssh agent block SIGTERM, SIGINT and
        // SIGHUP in every thread for the one thread that sigwaits for them.
        var unblocked = sigset_t()
        sigemptyset(&unblocked)
        posix_spawnattr_setsigmask(&attributes, &unblocked)
        posix_spawnattr_setflags(
            &attributes,
            Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK) | (newSession ? kcfs_posix_spawn_setsid : 0))
        let cArgs = arguments.map { strdup($0) } + [nil]
        let cEnv = environment.map { $0.map { strdup($0) } + [nil] }
        defer {
            cArgs.forEach { free($0) }
            cEnv?.forEach { free($0) }
        }
        var pid: pid_t = 0
        let rc =
            cEnv.map { env in posix_spawn(&pid, path, &actions, &attributes, cArgs, env) }
            ?? posix_spawn(&pid, path, &actions, &attributes, cArgs, environ)
        guard rc == 0 else { throw Errno(rawValue: rc) }
        return pid
    }

    /// How a child ended: its exit status, or the signal that killed it.
    public enum Termination: Equatable, Sendable {
        case exited(Int32)
        case signaled(Int32)

        /// Foundation's `Process.terminationStatus`: the exit status, or the signal's number.
        public var status: Int32 {
            switch self {
            case .exited(let s), .signaled(let s): s
            }
        }
    }

    /// Waits for the child `pid` to end (interrupted waits resumed).
    public static func wait(_ pid: pid_t) -> Termination {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            guard errno == EINTR else { return .exited(127) }
        }
        // WIFEXITED / WEXITSTATUS / WTERMSIG, which Swift cannot call (macros).
        return status & 0x7f == 0 ? .exited((status >> 8) & 0xff) : .signaled(status & 0x7f)
    }

    /// A pipe, both ends close-on-exec: a child gets an end only as a `.duplicate` descriptor.
    public static func pipe() throws(Errno) -> (read: Int32, write: Int32) {
        var ends: [Int32] = [0, 0]
        guard Glibc.pipe(&ends) == 0 else { throw Errno(rawValue: errno) }
        for fd in ends { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        return (ends[0], ends[1])
    }

    /// Runs `path` with `arguments` (argv[0] included), its standard input /dev/null and its
    /// output and errors dropped, and waits for it.
    public static func runQuietly(_ path: String, arguments: [String]) throws(Errno) -> Termination {
        let pid = try spawn(
            path, arguments: arguments,
            descriptors: [(0, .null), (1, .appending("/dev/null")), (2, .appending("/dev/null"))])
        return wait(pid)
    }
}
