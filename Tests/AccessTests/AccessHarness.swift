import Foundation
import Testing
@_exported import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

// What the access-control and certificate integration tests (issues 4 and 5) add to
// TestSupport (the sandbox, `withMount`, the runner, the mount table, the python prelude and
// the teardown that ALWAYS unmounts and ends what the sandbox started live there): a reader
// that reports each read's outcome and time, on a pseudo-terminal of its own if asked, and tmux.

typealias Sandbox = TestSandbox

extension TestSandbox {
    var tmuxSocket: String { "kcfs-" + String(name.suffix(6)) + "-" + name }
    var ptyRunnerPath: String { helperScript("ptyrun.py", Self.ptyRunner) }
    var readerPath: String { helperScript("reader.py", Self.readerScript) }

    /// Writes a helper script into the sandbox on first use; its path.
    private func helperScript(_ file: String, _ text: String) -> String {
        let path = root + "/" + file
        if !FileManager.default.fileExists(atPath: path) {
            try? Data(text.utf8).write(to: URL(fileURLWithPath: path))
        }
        return path
    }

    // MARK: Reading the mount from a child process

    /// The reader's steps: `read:PATH`, `nb:PATH` (O_NONBLOCK), `sleep:SECONDS`. It prints
    /// `PID n`, `TTY t|-`, then one `RESULT OK <secret> <elapsed>` or `RESULT ERRNAME <elapsed>` per read.
    func reader(_ steps: [String], timeout: Double = 30) throws -> ReaderResult {
        ReaderResult(try run("/usr/bin/python3", [readerPath] + steps, timeout: timeout))
    }

    /// The same reader on a pseudo-terminal of its own (so the caller has a tty on fds 0-2).
    func readerOnPty(_ steps: [String], timeout: Double = 30) throws -> ReaderResult {
        ReaderResult(
            try run(
                "/usr/bin/python3", [ptyRunnerPath, String(timeout), "/usr/bin/python3", readerPath] + steps,
                timeout: timeout + 5))
    }

    func spawnReaderOnPty(_ steps: [String], timeout: Double = 30) throws -> Spawned {
        try spawn(
            "/usr/bin/timeout",
            [
                "-k", "2", String(timeout + 3), "/usr/bin/python3", ptyRunnerPath, String(timeout),
                "/usr/bin/python3", readerPath,
            ] + steps)
    }

    // MARK: tmux

    /// tmux on this sandbox's own server socket, killed at teardown before the unmount.
    @discardableResult
    func tmux(_ args: [String], timeout: Double = 10) throws -> RunResult {
        let socket = tmuxSocket
        onTeardown(beforeUnmount: "tmux") { [self] in
            _ = try? run("/usr/bin/tmux", ["-L", socket, "kill-server"], timeout: 5)
        }
        return try run("/usr/bin/tmux", ["-L", socket, "-f", "/dev/null"] + args, timeout: timeout)
    }

    // MARK: Helper scripts

    /// Runs a command on a new pseudo-terminal (pty.fork: new session, the pty as controlling
    /// terminal and fds 0-2), copies its output to stdout, kills it after TIMEOUT seconds, and
    /// exits with its status.
    static let ptyRunner = """
        import os, sys, pty, select, time, signal
        timeout = float(sys.argv[1]); cmd = sys.argv[2:]
        pid, fd = pty.fork()
        if pid == 0:
            try:
                os.execv(cmd[0], cmd)
            finally:
                os._exit(127)
        out = b''
        deadline = time.time() + timeout
        status = None
        while True:
            r, _, _ = select.select([fd], [], [], 0.1)
            if r:
                try:
                    data = os.read(fd, 65536)
                except OSError:
                    data = b''
                if not data:
                    break
                out += data
            if time.time() > deadline:
                os.kill(pid, signal.SIGKILL)
                out += b'\\nPTYRUN TIMEOUT\\n'
                break
        _, st = os.waitpid(pid, 0)
        sys.stdout.buffer.write(out.replace(b'\\r\\n', b'\\n'))
        sys.stdout.flush()
        sys.exit(os.waitstatus_to_exitcode(st) & 0xff)
        """

    static let readerScript = """
        import os, sys, errno, time
        print('PID', os.getpid(), flush=True)
        try:
            print('TTY', os.ttyname(0), flush=True)
        except OSError:
            print('TTY -', flush=True)
        for step in sys.argv[1:]:
            kind, _, arg = step.partition(':')
            if kind == 'sleep':
                time.sleep(float(arg)); continue
            flags = os.O_RDONLY | (os.O_NONBLOCK if kind == 'nb' else 0)
            t = time.time()
            try:
                fd = os.open(arg, flags)
                try:
                    data = b''
                    while True:
                        b = os.read(fd, 65536)
                        if not b: break
                        data += b
                finally:
                    os.close(fd)
                print('RESULT OK %s %.2f' % (data.decode('utf-8', 'replace'), time.time() - t), flush=True)
            except OSError as e:
                print('RESULT %s %.2f' % (errno.errorcode.get(e.errno, str(e.errno)), time.time() - t), flush=True)
        """
}

/// What the reader printed.
struct ReaderResult {
    let run: RunResult
    init(_ r: RunResult) { run = r }
    var pid: pid_t? { run.lines.first { $0.hasPrefix("PID ") }.flatMap { pid_t($0.dropFirst(4)) } }
    var tty: String? {
        run.lines.first { $0.hasPrefix("TTY ") }.map { String($0.dropFirst(4)) }.flatMap { $0 == "-" ? nil : $0 }
    }
    /// One entry per read: ("OK", secret, seconds) or ("EACCES", nil, seconds).
    var results: [(outcome: String, secret: String?, seconds: Double)] {
        run.lines.filter { $0.hasPrefix("RESULT ") }.map { line in
            let parts = line.split(separator: " ").map(String.init)
            let seconds = Double(parts.last ?? "") ?? -1
            if parts.count >= 4 && parts[1] == "OK" {
                return ("OK", parts[2..<(parts.count - 1)].joined(separator: " "), seconds)
            }
            return (parts.count > 1 ? parts[1] : "?", nil, seconds)
        }
    }
    var summary: String { run.summary }
}

/// The one suite: serialized, because its tests measure time (idle lock, prompt timeouts,
/// reuse windows), change /etc/fuse.conf and add users, on a small shared machine.
@Suite("access control and certificates (issues 4, 5)", .serialized)
enum AccessSuite {}
