import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// git-credential-keychainfs driven by real git: clone and push over HTTP basic auth to a git
/// http-backend on 127.0.0.1, two accounts on one host, erase after a wrong password.
@Suite("git credential helper over HTTP", .serialized)
struct GitHelperHTTPTests {
    /// A server with users alice, bob and carol, a bare repository `repo.git` with one commit,
    /// and the helper configured; `body` gets the sandbox, the port and the request log path.
    func withGitServer(_ label: String, _ body: (TestSandbox, Int, String) throws -> Void) throws {
        try withSandbox(label) { box in
            try helperBinary("git-credential-keychainfs")
            let repos = box.root + "/repos", log = box.root + "/server.log", users = box.root + "/users"
            try Data("alice:alice-pw-1\nbob:bob-pw-2\ncarol:carol-pw-3\n".utf8).write(to: URL(fileURLWithPath: users))
            let seed = try box.git(
                """
                set -e; mkdir -p \(q(repos)) seed; cd seed; git init -q -b main; echo one > f; git add f
                git commit -q -m one; git clone -q --bare . \(q(repos + "/repo.git"))
                """)
            try #require(seed.status == 0, "seed repo: \(seed.summary)")
            let (_, port) = try box.startServer(gitServerScript, [repos, users, log])
            try box.configureGitHelper()
            try body(box, port, log)
        }
    }

    func serverLog(_ path: String) -> [String] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    @Test func cloneAndPushAnswerTheAccountGitAsksFor() throws {
        try withGitServer(#function) { box, port, log in
            let host = ["-s", "127.0.0.1", "-P", "\(port)", "-r", "http"]
            try box.addInternet(host + ["-a", "alice"], "alice-pw-1")
            try box.addInternet(host + ["-a", "bob"], "bob-pw-2")

            let clone = try box.git("git clone -q http://alice@127.0.0.1:\(port)/repo.git alice-copy")
            #expect(clone.status == 0, "clone as alice: \(clone.summary)")
            #expect(FileManager.default.fileExists(atPath: box.w + "/alice-copy/f"))
            #expect(serverLog(log).contains { $0.hasPrefix("alice GET /repo.git/info/refs") })

            let push = try box.git(
                """
                set -e; cd alice-copy; echo two >> f; git commit -q -am two
                git push -q http://bob@127.0.0.1:\(port)/repo.git main
                """)
            #expect(push.status == 0, "push as bob: \(push.summary)")
            #expect(serverLog(log).contains("bob POST /repo.git/git-receive-pack"))
            #expect(!serverLog(log).contains { $0.hasPrefix("alice POST /repo.git/git-receive-pack") })
            let pushed = try box.git("git --git-dir=\(q(box.root + "/repos/repo.git")) log --format=%s main")
            #expect(pushed.lines == ["two", "one"])
            // git stored back what worked: the items are as they were, one per account.
            #expect(try box.findInternet(host + ["-a", "alice"]) == "alice-pw-1")
            #expect(try box.findInternet(host + ["-a", "bob"]) == "bob-pw-2")
            #expect(!push.stderr.contains("bob-pw-2") && !clone.stderr.contains("alice-pw-1"))
        }
    }

    @Test func aRejectedPasswordIsErasedAndNothingElse() throws {
        try withGitServer(#function) { box, port, log in
            let host = ["-s", "127.0.0.1", "-P", "\(port)", "-r", "http"]
            try box.addInternet(host + ["-a", "carol"], "carol-old-pw")
            try box.addInternet(host + ["-a", "alice"], "alice-pw-1")

            let clone = try box.git("git clone -q http://carol@127.0.0.1:\(port)/repo.git carol-copy")
            #expect(clone.status != 0, "clone with a wrong password succeeded: \(clone.summary)")
            #expect(serverLog(log).contains { $0.hasPrefix("bad:carol GET") })
            // git erased the rejected credential: carol's item is gone, alice's is not.
            #expect(try box.findInternet(host + ["-a", "carol"]) == nil)
            #expect(try box.findInternet(host + ["-a", "alice"]) == "alice-pw-1")

            // Nothing is left for carol (and git may not prompt); once the right password is
            // approved, the clone works from the vault.
            let fixed = try box.git("git clone -q http://carol@127.0.0.1:\(port)/repo.git carol-copy")
            #expect(fixed.status != 0, "no password left for carol, and no prompt: \(fixed.summary)")
            let approve = try box.git(
                "git credential approve",
                stdin: Array(
                    "protocol=http\nhost=127.0.0.1:\(port)\nusername=carol\npassword=carol-pw-3\n\n".utf8))
            #expect(approve.status == 0, "approve: \(approve.summary)")
            let again = try box.git("git clone -q http://carol@127.0.0.1:\(port)/repo.git carol-copy")
            #expect(again.status == 0, "clone with the stored password: \(again.summary)")
        }
    }
}
