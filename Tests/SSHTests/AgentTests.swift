import Foundation
import Testing
@_exported import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 11, points 2 and 5: `keychainfs ssh-agent` driven by the real ssh-add and ssh-keygen,
/// no network.
@Suite("ssh agent")
struct AgentTests {
    static let algorithms: [(name: String, sshType: String, listed: String)] = [
        ("ed25519", "ssh-ed25519", "(ED25519)"), ("p256", "ecdsa-sha2-nistp256", "(ECDSA)"),
        ("p384", "ecdsa-sha2-nistp384", "(ECDSA)"), ("rsa3072", "ssh-rsa", "(RSA)"),
    ]

    /// Starts `ssh-agent -D` on a socket in the sandbox; the sandbox's teardown ends it.
    static func startAgent(_ box: TestSandbox, options: [String] = [], unlocked: Bool = true) throws -> String {
        let socket = box.root + "/agent.sock"
        let bin = try requireBinary()
        let agent = try box.spawn(
            bin, ["ssh-agent", "-D", "-a", socket] + options + (unlocked ? box.unlockArgs : ["--vault", box.vault]))
        let ready = waitUntil(20) { access(socket, F_OK) == 0 && agent.stdoutSoFar.contains("export SSH_AUTH_SOCK") }
        try #require(
            ready,
            "the agent did not start: \(agent.stdoutSoFar) \((try? String(contentsOfFile: agent.errPath, encoding: .utf8)) ?? "")"
        )
        #expect(agent.stdoutSoFar.hasPrefix("SSH_AUTH_SOCK=\(socket); export SSH_AUTH_SOCK;"))
        var st = stat()
        #expect(
            stat(socket, &st) == 0 && st.st_mode & 0o777 == 0o600, "socket mode \(String(st.st_mode & 0o777, radix: 8))"
        )
        return socket
    }

    static func createKeys(_ box: TestSandbox) throws -> [String: String] {
        var lines: [String: String] = [:]
        for (alg, _, _) in algorithms {
            let made = try box.cli(["create-keypair", "-a", alg, "-l", "agent-\(alg)"] + box.unlockArgs)
            try #require(made.status == 0, "\(alg): \(made.summary)")
            lines[alg] = made.stdout.trimmingCharacters(in: .newlines)
        }
        return lines
    }

    @Test("ssh-add -l and -L list the vault's keys; ssh-add of a key is refused")
    func listing() throws {
        try withSandbox { box in
            let lines = try Self.createKeys(box)
            let socket = try Self.startAgent(box)
            let env = ["SSH_AUTH_SOCK": socket]
            let l = try box.run("/usr/bin/ssh-add", ["-l"], env: env)
            #expect(l.status == 0, "\(l.summary)")
            for (alg, _, listed) in Self.algorithms {
                #expect(l.lines.contains { $0.contains("agent-\(alg)") && $0.hasSuffix(listed) }, "\(alg): \(l.stdout)")
            }
            let big = try box.run("/usr/bin/ssh-add", ["-L"], env: env)
            #expect(Set(big.lines) == Set(lines.values), "\(big.stdout) vs \(lines)")
            // Adding a key through the agent is refused (keys enter through the vault).
            #expect(try box.sh("ssh-keygen -q -t ed25519 -N '' -f \(q(box.root + "/extra"))").status == 0)
            let add = try box.run("/usr/bin/ssh-add", [box.root + "/extra"], env: env)
            #expect(add.status != 0, "\(add.summary)")
            let del = try box.run("/usr/bin/ssh-add", ["-D"], env: env)
            #expect(del.status != 0, "\(del.summary)")
            #expect(try box.run("/usr/bin/ssh-add", ["-l"], env: env).lines.count == Self.algorithms.count)
        }
    }

    @Test("ssh-keygen -Y sign with each agent key, -Y verify accepts the signature")
    func sshsig() throws {
        try withSandbox { box in
            let lines = try Self.createKeys(box)
            let socket = try Self.startAgent(box)
            let message = box.root + "/message"
            try Data("signed through the keychainfs agent\n".utf8).write(to: URL(fileURLWithPath: message))
            for (alg, _, _) in Self.algorithms {
                let pub = box.root + "/\(alg).pub", sig = message + ".sig"
                try Data((lines[alg]! + "\n").utf8).write(to: URL(fileURLWithPath: pub))
                try? FileManager.default.removeItem(atPath: sig)
                let sign = try box.run(
                    "/usr/bin/ssh-keygen", ["-Y", "sign", "-f", pub, "-n", "file", message],
                    env: ["SSH_AUTH_SOCK": socket])
                #expect(sign.status == 0, "\(alg): \(sign.summary)")
                let allowed = box.root + "/allowed_signers"
                try Data("tester@keychainfs \(lines[alg]!)\n".utf8).write(to: URL(fileURLWithPath: allowed))
                let verify = try box.sh(
                    "ssh-keygen -Y verify -f \(q(allowed)) -I tester@keychainfs -n file -s \(q(sig)) < \(q(message))")
                #expect(verify.status == 0 && verify.stdout.contains("Good"), "\(alg): \(verify.summary)")
            }
        }
    }

    /// A sign request with the given flags through a small python agent client; the signature
    /// is checked with openssl against the public key ssh-keygen converts.
    @Test("RSA: rsa-sha2-256 and rsa-sha2-512 signatures verify with openssl; SHA-1 (flags 0) is refused")
    func rsaHashes() throws {
        try withSandbox { box in
            let lines = try Self.createKeys(box)
            let socket = try Self.startAgent(box)
            let pub = box.root + "/rsa.pub", pem = box.root + "/rsa.pem", data = box.root + "/to-sign"
            try Data((lines["rsa3072"]! + "\n").utf8).write(to: URL(fileURLWithPath: pub))
            try Data("data to sign".utf8).write(to: URL(fileURLWithPath: data))
            let conv = try box.sh("ssh-keygen -e -m PKCS8 -f \(q(pub)) > \(q(pem))")
            try #require(conv.status == 0, "\(conv.summary)")
            let client = """
                import base64, socket, struct, sys
                sock, pub, data, flags, out = sys.argv[1:6]
                blob = base64.b64decode(open(pub).read().split()[1])
                msg = open(data, 'rb').read()
                s = lambda b: struct.pack('>I', len(b)) + b
                body = bytes([13]) + s(blob) + s(msg) + struct.pack('>I', int(flags))
                c = socket.socket(socket.AF_UNIX); c.connect(sock); c.sendall(s(body))
                n = struct.unpack('>I', c.recv(4))[0]; reply = b''
                while len(reply) < n: reply += c.recv(n - len(reply))
                if reply[0] != 14: print('failure', reply[0]); sys.exit(0)
                sig = reply[5:]; alg_len = struct.unpack('>I', sig[:4])[0]
                alg = sig[4:4 + alg_len].decode(); raw = sig[8 + alg_len:]
                open(out, 'wb').write(raw); print(alg)
                """
            for (flags, name, digest) in [(2, "rsa-sha2-256", "-sha256"), (4, "rsa-sha2-512", "-sha512")] {
                let out = box.root + "/sig-\(flags)"
                let r = try box.run("/usr/bin/python3", ["-c", client, socket, pub, data, "\(flags)", out])
                #expect(r.stdout == name + "\n", "\(r.summary)")
                let v = try box.sh("openssl dgst \(digest) -verify \(q(pem)) -signature \(q(out)) \(q(data))")
                #expect(v.status == 0 && v.stdout.contains("Verified OK"), "\(name): \(v.summary)")
            }
            let sha1 = try box.run("/usr/bin/python3", ["-c", client, socket, pub, data, "0", box.root + "/sig-0"])
            #expect(sha1.stdout == "failure 5\n", "\(sha1.summary)")
        }
    }

    @Test("background mode prints the lines to eval; the socket goes when the agent is stopped")
    func background() throws {
        try withSandbox { box in
            _ = try Self.createKeys(box)
            let socket = box.root + "/bg.sock"
            let start = try box.cli(["ssh-agent", "-a", socket, "--log", box.root + "/agent.log"] + box.unlockArgs)
            try #require(start.status == 0, "\(start.summary)")
            let pidText = start.stdout.split(separator: "\n").first { $0.hasPrefix("SSH_AGENT_PID=") }
            let pid = pid_t(pidText?.dropFirst("SSH_AGENT_PID=".count).prefix { $0.isNumber } ?? "") ?? 0
            try #require(pid > 0, "\(start.stdout)")
            let script = "eval \"$(cat)\" >/dev/null && ssh-add -l"
            let l = try box.sh(script, stdin: Array(start.stdout.utf8))
            #expect(l.status == 0 && l.lines.count == Self.algorithms.count, "\(l.summary)")
            kill(pid, SIGTERM)
            #expect(waitUntil(5) { access(socket, F_OK) != 0 }, "the socket stayed after SIGTERM")
        }
    }

    @Test("access groups: a key in a group is offered only to the executables of that group")
    func accessGroups() throws {
        try withSandbox { box in
            let policy = try box.cli(["access-group", "add"] + box.unlockArgs + ["team", "/usr/bin/ssh-keygen"])
            try #require(policy.status == 0, "\(policy.summary)")
            let open = try box.cli(["create-keypair", "-l", "everyone"] + box.unlockArgs)
            let team = try box.cli(["create-keypair", "-l", "team-only", "--access-group", "team"] + box.unlockArgs)
            try #require(open.status == 0 && team.status == 0, "\(open.summary) \(team.summary)")
            let socket = try Self.startAgent(box)
            let env = ["SSH_AUTH_SOCK": socket]
            // ssh-add is in no group but default: it sees one key.
            let l = try box.run("/usr/bin/ssh-add", ["-L"], env: env)
            #expect(l.lines == [open.stdout.trimmingCharacters(in: .newlines)], "\(l.summary)")
            // ssh-keygen is in team: it may sign with the team key.
            let pub = box.root + "/team.pub", message = box.root + "/message"
            try Data(team.stdout.utf8).write(to: URL(fileURLWithPath: pub))
            try Data("m".utf8).write(to: URL(fileURLWithPath: message))
            let sign = try box.run("/usr/bin/ssh-keygen", ["-Y", "sign", "-f", pub, "-n", "file", message], env: env)
            #expect(sign.status == 0, "\(sign.summary)")
        }
    }

    @Test("session-bind: a bind whose host key signature does not verify is refused")
    func forgedSessionBind() throws {
        try withSandbox { box in
            let socket = try Self.startAgent(box)
            #expect(try box.sh("ssh-keygen -q -t ed25519 -N '' -f \(q(box.root + "/host"))").status == 0)
            let client = """
                import base64, socket, struct, sys
                sock, pub = sys.argv[1:3]
                s = lambda b: struct.pack('>I', len(b)) + b
                blob = base64.b64decode(open(pub).read().split()[1])
                forged = s(b'ssh-ed25519') + s(bytes(64))
                body = bytes([27]) + s(b'session-bind@openssh.com') + s(blob) + s(b'session-id') + s(forged) + bytes([0])
                c = socket.socket(socket.AF_UNIX); c.connect(sock); c.sendall(s(body))
                n = struct.unpack('>I', c.recv(4))[0]; print(c.recv(n)[0])
                """
            let r = try box.run("/usr/bin/python3", ["-c", client, socket, box.root + "/host.pub"])
            #expect(r.stdout == "5\n", "\(r.summary)")
        }
    }

    @Test("a message that stops mid-way is dropped within a few seconds; an idle connection stays and answers")
    func truncatedMessageDropped() throws {
        try withSandbox { box in
            _ = try box.cli(["create-keypair", "-l", "k"] + box.unlockArgs)
            let socket = try Self.startAgent(box)
            let client = """
                import socket, struct, sys, time
                idle = socket.socket(socket.AF_UNIX); idle.connect(sys.argv[1])
                cut = socket.socket(socket.AF_UNIX); cut.connect(sys.argv[1])
                cut.sendall(struct.pack('>I', 100) + bytes([11]) * 10)
                start = time.monotonic(); cut.settimeout(60)
                try:
                    end = cut.recv(1)
                except ConnectionResetError:
                    end = b''
                took = time.monotonic() - start
                idle.sendall(struct.pack('>IB', 1, 11)); idle.settimeout(10)
                n = struct.unpack('>I', idle.recv(4))[0]; reply = idle.recv(n)
                print('closed' if end == b'' else 'open', round(took, 1), reply[0], struct.unpack('>I', reply[1:5])[0])
                """
            let r = try box.run("/usr/bin/python3", ["-c", client, socket])
            let words = r.stdout.split(separator: " ").map(String.init)
            try #require(words.count == 4, "\(r.summary)")
            #expect(words[0] == "closed", "\(r.summary)")
            let took = Double(words[1]) ?? -1
            #expect(took >= 4 && took < 15, "dropped after \(took) s")
            // The idle connection, older than the drop, still answers: one key listed.
            #expect(words[2] == "12" && words[3] == "1\n", "\(r.summary)")
        }
    }
}
