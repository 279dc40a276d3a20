import Foundation
import Testing
@_exported import TestSupport

import Keychain
@testable import KeychainSSHAgent

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 11, the rest of points 1–3: per-key host restrictions (so a server's MaxAuthTries is
/// not spent on keys meant for other hosts), a presence reuse window per (key, host), `ssh -A`
/// named in the prompt, a locked vault unlocked through pinentry (or refused at once), and
/// encrypted private keys refused by `import` with what keychainfs lacks.
@Suite("ssh agent: host restrictions, reuse window, forwarding, locked vault")
struct AgentPolicyTests {
    /// Writes the scripted pinentry into the sandbox; returns (script, mode file, prompt log).
    static func pinentry(_ box: TestSandbox) throws -> (script: String, mode: String, log: String) {
        let pinentry = try ScriptedPinentry(in: box.root)
        return (pinentry.script, pinentry.modePath, pinentry.logPath)
    }

    static func write(_ text: String, _ path: String) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
    }

    static func lines(_ path: String) -> [String] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    @Test(
        "host restrictions: keys for other hosts are not offered, so MaxAuthTries is not spent on them; set through the mount's xattr",
        .enabled(if: getuid() == 0, "sshd needs root"))
    func hostRestrictions() throws {
        try withMount { box in
            // Three keys for other servers, made first so ssh offers them first, then the one
            // this server knows.
            for i in 1...3 {
                let made = try box.cli(["create-keypair", "-l", "decoy-\(i)"] + box.unlockArgs)
                try #require(made.status == 0, "\(made.summary)")
            }
            let right = try box.cli(["create-keypair", "-l", "right"] + box.unlockArgs)
            try #require(right.status == 0, "\(right.summary)")
            let sshd = try TestSshd.start(
                box, authorizedKeys: [right.stdout.trimmingCharacters(in: .newlines)], config: "MaxAuthTries 2\n")
            let knownHosts = box.root + "/known_hosts"
            try Self.write(try sshd.knownHostsLine() + "\n", knownHosts)
            let socket = try AgentTests.startAgent(box, options: ["--known-hosts", knownHosts])
            // Unrestricted, ssh offers the decoys first and the server gives up.
            let refused = try sshd.ssh("echo in", agent: socket)
            #expect(
                refused.status != 0 && refused.stderr.contains("Too many authentication failures"), "\(refused.summary)"
            )
            // Restricted through the mount (the sshHosts attribute), the decoys stay home.
            for i in 1...3 {
                let set = try box.sh(
                    "setfattr -n user.keychain.sshHosts -v 'git.example.org,*.corp.example' \(q(box.mnt + "/keys/decoy-\(i)"))"
                )
                #expect(set.status == 0, "\(set.summary)")
                let back = try box.sh(
                    "getfattr --only-values -n user.keychain.sshHosts \(q(box.mnt + "/keys/decoy-\(i)"))")
                #expect(back.stdout == "git.example.org,*.corp.example", "\(back.summary)")
            }
            let set = try box.sh("setfattr -n user.keychain.sshHosts -v '127.0.0.*' \(q(box.mnt + "/keys/right"))")
            #expect(set.status == 0, "\(set.summary)")
            let login = try sshd.ssh("echo in", agent: socket)
            #expect(login.status == 0 && login.stdout == "in\n", "\(login.summary)")
            // Without a destination (ssh-add binds to no host) restricted keys are not offered.
            let listed = try box.run("/usr/bin/ssh-add", ["-l"], env: ["SSH_AUTH_SOCK": socket])
            #expect(listed.status == 1 && listed.stdout.contains("no identities"), "\(listed.summary)")
            // By host key fingerprint too; a host that does not match keeps it home again.
            let fp = try sshd.fingerprint()
            #expect(
                try box.sh("setfattr -n user.keychain.sshHosts -v '\(fp)' \(q(box.mnt + "/keys/right"))").status == 0)
            #expect(try sshd.ssh("echo in", agent: socket).status == 0)
            #expect(
                try box.sh("setfattr -n user.keychain.sshHosts -v 'elsewhere.example' \(q(box.mnt + "/keys/right"))")
                    .status == 0)
            let away = try sshd.ssh("echo in", agent: socket)
            #expect(away.status != 0 && !away.stderr.contains("Too many"), "\(away.summary)")
            sshd.stop()
        }
    }

    @Test(
        "a presence answer is reused for the same key and host only; ssh -A: the forwarded hop is named and asks again",
        .enabled(if: getuid() == 0, "sshd needs root"))
    func reuseAndForwarding() throws {
        try withSandbox { box in
            let (script, mode, promptLog) = try Self.pinentry(box)
            let made = try box.cli(
                ["create-keypair", "-l", "guarded", "--access-control", "userPresence"] + box.unlockArgs)
            try #require(made.status == 0, "\(made.summary)")
            let key = made.stdout.trimmingCharacters(in: .newlines)
            let sshd = try TestSshd.start(box, authorizedKeys: [key])
            let knownHosts = box.root + "/known_hosts"
            try Self.write(try sshd.knownHostsLine() + "\n", knownHosts)
            let socket = try AgentTests.startAgent(
                box,
                options: [
                    "--pinentry", script, "--presence-reuse", "120", "--audit", box.auditPath, "--known-hosts",
                    knownHosts,
                ])
            try Self.write("allow\n", mode)
            let display: [String: String?] = ["DISPLAY": ":99"]
            let first = try sshd.ssh("echo one", agent: socket, env: display)
            #expect(first.status == 0 && first.stdout == "one\n", "\(first.summary)")
            #expect(Self.lines(promptLog).count == 1, "\(Self.lines(promptLog))")
            // The prompt names the host as known_hosts does, with its key's fingerprint.
            let fingerprint = try sshd.fingerprint()
            #expect(
                Self.lines(promptLog).first?.contains(
                    "connecting to [127.0.0.1]:\(sshd.port) (host key \(fingerprint))")
                    == true, "\(Self.lines(promptLog))")
            // Same key, same host, within the window: no second prompt.
            let second = try sshd.ssh("echo two", agent: socket, env: display)
            #expect(second.status == 0 && second.stdout == "two\n", "\(second.summary)")
            #expect(Self.lines(promptLog).count == 1, "\(Self.lines(promptLog))")
            // ssh -A, then ssh from the server back to it through the forwarded agent: the
            // first hop is reused, the forwarded one asks and says it is forwarded.
            let inner = (sshd.sshOptions + ["root@127.0.0.1", "echo", "hop2"]).map { q($0) }.joined(separator: " ")
            let hop = try sshd.ssh("ssh \(inner)", agent: socket, options: ["-A"], env: display)
            #expect(hop.status == 0 && hop.stdout == "hop2\n", "\(hop.summary)")
            let prompts = Self.lines(promptLog)
            #expect(prompts.count == 2 && prompts.last?.contains("through a forwarded agent") == true, "\(prompts)")
            #expect(prompts.last?.contains(try sshd.fingerprint()) == true, "\(prompts)")
            let signs = box.audit.split(separator: "\n").filter { $0.contains(" op=ssh-sign ") }
            #expect(signs.count == 4 && signs.last?.contains(" allow ") == true, "\(signs)")
            #expect(signs.last?.contains("forwarded=yes") == true, "\(signs)")
            // No destination (ssh-keygen -Y sign): never reused; denied here.
            try Self.write("deny\n", mode)
            let pub = box.root + "/guarded.pub", message = box.root + "/message"
            try Self.write(made.stdout, pub)
            try Self.write("m", message)
            let sign = try box.run(
                "/usr/bin/ssh-keygen", ["-Y", "sign", "-f", pub, "-n", "file", message],
                env: ["SSH_AUTH_SOCK": socket, "DISPLAY": ":99"])
            #expect(sign.status != 0, "\(sign.summary)")
            #expect(Self.lines(promptLog).count == 3, "\(Self.lines(promptLog))")
            sshd.stop()
        }
    }

    @Test(
        "--locked: the first use asks for the vault passphrase through pinentry; no way to ask fails at once; ssh-add -x/-X"
    )
    func lockedVault() throws {
        try withSandbox { box in
            let (script, mode, promptLog) = try Self.pinentry(box)
            let made = try box.cli(["create-keypair", "-l", "k1"] + box.unlockArgs)
            try #require(made.status == 0, "\(made.summary)")
            let socket = try AgentTests.startAgent(box, options: ["--pinentry", script, "--locked"], unlocked: false)
            // No terminal and no display: refused at once, nothing prompted.
            let started = Date()
            let headless = try box.run("/usr/bin/ssh-add", ["-l"], env: ["SSH_AUTH_SOCK": socket])
            #expect(headless.status != 0 && Date().timeIntervalSince(started) < 10, "\(headless.summary)")
            #expect(!headless.stdout.contains("k1"))
            #expect(Self.lines(promptLog).isEmpty)
            // A cancelled prompt: refused, still locked.
            try Self.write("cancel\n", mode)
            let cancelled = try box.run("/usr/bin/ssh-add", ["-l"], env: ["SSH_AUTH_SOCK": socket, "DISPLAY": ":99"])
            #expect(cancelled.status != 0 && !cancelled.stdout.contains("k1"), "\(cancelled.summary)")
            // The passphrase through pinentry unlocks it; the prompt says why it asks.
            try Self.write("pin:\(box.passphrase)\n", mode)
            let listed = try box.run("/usr/bin/ssh-add", ["-l"], env: ["SSH_AUTH_SOCK": socket, "DISPLAY": ":99"])
            #expect(listed.status == 0 && listed.stdout.contains(" k1 "), "\(listed.summary)")
            let prompts = Self.lines(promptLog)
            #expect(prompts.count == 2 && prompts.last?.contains("is locked") == true, "\(prompts)")
            // ssh-add -x locks it (the lock password is ignored); -X takes the vault passphrase.
            let askpass = box.root + "/askpass.sh", answer = box.root + "/askpass.answer"
            try Self.write("#!/bin/sh\ncat \(q(answer))\n", askpass)
            chmod(askpass, 0o755)
            let askEnv: [String: String?] = [
                "SSH_AUTH_SOCK": socket, "SSH_ASKPASS": askpass, "SSH_ASKPASS_REQUIRE": "force", "DISPLAY": nil,
            ]
            try Self.write("anything\n", answer)
            let lock = try box.run("/usr/bin/ssh-add", ["-x"], env: askEnv)
            #expect(lock.status == 0, "\(lock.summary)")
            #expect(try box.run("/usr/bin/ssh-add", ["-l"], env: ["SSH_AUTH_SOCK": socket]).status != 0)
            let wrong = try box.run("/usr/bin/ssh-add", ["-X"], env: askEnv)
            #expect(wrong.status != 0, "\(wrong.summary)")
            try Self.write(box.passphrase + "\n", answer)
            let unlock = try box.run("/usr/bin/ssh-add", ["-X"], env: askEnv)
            #expect(unlock.status == 0, "\(unlock.summary)")
            let after = try box.run("/usr/bin/ssh-add", ["-l"], env: ["SSH_AUTH_SOCK": socket])
            #expect(after.status == 0 && after.stdout.contains(" k1 "), "\(after.summary)")
            #expect(Self.lines(promptLog).count == 2)
            // Through the door: each is one audit line naming ssh-add, the wrong passphrase a deny.
            let audit = box.audit.split(separator: "\n")
            let locks = audit.filter { $0.contains(" op=lock ") && $0.contains("ssh-add") }
            let unlocks = audit.filter { $0.contains(" op=unlock ") && $0.contains("ssh-add") }
            #expect(locks.count == 1 && locks.allSatisfy { $0.contains("allow") && $0.contains("via=ssh") }, "\(audit)")
            #expect(unlocks.count == 2, "\(audit)")
            #expect(unlocks.first?.contains("deny") == true && unlocks.first?.contains("errSecAuthFailed") == true)
            #expect(unlocks.last?.contains("allow") == true)
        }
    }

    @Test(
        "a damaged key: listed from its stored public half, its signature refused with a log line; the other key signs"
    )
    func damagedKeyRefused() throws {
        try withSandbox { box in
            var lines: [String: String] = [:]
            for label in ["good", "bad"] {
                let made = try box.cli(["create-keypair", "-l", label] + box.unlockArgs)
                try #require(made.status == 0, "\(made.summary)")
                lines[label] = made.stdout.trimmingCharacters(in: .newlines)
            }
            let log = box.root + "/agent.log"
            let start = try box.cli(["ssh-agent", "-a", box.root + "/agent.sock", "--log", log] + box.unlockArgs)
            try #require(start.status == 0, "\(start.summary)")
            defer {
                let pid = start.stdout.split(separator: "\n").first { $0.hasPrefix("SSH_AGENT_PID=") }
                    .flatMap { pid_t($0.dropFirst("SSH_AGENT_PID=".count).prefix { $0.isNumber }) }
                if let pid { kill(pid, SIGTERM) }
            }
            let tamper = try box.py(
                """
                import sqlite3, sys
                db = sqlite3.connect(sys.argv[1])
                db.execute("UPDATE items SET data = x'00' || data WHERE id = (SELECT max(id) FROM items)")
                db.commit()
                """, [box.vault])
            try #require(tamper.status == 0, "\(tamper.summary)")
            let env = ["SSH_AUTH_SOCK": box.root + "/agent.sock"]
            // The listing reads no private key, so it cannot see the damage: both are offered.
            let listed = try box.run("/usr/bin/ssh-add", ["-l"], env: env)
            #expect(
                listed.status == 0 && listed.stdout.contains(" good ") && listed.stdout.contains(" bad "),
                "\(listed.summary)")
            let message = box.root + "/message"
            try Data("signed\n".utf8).write(to: URL(fileURLWithPath: message))
            for label in ["good", "bad"] {
                let pub = box.root + "/\(label).pub"
                try Data((lines[label]! + "\n").utf8).write(to: URL(fileURLWithPath: pub))
                try? FileManager.default.removeItem(atPath: message + ".sig")
                let sign = try box.run(
                    "/usr/bin/ssh-keygen", ["-Y", "sign", "-f", pub, "-n", "file", message], env: env)
                #expect((sign.status == 0) == (label == "good"), "\(label): \(sign.summary)")
            }
            let logText = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            #expect(logText.contains("signing:") && logText.contains("damaged"), "\(logText)")
        }
    }

    @Test("import: an encrypted OpenSSH or PEM key is refused with what keychainfs lacks, and nothing is imported")
    func encryptedImportRefused() throws {
        try withSandbox { box in
            let key = box.root + "/id_ed25519"
            let gen = try box.sh("ssh-keygen -q -t ed25519 -N 'key-passphrase' -f \(q(key))")
            try #require(gen.status == 0, "\(gen.summary)")
            let imported = try box.cli(["import", key] + box.unlockArgs)
            #expect(imported.status == 1, "\(imported.summary)")
            #expect(
                imported.stderr.contains("encrypted with a passphrase") && imported.stderr.contains("aes256-ctr")
                    && imported.stderr.contains("bcrypt") && imported.stderr.contains("nothing imported"),
                "\(imported.stderr)")
            #expect(!imported.stderr.contains("key-passphrase"))
            #expect(try box.cli(["find-key", "-l", "id_ed25519"] + box.unlockArgs).stdout.isEmpty)
            // A passphrase-encrypted PKCS#8 PEM key: the same refusal, naming openssl.
            let pem = box.root + "/enc.pem"
            let made = try box.sh(
                "openssl genpkey -algorithm ed25519 -aes-256-cbc -pass pass:pem-pass -out \(q(pem)) 2>&1")
            try #require(made.status == 0, "\(made.summary)")
            let refused = try box.cli(["import", pem] + box.unlockArgs)
            #expect(refused.status == 1 && refused.stderr.contains("passphrase-encrypted PEM"), "\(refused.summary)")
            // The same key without its passphrase imports, and the agent can use it.
            #expect(try box.sh("ssh-keygen -q -p -P 'key-passphrase' -N '' -f \(q(key))").status == 0)
            let plain = try box.cli(["import", key] + box.unlockArgs)
            #expect(plain.status == 0, "\(plain.summary)")
        }
    }

    @Test("known_hosts names: plain, [host]:port, wildcards, hashed entries (ssh-keygen -H), markers skipped")
    func knownHostsMatching() throws {
        try withSandbox { box in
            #expect(try box.sh("ssh-keygen -q -t ed25519 -N '' -f \(q(box.root + "/host"))").status == 0)
            let pub = try String(contentsOfFile: box.root + "/host.pub", encoding: .utf8).split(separator: " ")
            let blob = Array(try #require(Data(base64Encoded: String(pub[1]))))
            let file = box.root + "/known_hosts"
            try Self.write(
                "@revoked revoked.example \(pub[0]) \(pub[1])\nplain.example,[alt.example]:2222 \(pub[0]) \(pub[1])\n",
                file)
            let restriction = HostRestriction(knownHostsFiles: [file])
            #expect(restriction.allows([], destination: nil))
            #expect(!restriction.allows(["plain.example"], destination: nil))
            #expect(restriction.allows(["plain.example"], destination: blob))
            #expect(restriction.allows(["PLAIN.example"], destination: blob))
            #expect(restriction.allows(["*.example"], destination: blob))
            #expect(restriction.allows(["alt.example"], destination: blob))
            #expect(restriction.allows(["[alt.example]:2222"], destination: blob))
            #expect(!restriction.allows(["revoked.example"], destination: blob))
            #expect(!restriction.allows(["other.example", "pl?in.exampl"], destination: blob))
            #expect(restriction.allows([sshFingerprint(blob)], destination: blob))
            // Hashed: a literal name matches, a wildcard cannot.
            try Self.write("hashed.example \(pub[0]) \(pub[1])\n", file)
            #expect(try box.sh("ssh-keygen -q -H -f \(q(file)) && rm -f \(q(file)).old").status == 0)
            #expect(try String(contentsOfFile: file, encoding: .utf8).hasPrefix("|1|"))
            #expect(restriction.allows(["hashed.example"], destination: blob))
            #expect(!restriction.allows(["hashed.*"], destination: blob))
            #expect(HostRestriction.patterns(" a.example, b.example\tc ") == ["a.example", "b.example", "c"])
        }
    }

    @Test("glob: * and ? against random names agree with fnmatch")
    func globAgreesWithFnmatch() throws {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("ab.*?")
        for _ in 0..<3000 {
            let pattern = String((0..<Int.random(in: 0...6, using: &generator)).map { _ in alphabet.randomElement()! })
            let name = String((0..<Int.random(in: 0...6, using: &generator)).map { _ in "ab.".randomElement()! })
            let expected = fnmatch(pattern, name, 0) == 0
            #expect(glob(pattern, name) == expected, "\(pattern) vs \(name)")
        }
    }
}
