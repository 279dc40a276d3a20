import FoundationEssentials
import Glibc
import Synchronization
import Keychain
import KeychainCrypto

/// One pinentry process and its Assuan conversation.
struct AssuanSession {
    let pid: pid_t
    let input: Int32  // we write commands here
    let output: Int32  // we read replies here
    let deadline: Date

    init(program: String, tty: String?, display: String?, term: String?, timeout: Int) throws {
        var toChild: [Int32] = [0, 0], fromChild: [Int32] = [0, 0]
        guard pipe(&toChild) == 0, pipe(&fromChild) == 0 else { throw KeychainError(.io, "pipe failed") }
        for fd in toChild + fromChild { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var args = [program]
        if let tty { args += ["--ttyname", tty] }
        if let display { args += ["--display", display] }
        var env = ["PATH=/usr/bin:/bin", "LANG=C.UTF-8"]
        if let display {
            env.append(display.hasPrefix("wayland") ? "WAYLAND_DISPLAY=\(display)" : "DISPLAY=\(display)")
        }
        env.append("TERM=\(term ?? "xterm")")
        let child: pid_t
        do {
            child = try ChildProcess.spawn(
                program, arguments: args, environment: env,
                descriptors: [(0, .duplicate(toChild[0])), (1, .duplicate(fromChild[1]))])
        } catch {
            close(toChild[0]); close(fromChild[0]); close(toChild[1]); close(fromChild[1])
            throw KeychainError(.interactionNotAllowed, "cannot start \(program): \(error)")
        }
        close(toChild[0]); close(fromChild[1])
        pid = child
        input = toChild[1]
        output = fromChild[0]
        deadline = Date().addingTimeInterval(Double(timeout))
        let greeting = try readLine()
        guard greeting.hasPrefix("OK") else { throw KeychainError(.interactionNotAllowed, "pinentry did not greet") }
        if let tty { try command("OPTION ttyname=\(tty)") }
        try command("OPTION ttytype=\(term ?? "xterm")")
    }

    /// Percent-escapes what Assuan cannot carry in a line.
    static func escape(_ s: String) -> String {
        var out = [UInt8]()
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "%"), 10, 13: out += Array(("%" + AttributeText.hex(b, width: 2, uppercase: true)).utf8)
            default: out.append(b)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    func readLine() throws -> String {
        var line = [UInt8]()
        var byte: UInt8 = 0
        while true {
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0 else {
                kill(pid, SIGKILL)
                throw KeychainError(.authFailed, "the prompt timed out")
            }
            var pfd = pollfd(fd: output, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, Int32(min(remaining, 1) * 1000))
            if ready == 0 { continue }
            if ready < 0 {
                if errno == EINTR { continue }; throw KeychainError(.interactionNotAllowed, "pinentry: poll failed")
            }
            let n = read(output, &byte, 1)
            guard n == 1 else { throw KeychainError(.interactionNotAllowed, "pinentry exited") }
            if byte == 10 { return String(decoding: line, as: UTF8.self) }
            line.append(byte)
        }
    }

    /// Sends one command and waits for its OK; an ERR becomes the matching status.
    func command(_ line: String) throws {
        _ = (line + "\n").withCString { write(input, $0, strlen($0)) }
        while true {
            let reply = try readLine()
            if reply.hasPrefix("OK") { return }
            if reply.hasPrefix("ERR") { throw Self.error(reply) }
            // S (status) and # (comment) lines carry nothing we need.
        }
    }

    /// GETPIN: the PIN arrives in a D line (percent-escaped), then OK.
    func getPin() throws -> [UInt8] {
        _ = "GETPIN\n".withCString { write(input, $0, strlen($0)) }
        var pin = [UInt8]()
        while true {
            var reply = try readLine()
            if reply.hasPrefix("D ") {
                let bytes = Array(reply.utf8.dropFirst(2))
                var i = 0
                while i < bytes.count {
                    if bytes[i] == UInt8(ascii: "%"), i + 2 < bytes.count,
                        let v = UInt8(String(decoding: bytes[(i + 1)...(i + 2)], as: UTF8.self), radix: 16)
                    {
                        pin.append(v); i += 3
                    } else {
                        pin.append(bytes[i]); i += 1
                    }
                }
                reply = ""
                continue
            }
            if reply.hasPrefix("OK") { return pin }
            if reply.hasPrefix("ERR") { Sodium.wipe(&pin); throw Self.error(reply) }
        }
    }

    static let confirmed = 0
    static let cancelled = 99
    static let notConfirmed = 114

    /// CONFIRM: which button was pressed, as a gpg-error code (0 OK, 114 NOTOK, 99 cancel) or
    /// another error's code (62 timeout).
    func confirm() throws -> Int {
        _ = "CONFIRM\n".withCString { write(input, $0, strlen($0)) }
        while true {
            let reply = try readLine()
            if reply.hasPrefix("OK") { return Self.confirmed }
            if reply.hasPrefix("ERR") { return Self.code(reply) }
        }
    }

    static func code(_ reply: String) -> Int {
        (reply.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0) & 0xFFFF
    }

    /// gpg-error codes (the low 16 bits): 99 cancelled, 114 not confirmed (denied), 62 timeout.
    static func error(_ reply: String) -> KeychainError { error(code: code(reply), reply: reply) }

    static func error(code: Int, reply: String = "") -> KeychainError {
        switch code {
        case 99: return KeychainError(.userCanceled, "the user cancelled the prompt")
        case 114: return KeychainError(.authFailed, "the user denied access")
        case 62: return KeychainError(.authFailed, "the prompt timed out")
        default:
            return KeychainError(
                .interactionNotAllowed, "pinentry failed: \(reply.isEmpty ? "error \(code)" : String(reply.prefix(80)))"
            )
        }
    }

    func finish() {
        _ = "BYE\n".withCString { write(input, $0, strlen($0)) }
        Glibc.close(input)
        Glibc.close(output)
        var status: Int32 = 0
        // Reap without hanging: a pinentry that ignores BYE is killed.
        for _ in 0..<20 {
            if waitpid(pid, &status, WNOHANG) == pid { return }
            usleep(10_000)
        }
        kill(pid, SIGKILL)
        waitpid(pid, &status, 0)
    }
}
