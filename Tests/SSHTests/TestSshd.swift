import Foundation
import Testing
@_exported import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// An sshd on 127.0.0.1 for one test (root only: privilege separation needs it, as in CI), with
/// host keys of the given types and the given authorized keys. It is a child of the sandbox,
/// so the sandbox's teardown stops it.
struct TestSshd {
    let box: TestSandbox
    let dir: String
    let port: String
    let process: Spawned
    /// (type, bits, host key algorithm) of each host key, in the order sshd offers them.
    let hostKeys: [(type: String, bits: String, algorithm: String)]

    var log: String { (try? String(contentsOfFile: process.errPath, encoding: .utf8)) ?? "" }

    static func start(
        _ box: TestSandbox, authorizedKeys: [String],
        hostKeys: [(type: String, bits: String, algorithm: String)] = [("ed25519", "256", "ssh-ed25519")],
        config extra: String = ""
    ) throws -> TestSshd {
        let dir = box.root + "/sshd"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: "/run/sshd", withIntermediateDirectories: true)
        for (type, bits, _) in hostKeys {
            let gen = try box.sh("ssh-keygen -q -t \(type) -b \(bits) -N '' -f \(q(dir + "/host_\(type)"))")
            try #require(gen.status == 0, "\(gen.summary)")
        }
        try Data((authorizedKeys.joined(separator: "\n") + "\n").utf8)
            .write(to: URL(fileURLWithPath: dir + "/authorized_keys"))
        let config =
            """
            ListenAddress 127.0.0.1
            \(hostKeys.map { "HostKey \(dir)/host_\($0.type)" }.joined(separator: "\n"))
            AuthorizedKeysFile \(dir)/authorized_keys
            StrictModes no
            UsePAM no
            PasswordAuthentication no
            KbdInteractiveAuthentication no
            PermitRootLogin prohibit-password
            PidFile none
            """ + "\n" + extra
        try Data(config.utf8).write(to: URL(fileURLWithPath: dir + "/config"))
        let port = try box.py(
            "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"
        ).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let process = try box.spawn("/usr/sbin/sshd", ["-D", "-e", "-f", dir + "/config", "-p", port])
        let sshd = TestSshd(box: box, dir: dir, port: port, process: process, hostKeys: hostKeys)
        try #require(waitUntil(10) { sshd.log.contains("Server listening") }, "sshd did not start: \(sshd.log)")
        return sshd
    }

    /// The host key's fingerprint as ssh-keygen -l prints it (SHA256:…).
    func fingerprint(_ type: String = "ed25519") throws -> String {
        try box.sh("ssh-keygen -l -f \(q(dir + "/host_\(type).pub"))").stdout.split(separator: " ")
            .dropFirst().first.map(String.init) ?? "?"
    }

    /// A known_hosts line for this server's host key, as ssh records a non-default port.
    func knownHostsLine(_ type: String = "ed25519") throws -> String {
        let pub = try String(contentsOfFile: dir + "/host_\(type).pub", encoding: .utf8).split(separator: " ")
        return "[127.0.0.1]:\(port) \(pub[0]) \(pub[1])"
    }

    /// The options every test login gives: no config files, no prompts, no known_hosts.
    var sshOptions: [String] {
        [
            "-F", "none", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "ConnectTimeout=10", "-p", port,
        ]
    }

    /// `ssh [options] root@127.0.0.1 command` through the agent at `socket`.
    func ssh(
        _ command: String, agent socket: String, options: [String] = [], env: [String: String?] = [:]
    ) throws -> RunResult {
        var environment = env
        environment["SSH_AUTH_SOCK"] = socket
        return try box.run(
            "/usr/bin/ssh", sshOptions + options + ["root@127.0.0.1", command], env: environment, timeout: 60)
    }

    func stop() {
        process.kill(SIGTERM)
        _ = process.wait(timeout: 5)
    }
}
