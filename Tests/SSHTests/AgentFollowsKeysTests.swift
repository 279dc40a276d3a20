import Foundation
import Testing
@_exported import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 30, point 5: the ssh agent's key list follows key changes. The service hosts the agent;
/// the CLI (through the service's API socket: it has no passphrase) creates and deletes key pairs,
/// and the very next `ssh-add -L` against the agent shows the change, every time.
@Suite("the service's ssh agent lists key changes at once (issue 30)")
struct AgentFollowsKeysTests {
    @Test("a key pair created through the service is listed by the next ssh-add -L; deleted, gone from the next")
    func listingFollowsCreateAndDelete() throws {
        try withSandbox { box in
            let socket = box.root + "/agent.sock"
            try box.mount(["ssh_agent_socket=\(socket)"])
            let env = ["SSH_AUTH_SOCK": socket]
            let bin = try requireBinary()
            let noPassphrase: [String: String?] = [
                "SSH_AUTH_SOCK": socket, "KEYCHAINFS_PASSPHRASE_FILE": nil, "CREDENTIALS_DIRECTORY": nil,
            ]
            func cli(_ args: [String]) throws -> RunResult {
                try box.run(bin, args + ["--vault", box.vault], env: noPassphrase)
            }
            let empty = try box.run("/usr/bin/ssh-add", ["-L"], env: env)
            #expect(
                empty.status == 1 && !empty.lines.contains { $0.hasPrefix("ssh-") }, "no keys yet: \(empty.summary)")

            func listed() throws -> RunResult { try box.run("/usr/bin/ssh-add", ["-L"], env: env) }
            func keys(_ r: RunResult) -> [String] { r.lines.filter { $0.hasPrefix("ssh-") } }
            var kept: [String] = []
            for round in 1...3 {
                let label = "follow-\(round)"
                // Listed first: the agent has just listed the old state, which a stale listing would be.
                #expect(Set(keys(try listed())) == Set(kept), "round \(round): before the create")
                let made = try cli(["create-keypair", "-a", "ed25519", "-l", label])
                try #require(made.status == 0, "create-keypair: \(made.summary)")
                let line = made.stdout.trimmingCharacters(in: .newlines)
                let after = try listed()
                #expect(after.status == 0 && keys(after).contains(line), "round \(round): \(after.summary)")
                #expect(Set(keys(after)) == Set(kept + [line]), "round \(round): \(after.stdout)")
                // The second round's key stays: a deletion takes only its own key out.
                if round == 2 {
                    kept.append(line)
                    continue
                }
                let deleted = try cli(["delete-key", "-l", label])
                try #require(deleted.status == 0, "delete-key: \(deleted.summary)")
                let gone = try listed()
                #expect(!keys(gone).contains(line), "round \(round): still listed: \(gone.stdout)")
                #expect(Set(keys(gone)) == Set(kept), "round \(round): \(gone.stdout)")
            }
            // The CLI went through the service: its audit log names the API.
            #expect(box.audit.contains("via=api"), "no via=api audit line: \(box.audit)")
        }
    }
}
