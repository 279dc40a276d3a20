import Dispatch
import FoundationEssentials
import Glibc
import Synchronization
import Keychain
import KeychainAccess
import KeychainCredentials
import SystemPackage

/// A command named by `run`, found the way a shell finds it.
enum Executable {
    static func find(_ name: String, path: String?) throws -> String {
        if name.contains("/") {
            guard access(name, X_OK) == 0 else { throw notRunnable(name, Errno(rawValue: errno)) }
            return name
        }
        for dir in (path ?? "/usr/local/bin:/usr/bin:/bin").split(separator: ":") {
            let candidate = (dir.isEmpty ? "." : String(dir)) + "/" + name
            var info = stat()
            if stat(candidate, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, access(candidate, X_OK) == 0 {
                return candidate
            }
        }
        throw CLIError(message: "\(name): command not found", exitCode: 127)
    }

    static func notRunnable(_ name: String, _ cause: Errno) -> CLIError {
        CLIError(message: "cannot run \(name): \(cause)", exitCode: cause == .noSuchFileOrDirectory ? 127 : 126)
    }
}

/// Runs the child of `keychainfs run` and waits for it: its stdin is ours; its stdout and
/// stderr come through pipes and a `SecretMasker` each (or are ours, unmasked).
enum ChildRunner {
    /// The child's exit status, or 128 + the signal that ended it.
    static func run(_ path: String, arguments: [String], environment: [String], masking: SecretMasker?) throws
        -> Int32
    {
        // Forwarding is in place before the child exists: a SIGTERM that arrives while it is
        // being spawned is passed on as soon as its pid is known, never lost with run.
        let forwarding = TerminationForwarder()
        defer { forwarding.stop() }
        guard let masking else {
            let pid = try spawn(path, arguments, environment, [])
            forwarding.attach(pid)
            return waitFor(pid)
        }
        let out = try pipePair(), err = try pipePair()
        let pid: pid_t
        do {
            pid = try spawn(path, arguments, environment, [(1, .duplicate(out.write)), (2, .duplicate(err.write))])
        } catch {
            [out.read, out.write, err.read, err.write].forEach { close($0) }
            throw error
        }
        forwarding.attach(pid)
        close(out.write)
        close(err.write)
        var streams = [(out.read, Int32(1), masking), (err.read, Int32(2), masking)]
        var buffer = [UInt8](repeating: 0, count: 65536)
        while !streams.isEmpty {
            var fds = streams.map { pollfd(fd: $0.0, events: Int16(POLLIN), revents: 0) }
            if poll(&fds, nfds_t(fds.count), -1) < 0 {
                if errno == EINTR { continue }
                break
            }
            var finished: [Int] = []
            for (i, fd) in fds.enumerated() where fd.revents != 0 {
                let n = buffer.withUnsafeMutableBytes { read(fd.fd, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 {
                    writeAll(streams[i].1, streams[i].2.finish())
                    finished.append(i)
                } else {
                    writeAll(streams[i].1, streams[i].2.feed(Array(buffer[0..<n])))
                }
            }
            for i in finished.reversed() {
                close(streams[i].0)
                streams.remove(at: i)
            }
        }
        return waitFor(pid)
    }

    static func spawn(
        _ path: String, _ arguments: [String], _ environment: [String],
        _ descriptors: [(Int32, ChildProcess.Descriptor)]
    ) throws -> pid_t {
        do {
            return try ChildProcess.spawn(
                path, arguments: arguments, environment: environment, descriptors: descriptors)
        } catch {
            throw Executable.notRunnable(arguments[0], error)
        }
    }

    static func pipePair() throws -> (read: Int32, write: Int32) {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw CLIError.system("pipe", Errno(rawValue: errno)) }
        // Ours only: the child gets its ends through dup2, which clears the flag on the copy.
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        return (fds[0], fds[1])
    }

    static func waitFor(_ pid: pid_t) -> Int32 {
        var raw: Int32 = 0
        while waitpid(pid, &raw, 0) < 0 {
            if errno != EINTR { return 1 }
        }
        let signal = raw & 0x7f
        return signal != 0 ? 128 + signal : (raw >> 8) & 0xff
    }

    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return }
            offset += n
        }
    }
}

/// A file only its owner can read, written whole or not at all: a temporary file of mode 0600
/// beside the target, then linked to the name (which fails if the name exists) or, with
/// `replacing`, renamed over it.
enum PrivateFile {
    static func write(_ bytes: [UInt8], to path: String, replacing: Bool) throws {
        let dir = KeychainPaths.parent(of: path)
        var template = Array("\(dir)/.keychainfs-inject-XXXXXX".utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else { throw CLIError.system("cannot create a file in \(dir)", Errno(rawValue: errno)) }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        let temp = String(cString: template)
        var linked = false
        defer {
            if !linked { unlink(temp) }
        }
        fchmod(fd, 0o600)
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                let cause = Errno(rawValue: errno)
                close(fd)
                throw CLIError.system("cannot write \(path)", cause)
            }
            offset += n
        }
        let synced = fsync(fd) == 0
        close(fd)
        guard synced else { throw CLIError.system("cannot write \(path)", Errno(rawValue: errno)) }
        if replacing {
            guard rename(temp, path) == 0 else { throw CLIError.system("cannot write \(path)", Errno(rawValue: errno)) }
            linked = true
        } else {
            guard link(temp, path) == 0 else {
                let cause = Errno(rawValue: errno)
                if cause == .fileExists { throw CLIError.failure("\(path) exists; use --force to replace it") }
                throw CLIError.system("cannot write \(path)", cause)
            }
        }
    }
}

/// The terminal's ^C and ^\ reach the whole foreground group: the child decides, and run stays
/// to pass on its last output and its status. SIGTERM and SIGHUP sent to run alone are passed
/// on to the child, so that ending run ends the command; one that comes before the child's pid
/// is known is passed on when it is (`attach`). The child starts with default actions
/// (ChildProcess sets them), whatever run ignores.
final class TerminationForwarder {
    /// The child's pid once known, and the signals that came before it.
    private final class Target: Sendable {
        private struct State {
            var pid: pid_t?
            var early: [Int32] = []
        }
        private let state = Mutex(State())

        /// The pid to pass `sig` on to, or nil after keeping it for `attach`.
        func forward(_ sig: Int32) -> pid_t? {
            state.withLock { s in
                if s.pid == nil { s.early.append(sig) }
                return s.pid
            }
        }

        func attach(_ pid: pid_t) -> [Int32] {
            state.withLock { s in
                s.pid = pid
                defer { s.early = [] }
                return s.early
            }
        }
    }

    private let target = Target()
    private let sources: [any DispatchSourceSignal]

    init() {
        signal(SIGINT, SIG_IGN)
        signal(SIGQUIT, SIG_IGN)
        let target = self.target
        sources = [SIGTERM, SIGHUP].map { sig in
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler {
                if let pid = target.forward(sig) { kill(pid, sig) }
            }
            source.resume()
            return source
        }
    }

    func attach(_ pid: pid_t) {
        for sig in target.attach(pid) { kill(pid, sig) }
    }

    func stop() { sources.forEach { $0.cancel() } }
}
