import Foundation
import Testing

// Issue 28: the helpers answer --help and --version as users try them first (they were usage
// errors, exit 2), and docker's `version` names keychainfs's version (it said `1`).
@Suite("credential helpers' --help and --version")
struct HelperSurfaceTests {
    @Test("--help prints the usage and exits 0; --version and docker's version print keychainfs's version")
    func helpAndVersion() throws {
        try withSandbox { box in
            let version =
                try box.cli(["--version"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: " ")
                .last.map(String.init) ?? "?"
            for tool in ["git-credential-keychainfs", "docker-credential-keychainfs"] {
                let helper = try helperBinary(tool)
                let help = try box.run(helper, ["--help"])
                #expect(help.status == 0 && help.stdout.hasPrefix("usage: \(tool) "), "\(tool) --help: \(help.summary)")
                let v = try box.run(helper, ["--version"])
                #expect(
                    v.status == 0 && v.stdout == "\(tool) (keychainfs) \(version)\n", "\(tool) --version: \(v.summary)")
            }
            let docker = try box.run(try helperBinary("docker-credential-keychainfs"), ["version"])
            #expect(docker.stdout == "docker-credential-keychainfs (keychainfs) \(version)\n", "\(docker.summary)")
            // A wrong operation is still a usage error: exit 2 for git's helper, 1 for docker's, as
            // docker-credential-helpers' Serve exits for an unknown action; nothing on stdout but
            // the usage line docker's client shows.
            #expect(try box.run(try helperBinary("git-credential-keychainfs"), ["frobnicate"]).status == 2)
            let wrong = try box.run(try helperBinary("docker-credential-keychainfs"), ["frobnicate"])
            #expect(wrong.status == 1 && wrong.stdout.hasPrefix("Usage: "), "\(wrong.summary)")
        }
    }

    @Test("find-generic-password --json: the item as dump-keychain --json prints it, its secret only with -w")
    func findJSON() throws {
        try withSandbox { box in
            try box.addGeneric("jsonsvc", "acct", "js-secret")
            let plain = try box.cli(["find-generic-password"] + box.unlockArgs + ["-s", "jsonsvc", "--json"])
            let withData = try box.cli(["find-generic-password"] + box.unlockArgs + ["-s", "jsonsvc", "--json", "-w"])
            for (r, data) in [(plain, false), (withData, true)] {
                let objects = try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [[String: Any]]
                let item = try #require(objects?.first, "\(r.summary)")
                #expect((item["attributes"] as? [String: Any])?["service"] as? String == "jsonsvc")
                #expect(item["class"] as? String == "genp")
                #expect((item["data"] as? String) == (data ? "js-secret" : nil), "\(r.stdout)")
            }
        }
    }
}
