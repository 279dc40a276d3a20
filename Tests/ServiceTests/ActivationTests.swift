import CPlatform
import Foundation
import KeychainAPI
import KeychainAccess
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// Issue 26, point 4: systemd and D-Bus start the one service. `keychainfs.socket` and
// `keychainfs-ssh-agent.socket` hand their listening sockets to the service
// (`sd_listen_fds_with_names`), driven here by systemd's own `systemd-socket-activate` with the
// units' names; the installed D-Bus activation file starts `serve` with the Secret Service.
@Suite("started by systemd and D-Bus: the one service", .serialized)
struct ActivationTests {
    static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    /// A short private runtime directory (a socket path has 108 bytes) with `keychainfs/` in it.
    func runtimeDirectory(_ box: TestSandbox) throws -> String {
        let runtime = "/tmp/kcfs-rt-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try #require(mkdir(runtime, 0o700) == 0 && mkdir(runtime + "/keychainfs", 0o700) == 0)
        box.onTeardown { try? FileManager.default.removeItem(atPath: runtime) }
        return runtime
    }

    @Test(
        "the first command on the default vault starts the service through its socket; the agent socket is served by that process; another vault's command starts nothing"
    )
    func socketActivation() throws {
        let activate = "/usr/bin/systemd-socket-activate"
        guard FileManager.default.isExecutableFile(atPath: activate) else { return }
        try withSandbox { box in
            try box.addGeneric("plain", "acct", "activated")
            let key = try box.cli(["create-keypair", "-a", "ed25519", "-l", "act-key"] + box.unlockArgs)
            try #require(key.status == 0, "create-keypair: \(key.summary)")
            let runtime = try runtimeDirectory(box)
            let api = runtime + "/keychainfs/default.sock"
            let agent = runtime + "/keychainfs/ssh-agent.sock"
            let env: [String: String?] = [
                "XDG_RUNTIME_DIR": runtime, "KEYCHAINFS_VAULT": box.vault, "KEYCHAINFS_PASSPHRASE_FILE": nil,
                "CREDENTIALS_DIRECTORY": nil,
            ]
            // As the units say: FileDescriptorName=api and ssh-agent.
            let passed = ["HOME", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR", "KEYCHAINFS_VAULT", "PATH"]
            let service = try box.spawn(
                activate,
                ["-l", api, "-l", agent, "--fdname=api:ssh-agent"] + passed.flatMap { ["-E", $0] } + [
                    try requireBinary(), "serve", "-f", "--passphrase-file", box.passphraseFile,
                ], env: env)
            box.onTeardown {
                service.kill(SIGTERM)
                _ = service.wait(timeout: 5)
            }
            try #require(waitUntil(10) { FileManager.default.fileExists(atPath: agent) }, "\(service.stderrSoFar)")

            // Another vault's command opens its own vault and wakes nobody.
            let other = box.root + "/other.vault"
            let made = try box.cli([
                "init", "--kdf", "interactive", "--vault", other, "--passphrase-file", box.passphraseFile,
            ])
            try #require(made.status == 0, "init: \(made.summary)")
            let direct = try box.run(
                try requireBinary(),
                ["find-generic-password", "--vault", other, "--passphrase-file", box.passphraseFile, "-s", "plain"],
                env: env)
            #expect(direct.status == 44, "\(direct.summary)")
            let waiting = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(service.pid)/exe")) ?? ""
            #expect(waiting == activate, "started by another vault's command: \(waiting)")

            // The default vault's first command, with no passphrase, is answered by the service it starts.
            let find = try box.run(try requireBinary(), ["find-generic-password", "-s", "plain", "-w"], env: env)
            #expect(find.status == 0 && find.stdout == "activated\n", "\(find.summary)\n\(service.stderrSoFar)")
            let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(service.pid)/exe")) ?? ""
            #expect(exe.hasSuffix("/keychainfs"), "the activated process: \(exe)")
            // git's helper, at once, through the same service.
            let git = try box.run(
                try helperBinary("git-credential-keychainfs"), ["get"],
                stdin: Array("protocol=https\nhost=nowhere.example\n\n".utf8), env: env)
            #expect(git.status == 0 && git.stdout.isEmpty, "\(git.summary)")
            // The agent on the socket systemd passed: the same process, the vault's key.
            let keys = try box.run("/usr/bin/ssh-add", ["-l"], env: ["SSH_AUTH_SOCK": agent])
            #expect(keys.status == 0 && keys.stdout.contains("act-key"), "ssh-add -l: \(keys.summary)")
            let probe = try UnixSocket.connect(to: agent)
            defer { close(probe) }
            var cred = kcfs_ucred()
            #expect(kcfs_peer_cred(probe, &cred) == 0)
            #expect(cred.pid == service.pid, "the agent answered from pid \(cred.pid), the service is \(service.pid)")

            // SIGTERM stops it; the sockets systemd owns stay (systemd would start it again).
            service.kill(SIGTERM)
            #expect(service.wait(timeout: 10) != nil, "the activated service did not stop")
            #expect(FileManager.default.fileExists(atPath: agent), "the service removed systemd's agent socket")
            // Its audit (flushed as it stopped) names the read it answered through the API.
            #expect(box.auditLines("via=api").contains { $0.contains("op=read") }, "audit: \(box.audit)")
        }
    }

    @Test("the installed D-Bus activation file starts the one service, which owns org.freedesktop.secrets and the API")
    func dbusActivation() throws {
        try withSandbox { box in
            try box.addGeneric("plain", "acct", "on-the-bus")
            let runtime = try runtimeDirectory(box)
            let shipped = try String(
                contentsOfFile: Self.repositoryRoot + "/mount-helper/org.freedesktop.secrets.service", encoding: .utf8)
            #expect(shipped.contains("SystemdService=keychainfs.service"))
            let services = box.dataHome + "/dbus-1/services"
            try FileManager.default.createDirectory(atPath: services, withIntermediateDirectories: true)
            try shipped.replacingOccurrences(of: "/usr/local/bin/keychainfs", with: try requireBinary())
                .write(toFile: services + "/org.freedesktop.secrets.service", atomically: true, encoding: .utf8)
            let address = "unix:path=\(box.root)/bus"
            let env: [String: String?] = [
                "XDG_RUNTIME_DIR": runtime, "KEYCHAINFS_VAULT": box.vault, "DBUS_SESSION_BUS_ADDRESS": address,
                "KEYCHAINFS_PASSPHRASE_FILE": nil,
            ]
            let bus = try box.spawn(
                "/usr/bin/dbus-daemon", ["--session", "--nofork", "--nopidfile", "--address=\(address)"], env: env)
            box.onTeardown(beforeUnmount: "dbus-\(bus.pid)") {
                bus.kill(SIGTERM)
                _ = bus.wait(timeout: 5)
            }
            try #require(waitUntil(10) { FileManager.default.fileExists(atPath: box.root + "/bus") })
            let start = try box.run(
                "/usr/bin/dbus-send",
                [
                    "--bus=\(address)", "--print-reply", "--dest=org.freedesktop.DBus", "/org/freedesktop/DBus",
                    "org.freedesktop.DBus.StartServiceByName", "string:org.freedesktop.secrets", "uint32:0",
                ], timeout: 30)
            #expect(start.status == 0 && start.stdout.contains("uint32 1"), "\(start.summary)")
            let owner = try box.run(
                "/usr/bin/dbus-send",
                [
                    "--bus=\(address)", "--print-reply", "--dest=org.freedesktop.DBus", "/org/freedesktop/DBus",
                    "org.freedesktop.DBus.GetConnectionUnixProcessID", "string:org.freedesktop.secrets",
                ], timeout: 10)
            let pid = try #require(owner.stdout.split(separator: " ").last.flatMap { Int32($0.filter(\.isNumber)) })
            box.onTeardown { kill(pid, SIGTERM) }
            let cmdline = (try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8)) ?? ""
            #expect(cmdline.contains("serve"), "the name's owner runs \(cmdline)")
            // The same process is the vault's keychain service: started locked, the CLI gets the
            // service's answer (36, interaction not allowed), not a passphrase prompt.
            let find = try box.run(try requireBinary(), ["find-generic-password", "-s", "plain", "-w"], env: env)
            #expect(find.status == 36, "\(find.summary)")
            let status = try box.run(try requireBinary(), ["status", "--vault", box.vault], env: env)
            #expect(status.stdout.contains("locked"), "\(status.summary)")
            let socket = ServiceLocator.socketPath(
                for: try #require(ServiceLocator.identity(ofVault: box.vault)), directory: runtime + "/keychainfs")
            let probe = try UnixSocket.connect(to: socket)
            defer { close(probe) }
            var cred = kcfs_ucred()
            #expect(kcfs_peer_cred(probe, &cred) == 0 && cred.pid == pid, "the API is served by pid \(cred.pid)")
        }
    }
}
