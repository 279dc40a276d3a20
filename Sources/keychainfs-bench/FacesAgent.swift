import CPlatform
import Foundation
import Keychain
import KeychainAccess

/// Issue 26: the ssh agent. keychainfs's agent (`keychainfs ssh-agent -D`, its own process, as
/// users start it) over a vault of 1 key and one of 21 keys, and OpenSSH's `ssh-agent -D` holding
/// one Ed25519 key, each asked over one connection (as ssh keeps one) by this process: the round
/// trip of REQUEST_IDENTITIES and of an Ed25519 SIGN_REQUEST, the agents taking turns in rounds.
/// Then the identity check each keychainfs request pays (the pinned process judged: its pidfd and
/// executable; the sender's credentials message), timed in this process.
enum AgentBench {
    struct Agent {
        let name: String
        let socket: String
        let pid: pid_t
        var fd: Int32 = -1
        var blob: [UInt8] = []
        var identities = Samples()
        var signs = Samples()
    }

    static func run(_ o: Options, directory root: String) throws {
        Out.line()
        Out.line("ssh agent (issue 26): keychainfs ssh-agent against OpenSSH's ssh-agent")
        guard let cli = o.keychainfs else {
            Out.line("  skipped: no keychainfs binary beside the bench (build --product keychainfs) or --keychainfs")
            return
        }
        for tool in ["/usr/bin/ssh-agent", "/usr/bin/ssh-add", "/usr/bin/ssh-keygen"] where access(tool, X_OK) != 0 {
            Out.line("  skipped: \(tool) is not installed")
            return
        }
        let directory = root + "/agent"
        let state = directory + "/state"
        for d in [directory, state, state + "/run"] {
            try FileManager.default.createDirectory(
                atPath: d, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        }
        let environment = Daemon.cliEnvironment(state: state).filter { !$0.hasPrefix("SSH_AUTH_SOCK=") }
        let passphraseFile = try BenchVault.writePassphraseFile(in: directory)

        Out.progress("agent: vaults of 1 and 21 Ed25519 keys, OpenSSH's agent with one key")
        var agents: [Agent] = []
        defer {
            for a in agents {
                if a.fd >= 0 { close(a.fd) }
                kill(a.pid, SIGTERM)
                _ = Spawn.wait(a.pid, timeout: 5)
            }
        }
        for keys in [1, 21] {
            let vaultDirectory = directory + "/keys-\(keys)"
            try FileManager.default.createDirectory(atPath: vaultDirectory, withIntermediateDirectories: true)
            let vault = try BenchVault.create(size: keys, directory: vaultDirectory)
            guard let keychain = vault.keychain else { throw BenchError("the vault is closed") }
            for i in 0..<keys { try keychain.createKeyPair(.ed25519, [Schema.label: .string("bench-key-\(i)")]) }
            vault.close()
            let socket = directory + "/keychainfs-\(keys).sock"
            let pid = try Spawn.start(
                cli,
                [
                    "ssh-agent", "-D", "-a", socket, "--vault", vault.path, "--passphrase-file", passphraseFile,
                    "--audit", directory + "/audit.log",
                ],
                stdout: directory + "/agent-\(keys).out", stderr: directory + "/agent-\(keys).err",
                environment: environment.map {
                    $0.hasPrefix("XDG_STATE_HOME=") ? "XDG_STATE_HOME=\(vaultDirectory)/state" : $0
                }, newSession: true)
            agents.append(Agent(name: "keychainfs, \(keys) key\(keys == 1 ? "" : "s")", socket: socket, pid: pid))
        }
        let openSSHSocket = directory + "/openssh.sock"
        let openSSH = try Spawn.start(
            "/usr/bin/ssh-agent", ["-D", "-a", openSSHSocket], stdout: directory + "/openssh.out",
            stderr: directory + "/openssh.err", environment: environment, newSession: true)
        agents.append(Agent(name: "OpenSSH ssh-agent, 1 key", socket: openSSHSocket, pid: openSSH))
        for i in agents.indices {
            guard waitForSocket(agents[i].socket) else {
                throw BenchError("\(agents[i].name) did not listen on \(agents[i].socket)")
            }
        }
        let key = directory + "/id_ed25519"
        let (made, _) = try Spawn.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", key])
        let (added, _) = try Spawn.run(
            "/usr/bin/ssh-add", ["-q", key], environment: environment + ["SSH_AUTH_SOCK=\(openSSHSocket)"])
        guard made == 0, added == 0 else { throw BenchError("ssh-keygen or ssh-add failed (\(made), \(added))") }

        for i in agents.indices {
            agents[i].fd = try connect(agents[i].socket)
            // The key to sign with: the last one listed (for keychainfs's 21, as far from the
            // first as a list goes).
            let reply = try roundTrip(agents[i].fd, [11])
            agents[i].blob = try lastBlob(reply)
        }
        let data = (0..<64).map { UInt8(truncatingIfNeeded: $0 &* 37) }
        var signRequest = SSHWire()
        let warmup = 50
        let rounds = max(200, o.calls * 5)
        Out.progress("agent: \(rounds) rounds of REQUEST_IDENTITIES and SIGN_REQUEST on each agent")
        for round in 0..<(warmup + rounds) {
            for k in 0..<agents.count {
                let i = (round + k) % agents.count
                var t = Clock.now()
                _ = try roundTrip(agents[i].fd, [11])
                let listing = Clock.since(t)
                signRequest = SSHWire()
                signRequest.byte(13)
                signRequest.string(agents[i].blob)
                signRequest.string(data)
                signRequest.uint32(0)
                t = Clock.now()
                let signed = try roundTrip(agents[i].fd, signRequest.bytes)
                let sign = Clock.since(t)
                guard signed.first == 14 else { throw BenchError("\(agents[i].name) refused to sign") }
                if round >= warmup {
                    agents[i].identities.add(listing)
                    agents[i].signs.add(sign)
                }
            }
        }
        let identity = try identityCheck(iterations: 20_000)
        report(agents, identity: identity, pin: try pinCost(iterations: 1_000))
    }

    static func report(
        _ agents: [Agent], identity: (judge: Double, credentials: Double, plain: Double),
        pin: (plain: Double, ownEnd: Double)
    ) {
        let one = agents[0], many = agents[1], openSSH = agents[2]
        func us(_ s: Samples) -> String { String(format: "%.0f µs", s.percentile(0.5) * 1e6) }
        func ratio(_ a: Samples, _ b: Samples) -> String { Fmt.ratio(a.percentile(0.5) / b.percentile(0.5)) }
        Out.line("  median round trip over one connection (\(one.identities.count) each, agents alternating):")
        var rows: [[String]] = [["", "REQUEST_IDENTITIES", "SIGN_REQUEST (Ed25519)"]]
        for a in agents { rows.append([a.name, us(a.identities), us(a.signs)]) }
        Out.table(rows, indent: 4)
        Out.table(
            [
                ["agent sign, 21 keys / 1 key (target ≤ 1.1×)", ratio(many.signs, one.signs)],
                [
                    "REQUEST_IDENTITIES, 1 key, vs OpenSSH's ssh-agent (target ≤ 1.5×)",
                    ratio(one.identities, openSSH.identities),
                ],
                ["REQUEST_IDENTITIES, 21 keys / 1 key", ratio(many.identities, one.identities)],
                ["SIGN_REQUEST, 1 key, vs OpenSSH's ssh-agent", ratio(one.signs, openSSH.signs)],
            ], indent: 2)
        Out.line(
            String(
                format:
                    "  identity check per request: %.1f µs (judging the pinned process: pidfd alive, /proc exe %.1f µs; its credentials message: recv with SCM_CREDENTIALS %.1f µs against %.1f µs plain)",
                identity.judge + max(0, identity.credentials - identity.plain), identity.judge, identity.credentials,
                identity.plain))
        Out.line(
            String(
                format:
                    "  pin at accept, once per connection: %.1f µs; with the agent's own-end check (unix_diag, /proc/PID/fd, fdinfo): %.1f µs",
                pin.plain, pin.ownEnd))
    }

    /// What pinning a connection's peer costs, in µs, without and with the agent's check that
    /// the pinned program holds its end close-on-exec (PeerProcess+OwnEnd.swift): this process
    /// pinned on a close-on-exec socket pair, so the check passes.
    static func pinCost(iterations: Int) throws -> (plain: Double, ownEnd: Double) {
        var fds: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else {
            throw BenchError("socketpair: \(String(cString: strerror(errno)))")
        }
        defer { close(fds[0]); close(fds[1]) }
        var plain = 0.0, ownEnd = 0.0
        for _ in 0..<2 {
            var t = Clock.now()
            for _ in 0..<(iterations / 2) {
                do { _ = try PeerProcess.pin(socket: fds[1]) } catch { throw BenchError("pin: \(error)") }
            }
            plain += Clock.since(t) / Double(iterations) * 1e6
            t = Clock.now()
            for _ in 0..<(iterations / 2) {
                let peer: PeerProcess
                do { peer = try PeerProcess.pin(socket: fds[1], checkingOwnEnd: true) } catch {
                    throw BenchError("pin: \(error)")
                }
                if let why = peer.ownEnd { throw BenchError("own-end check failed on a close-on-exec pair: \(why)") }
            }
            ownEnd += Clock.since(t) / Double(iterations) * 1e6
        }
        return (plain, ownEnd)
    }

    /// What a keychainfs socket request pays to know its caller, in µs: `PeerProcess.judge` of
    /// this process pinned on a socket pair, and a 5-byte message's send and receive with and
    /// without the sender's credentials (`SO_PASSCRED`).
    static func identityCheck(iterations: Int) throws -> (judge: Double, credentials: Double, plain: Double) {
        func pair(passcred: Bool) throws -> (Int32, Int32) {
            var fds: [Int32] = [0, 0]
            guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0 else {
                throw BenchError("socketpair: \(String(cString: strerror(errno)))")
            }
            if passcred { _ = kcfs_set_passcred(fds[1]) }
            return (fds[0], fds[1])
        }
        let (a, b) = try pair(passcred: true)
        defer { close(a); close(b) }
        let peer: PeerProcess
        do { peer = try PeerProcess.pin(socket: b) } catch { throw BenchError("pin: \(error)") }
        let me: Set<pid_t> = [getpid()]
        let t = Clock.now()
        for _ in 0..<iterations where peer.judge(senders: me).why != nil {
            throw BenchError("this process was judged lessened")
        }
        let judge = Clock.since(t) / Double(iterations) * 1e6
        var buffer = [UInt8](repeating: 0, count: 5)
        let message: [UInt8] = [0, 0, 0, 1, 11]
        func exchange(_ send: Int32, _ receive: Int32, credentials: Bool) -> Double {
            let start = Clock.now()
            for _ in 0..<iterations {
                _ = message.withUnsafeBytes { Glibc.send(send, $0.baseAddress, 5, 0) }
                var sender: Int32 = 0
                _ = buffer.withUnsafeMutableBytes {
                    credentials
                        ? kcfs_recv_with_sender(receive, $0.baseAddress, 5, &sender)
                        : recv(receive, $0.baseAddress, 5, 0)
                }
            }
            return Clock.since(start) / Double(iterations) * 1e6
        }
        let (c, d) = try pair(passcred: false)
        defer { close(c); close(d) }
        // Alternated in halves, so drift hits both alike.
        var credentials = 0.0, plain = 0.0
        for _ in 0..<2 {
            credentials += exchange(a, b, credentials: true) / 2
            plain += exchange(c, d, credentials: false) / 2
        }
        return (judge, credentials, plain)
    }

    static func waitForSocket(_ path: String) -> Bool {
        for _ in 0..<200 {
            if let fd = try? connect(path) {
                close(fd)
                return true
            }
            Clock.sleep(0.05)
        }
        return false
    }

    static func connect(_ path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw BenchError("socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, b) in path.utf8.prefix(raw.count - 1).enumerated() { raw[i] = b }
        }
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard rc == 0 else {
            close(fd)
            throw BenchError("connect \(path): \(String(cString: strerror(errno)))")
        }
        return fd
    }

    /// One request framed with its length, and the reply's body.
    static func roundTrip(_ fd: Int32, _ body: [UInt8]) throws -> [UInt8] {
        var framed = SSHWire()
        framed.string(body)
        try writeAll(fd, framed.bytes)
        let header = try readExactly(fd, 4)
        return try readExactly(fd, header.reduce(0) { $0 << 8 | Int($1) })
    }

    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + sent, bytes.count - sent, 0) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw BenchError("send: \(String(cString: strerror(errno)))") }
            sent += n
        }
    }

    static func readExactly(_ fd: Int32, _ count: Int) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        var got = 0
        while got < count {
            let n = out.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + got, count - got, 0) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw BenchError("the agent closed the connection") }
            got += n
        }
        return out
    }

    /// The last key blob of an IDENTITIES_ANSWER.
    static func lastBlob(_ reply: [UInt8]) throws -> [UInt8] {
        guard reply.first == 12, reply.count >= 5 else { throw BenchError("not an identities answer") }
        var i = 5
        var last: [UInt8]?
        func string() -> [UInt8]? {
            guard i + 4 <= reply.count else { return nil }
            let n = reply[i..<(i + 4)].reduce(0) { $0 << 8 | Int($1) }
            guard i + 4 + n <= reply.count else { return nil }
            defer { i += 4 + n }
            return Array(reply[(i + 4)..<(i + 4 + n)])
        }
        while let blob = string(), string() != nil { last = blob }
        guard let last else { throw BenchError("the agent lists no key") }
        return last
    }
}
