import Foundation
import Testing
@_exported import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 11, points 3 and 4 (first part): a key with userPresence is signed with only after a
/// pinentry confirmation naming the process; no way to ask is a refusal at once; every
/// signature is an audit line.
@Suite("ssh agent: presence and audit")
struct AgentPresenceTests {
    @Test("userPresence key: allowed and denied through pinentry, refused at once without a display; audited")
    func presence() throws {
        try withSandbox { box in
            let pinentry = try ScriptedPinentry(in: box.root)
            let script = pinentry.script, mode = pinentry.modePath, promptLog = pinentry.logPath
            let made = try box.cli(
                ["create-keypair", "-l", "guarded", "--access-control", "userPresence"] + box.unlockArgs)
            try #require(made.status == 0, "\(made.summary)")
            let socket = box.root + "/agent.sock", audit = box.root + "/audit.log"
            let bin = try requireBinary()
            let agent = try box.spawn(
                bin, ["ssh-agent", "-D", "-a", socket, "--pinentry", script, "--audit", audit] + box.unlockArgs)
            try #require(waitUntil(20) { access(socket, F_OK) == 0 }, "\(agent.stdoutSoFar)")
            let pub = box.root + "/guarded.pub", message = box.root + "/message"
            try Data(made.stdout.utf8).write(to: URL(fileURLWithPath: pub))
            try Data("hello".utf8).write(to: URL(fileURLWithPath: message))
            func sign(display: String?) throws -> RunResult {
                try? FileManager.default.removeItem(atPath: message + ".sig")
                var env: [String: String?] = ["SSH_AUTH_SOCK": socket]
                if let display { env["DISPLAY"] = display }
                return try box.run(
                    "/usr/bin/ssh-keygen", ["-Y", "sign", "-f", pub, "-n", "file", message], env: env, timeout: 30)
            }
            try Data("allow\n".utf8).write(to: URL(fileURLWithPath: mode))
            let allowed = try sign(display: ":99")
            #expect(allowed.status == 0, "\(allowed.summary)")
            let prompts = { (try? String(contentsOfFile: promptLog, encoding: .utf8)) ?? "" }
            #expect(prompts().contains("ssh-keygen") && prompts().contains("guarded"), "\(prompts())")
            try Data("deny\n".utf8).write(to: URL(fileURLWithPath: mode))
            let denied = try sign(display: ":99")
            #expect(denied.status != 0, "\(denied.summary)")
            // No terminal and no display to ask on: refused at once, no prompt.
            let before = prompts()
            let started = Date()
            let headless = try sign(display: nil)
            #expect(headless.status != 0 && Date().timeIntervalSince(started) < 10, "\(headless.summary)")
            #expect(prompts() == before)
            let lines = ((try? String(contentsOfFile: audit, encoding: .utf8)) ?? "").split(separator: "\n")
            let signs = lines.filter { $0.contains(" op=ssh-sign ") }
            #expect(signs.count == 3, "\(lines)")
            #expect(signs.first?.contains(" allow host=unknown forwarded=no via=ssh vault=/") == true, "\(signs)")
            // Every line names the key item, allowed or not: the session found it before the prompt.
            #expect(signs.allSatisfy { !$0.contains(" item=- ") }, "\(signs)")
            #expect(signs.dropFirst().allSatisfy { $0.contains(" deny ") && $0.contains("why=errSec") }, "\(signs)")
        }
    }
}
