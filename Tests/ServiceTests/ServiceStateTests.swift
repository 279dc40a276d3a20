import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// Issue 26, point 3: one state for every face. With the mount, the ssh agent it hosts and the
// API live, and an access policy in force: `passwd --rotate`, `lock`, `unlock`; every face answers
// at once, with the new keys, and the daemon log has no tamper alarm. And `serve`: the service
// without a mount.
@Suite("one state for every face of the service", .serialized)
struct ServiceStateTests {
    /// Every face's answer for the grouped item and the agent's key list.
    struct Answers: Equatable {
        var cat: String
        var cli: String
        var agentKeys: Int
    }

    func answers(_ box: TestSandbox, agent: String) throws -> Answers {
        let cat = try box.run("/usr/bin/cat", [box.mnt + "/genp/grouped/acct;accessGroup=g"])
        let cli = try box.cliWithoutPassphrase(["find-generic-password", "--vault", box.vault, "-s", "plain", "-w"])
        let keys = try box.run("/usr/bin/ssh-add", ["-l"], env: ["SSH_AUTH_SOCK": agent])
        return Answers(
            cat: cat.status == 0 ? cat.stdout : "status \(cat.status)",
            cli: cli.status == 0 ? cli.stdout : "exit \(cli.status)",
            agentKeys: keys.status == 0 ? keys.lines.count : -Int(keys.status))
    }

    @Test(
        "passwd --rotate, lock and unlock while mounted with a policy, the agent and the API live: every face answers at once, no alarm"
    )
    func rotationLockUnlock() throws {
        try withSandbox { box in
            let agent = box.root + "/agent.sock"
            let policy = try box.cli(["access-group", "add"] + box.unlockArgs + ["g", "/usr/bin/cat"])
            try #require(policy.status == 0, "access-group add: \(policy.summary)")
            try box.addGeneric("grouped", "acct", "in-group", extra: ["--access-group", "g"])
            try box.addGeneric("plain", "acct", "plain-secret")
            let key = try box.cli(["create-keypair", "-a", "ed25519", "-l", "svc-key"] + box.unlockArgs)
            try #require(key.status == 0, "create-keypair: \(key.summary)")
            try box.mount(["ssh_agent_socket=\(agent)"])
            let live = Answers(cat: "in-group", cli: "plain-secret\n", agentKeys: 1)
            #expect(try answers(box, agent: agent) == live)

            let newPass = box.root + "/new-passphrase"
            try Data("the new one\n".utf8).write(to: URL(fileURLWithPath: newPass))
            let rotate = try box.cli(
                ["passwd", "--rotate"] + box.unlockArgs + ["--new-passphrase-file", newPass])
            #expect(rotate.status == 0, "passwd --rotate: \(rotate.summary)")
            #expect(rotate.stderr.contains("keychain service"), "done by the service: \(rotate.stderr)")
            #expect(try answers(box, agent: agent) == live, "after the rotation")

            let lock = try box.cli(["lock", box.mnt])
            #expect(lock.status == 0 && lock.stdout.contains("locked"), "lock: \(lock.summary)")
            let locked = try answers(box, agent: agent)
            #expect(locked.cat != live.cat, "the mount still reads a WhenUnlocked item when locked")
            #expect(locked.cli == "exit 36", "the CLI through the service when locked: \(locked.cli)")
            #expect(locked.agentKeys != 1, "the agent it hosts still lists keys when locked: \(locked.agentKeys)")

            // The old passphrase no longer unlocks; the new one does, for every face.
            #expect(
                try box.cli(["unlock", "--vault", box.vault, "--passphrase-file", box.passphraseFile]).status == 51)
            let unlock = try box.cli(["unlock", "--vault", box.vault, "--passphrase-file", newPass])
            #expect(unlock.status == 0 && unlock.stdout.contains("unlocked"), "unlock: \(unlock.summary)")
            #expect(try answers(box, agent: agent) == live, "after unlock")

            let log = box.daemonLog
            #expect(!log.contains("altered") && !log.lowercased().contains("tamper"), "alarm in the log:\n\(log)")
            #expect(!log.contains("integrity"), "integrity failure in the log:\n\(log)")
        }
    }

    @Test("serve: the service without a mount answers the CLI and the git helper, locks and stops on SIGTERM")
    func serveWithoutMount() throws {
        try withSandbox { box in
            try box.addGeneric("plain", "acct", "served")
            let serve = try box.cli(["serve", box.vault, "--passphrase-file", box.passphraseFile])
            try #require(serve.status == 0, "serve: \(serve.summary)")
            let pid = try #require(
                serve.stderr.split(separator: " ").firstIndex(of: "pid").map {
                    Int32(serve.stderr.split(separator: " ")[$0 + 1].prefix { $0.isNumber })
                } ?? nil, "the daemon's pid in: \(serve.stderr)")
            box.onTeardown { kill(pid, SIGKILL) }
            let find = try box.cliWithoutPassphrase([
                "find-generic-password", "--vault", box.vault, "-s", "plain", "-w",
            ])
            #expect(find.stdout == "served\n", "find through serve: \(find.summary)")
            let status = try box.cli(["status", "--vault", box.vault])
            #expect(status.status == 0 && status.stdout.contains("unlocked"), "status: \(status.summary)")
            // Issue 28, point 6: --json, one object a script can read.
            let json = try box.cli(["status", "--vault", box.vault, "--json"])
            let object = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: String]
            #expect(object?["state"] == "unlocked" && object?["since"] != nil, "status --json: \(json.summary)")
            #expect(object?["path"].map { $0.hasSuffix("/test.vault") } == true, "\(json.stdout)")
            #expect(try box.cli(["lock", "--vault", box.vault]).status == 0)
            #expect(
                try box.cliWithoutPassphrase(["find-generic-password", "--vault", box.vault, "-s", "plain", "-w"])
                    .status
                    == 36)
            // A second service for the same vault is refused.
            #expect(try box.cli(["serve", box.vault, "--passphrase-file", box.passphraseFile]).status != 0)
            kill(pid, SIGTERM)
            #expect(waitUntil(5) { !box.isAlive(pid) }, "serve did not stop on SIGTERM")
            #expect(!FileManager.default.fileExists(atPath: box.apiSocket), "the API socket stays after SIGTERM")
            // Without the service the CLI opens the vault itself again.
            #expect(
                try box.cli(["find-generic-password"] + box.unlockArgs + ["-s", "plain", "-w"]).stdout == "served\n")
        }
    }
}
