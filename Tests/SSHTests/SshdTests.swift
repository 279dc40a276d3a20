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
            // A host key of each type: session-bind's signature is checked for each.
            let sshd = try TestSshd.start(
                box, authorizedKeys: lines.values.sorted(),
                hostKeys: [
                    ("ed25519", "256", "ssh-ed25519"), ("ecdsa", "384", "ecdsa-sha2-nistp384"),
                    ("rsa", "3072", "rsa-sha2-512"),
                ])
            for (i, algorithm) in [
                "ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "rsa-sha2-256", "rsa-sha2-512",
            ].enumerated() {
                let (hostType, _, hostAlgorithm) = sshd.hostKeys[i % sshd.hostKeys.count]
                let ssh = try sshd.ssh(
                    "echo logged-in", agent: socket,
                    options: [
                        "-o", "PubkeyAcceptedAlgorithms=\(algorithm)", "-o", "HostKeyAlgorithms=\(hostAlgorithm)",
                    ])
                #expect(ssh.status == 0 && ssh.stdout == "logged-in\n", "\(algorithm): \(ssh.summary)")
                // The signature is audited with the destination session-bind proved: this host key.
                let last = box.audit.split(separator: "\n").last { $0.contains(" op=ssh-sign ") } ?? ""
                let host = try sshd.fingerprint(hostType)
                #expect(last.contains(" allow host=\(host) forwarded=no"), "\(algorithm) to \(hostType): \(last)")
            }
            // A key of each type was the one accepted.
            for keyType in ["ED25519", "ECDSA", "RSA"] {
                #expect(sshd.log.contains("ssh2: \(keyType) SHA256:"), "\(keyType): \(sshd.log)")
            }
            sshd.stop()
        }
    }
}
