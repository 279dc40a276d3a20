import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// Issue 13: the CLI asks for user presence as the mount does — pinentry on its own terminal —
// and without a terminal fails the item with errSecInteractionNotAllowed (exit 36). The CLI
// runs on a pseudo-terminal of its own (ptyrun) and finds the scripted pinentry first on PATH.

extension AccessSuite {
    @Suite("user presence on the CLI") struct CLIPresenceTests {
        /// A vault with a userPresence and a devicePasscode item, and the scripted pinentry as
        /// `pinentry` in a directory of its own (its mode file and log beside it).
        func sandbox() throws -> (Sandbox, pinDirectory: String) {
            _ = try #require(keychainfsBinary, "keychainfs binary not found; set KEYCHAINFS_BIN")
            let box = try Sandbox("cli-presence")
            try box.initVault()
            try box.addGeneric("presence", "p", "cli-presence-secret", extra: ["--access-control", "userPresence"])
            try box.addGeneric("passcode", "d", "cli-passcode-secret", extra: ["--access-control", "devicePasscode"])
            let pinDirectory = box.root + "/pinbin"
            try FileManager.default.createDirectory(atPath: pinDirectory, withIntermediateDirectories: true)
            try Data(scriptedPinentry.utf8).write(to: URL(fileURLWithPath: pinDirectory + "/pinentry"))
            chmod(pinDirectory + "/pinentry", 0o755)
            return (box, pinDirectory)
        }

        /// `keychainfs args` on a terminal of its own (or not), with the scripted pinentry in `mode`.
        func cli(
            _ box: Sandbox, _ pinDirectory: String, _ args: [String], mode: String, onTerminal: Bool = true
        ) throws -> RunResult {
            try Data((mode + "\n").utf8).write(to: URL(fileURLWithPath: pinDirectory + "/pinentry.mode"))
            let binary = try #require(keychainfsBinary)
            let env: [String: String?] = [
                "PATH": pinDirectory + ":/usr/bin:/bin", "DISPLAY": nil, "WAYLAND_DISPLAY": nil,
            ]
            if !onTerminal { return try box.run(binary, args + box.unlockArgs, env: env, timeout: 30) }
            return try box.run(
                "/usr/bin/python3", [box.ptyRunnerPath, "25", binary] + args + box.unlockArgs, env: env, timeout: 30)
        }

        func prompts(_ pinDirectory: String) -> [String] {
            ((try? String(contentsOfFile: pinDirectory + "/pinentry.log", encoding: .utf8)) ?? "")
                .split(separator: "\n").map(String.init).filter { $0.hasPrefix("PROMPT ") }
        }

        @Test("on a terminal: find -w asks through pinentry naming the CLI and the item; allowed prints, denied is 51")
        func asksOnTerminal() throws {
            let (box, pins) = try sandbox()
            defer { box.teardown() }
            let find = ["find-generic-password", "-s", "presence", "-w"]
            let allowed = try cli(box, pins, find, mode: "allow")
            #expect(allowed.status == 0 && allowed.stdout.contains("cli-presence-secret"), "\(allowed.summary)")
            let asked = prompts(pins)
            #expect(
                asked.count == 1 && asked[0].hasPrefix("PROMPT CONFIRM") && asked[0].contains("keychainfs CLI (pid")
                    && asked[0].contains("presence"), "\(asked)")

            let denied = try cli(box, pins, find, mode: "deny")
            #expect(denied.status == 51 && !denied.stdout.contains("cli-presence-secret"), "\(denied.summary)")
            #expect(denied.stdout.contains("denied"), "\(denied.summary)")
            let cancelled = try cli(box, pins, find, mode: "cancel")
            #expect(cancelled.status == 128, "errSecUserCanceled: \(cancelled.summary)")

            // devicePasscode: the vault passphrase through pinentry.
            let passcode = try cli(
                box, pins, ["find-generic-password", "-s", "passcode", "-w"], mode: "pin:" + box.passphrase)
            #expect(passcode.status == 0 && passcode.stdout.contains("cli-passcode-secret"), "\(passcode.summary)")
            let wrong = try cli(box, pins, ["find-generic-password", "-s", "passcode", "-w"], mode: "pin:not-it")
            #expect(wrong.status == 51 && !wrong.stdout.contains("cli-passcode-secret"), "\(wrong.summary)")
        }

        @Test("without a terminal: exit 36 at once and no prompt; dump -d never prompts, even on a terminal")
        func noTerminal() throws {
            let (box, pins) = try sandbox()
            defer { box.teardown() }
            let r = try cli(
                box, pins, ["find-generic-password", "-s", "presence", "-w"], mode: "allow", onTerminal: false)
            #expect(r.status == 36 && r.stderr.contains("no terminal or display"), "\(r.summary)")
            #expect(!r.stdout.contains("cli-presence-secret"))
            let dump = try cli(box, pins, ["dump-keychain", "-d"], mode: "allow")
            #expect(dump.status == 0 && !dump.stdout.contains("cli-presence-secret"), "\(dump.summary)")
            #expect(dump.stdout.contains("skipped the data of genp service=\"presence\""), "\(dump.summary)")
            #expect(prompts(pins).isEmpty, "\(prompts(pins))")
        }
    }
}
