import Foundation
import Testing
@_exported import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 11's "done when": `ssh` logs in to an sshd started by the test on 127.0.0.1 with keys
/// made in the vault that cannot be read through the mount, for every key type and both RSA
/// hashes. sshd runs as root (privilege separation needs it), as CI does.
@Suite("ssh login through the agent", .enabled(if: getuid() == 0, "sshd needs root"))
struct SshdTests {
    @Test("ssh logs in with each key type (RSA with SHA-256 and SHA-512); the keys read as public keys")
    func login() throws {
        try withMount { box in
            let lines = try AgentTests.createKeys(box)
            // The same keys through the mount: public keys only.
            for (alg, _, _) in AgentTests.algorithms {
                let cat = try box.sh("cat \(q(box.mnt + "/keys/agent-\(alg)"))")
                #expect(cat.stdout == lines[alg]! + "\n", "\(alg): \(cat.summary)")
            }
            let socket = try AgentTests.startAgent(box)
            let dir = box.root + "/sshd"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: "/run/sshd", withIntermediateDirectories: true)
            // A host key of each type: session-bind's signature is checked for each.
            let hostKeys = [
                ("ed25519", "256", "ssh-ed25519"), ("ecdsa", "384", "ecdsa-sha2-nistp384"),
                ("rsa", "3072", "rsa-sha2-512"),
            ]
            for (type, bits, _) in hostKeys {
                let gen = try box.sh("ssh-keygen -q -t \(type) -b \(bits) -N '' -f \(q(dir + "/host_\(type)"))")
                #expect(gen.status == 0, "\(gen.summary)")
            }
            try Data((lines.values.sorted().joined(separator: "\n") + "\n").utf8)
                .write(to: URL(fileURLWithPath: dir + "/authorized_keys"))
            let config = """
                ListenAddress 127.0.0.1
                HostKey \(dir)/host_ed25519
                HostKey \(dir)/host_ecdsa
                HostKey \(dir)/host_rsa
                AuthorizedKeysFile \(dir)/authorized_keys
                StrictModes no
                UsePAM no
                PasswordAuthentication no
                KbdInteractiveAuthentication no
                PermitRootLogin prohibit-password
                PidFile none
                """
            try Data(config.utf8).write(to: URL(fileURLWithPath: dir + "/config"))
            let port = try box.py(
                "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"
            ).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let sshd = try box.spawn("/usr/sbin/sshd", ["-D", "-e", "-f", dir + "/config", "-p", port])
            let log = { (try? String(contentsOfFile: sshd.errPath, encoding: .utf8)) ?? "" }
            try #require(waitUntil(10) { log().contains("Server listening") }, "sshd did not start: \(log())")
            func fingerprint(_ type: String) throws -> String {
                try box.sh("ssh-keygen -l -f \(q(dir + "/host_\(type).pub"))").stdout.split(separator: " ")
                    .dropFirst().first.map(String.init) ?? "?"
            }
            for (i, algorithm) in [
                "ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "rsa-sha2-256", "rsa-sha2-512",
            ].enumerated() {
                let (hostType, _, hostAlgorithm) = hostKeys[i % hostKeys.count]
                let ssh = try box.run(
                    "/usr/bin/ssh",
                    [
                        "-F", "none", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o",
                        "UserKnownHostsFile=/dev/null", "-o", "PubkeyAcceptedAlgorithms=\(algorithm)", "-o",
                        "HostKeyAlgorithms=\(hostAlgorithm)", "-o", "ConnectTimeout=10", "-p", port, "root@127.0.0.1",
                        "echo logged-in",
                    ], env: ["SSH_AUTH_SOCK": socket], timeout: 30)
                #expect(ssh.status == 0 && ssh.stdout == "logged-in\n", "\(algorithm): \(ssh.summary)")
                // The signature is audited with the destination session-bind proved: this host key.
                let last = box.audit.split(separator: "\n").last { $0.contains(" op=ssh-sign ") } ?? ""
                let host = try fingerprint(hostType)
                #expect(last.contains(" allow host=\(host) forwarded=no"), "\(algorithm) to \(hostType): \(last)")
            }
            // A key of each type was the one accepted.
            for keyType in ["ED25519", "ECDSA", "RSA"] {
                #expect(log().contains("ssh2: \(keyType) SHA256:"), "\(keyType): \(log())")
            }
            sshd.kill(SIGTERM)
            _ = sshd.wait(timeout: 5)
        }
    }
}
