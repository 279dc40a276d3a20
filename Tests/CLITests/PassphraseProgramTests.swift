import Foundation
import Testing

/// Issue 13, passphrase sources: `--passphrase-program COMMAND` (gocryptfs's `-extpass`) and
/// `mount -o passphrase_program=COMMAND`, run through the real binary.
@Suite("passphrase program")
struct PassphraseProgramTests {
    /// An executable script printing the sandbox passphrase (with the newline files have).
    static func script(_ box: Sandbox, _ name: String = "print-passphrase", body: String? = nil) throws -> String {
        let path = box.root + "/" + name
        try box.writeFile(path, Array("#!/bin/sh\n\(body ?? "cat '\(box.passphraseFile)'")\n".utf8))
        chmod(path, 0o755)
        return path
    }

    @Test("init, add and find with the passphrase from a program; the program's stdin is /dev/null, not the secret")
    func programUnlocks() throws {
        let box = try Sandbox()
        let seen = box.root + "/stdin-seen"
        // The program also drains its stdin into a file: it must find nothing there.
        let program = try Self.script(box, body: "cat '\(box.passphraseFile)'; cat > '\(seen)'")
        let withProgram = ["--vault", box.vault, "--passphrase-program", program]
        expectSuccess(try box.run(["init", "--kdf", "interactive"] + withProgram))
        let secret = Array(randomToken("via-program-").utf8)
        box.registerSecret(secret)
        expectSuccess(try box.run(["add-generic-password", "-s", "prog"] + withProgram, stdin: secret))
        #expect(fileBytes(seen) == [], "the passphrase program read \(fileBytes(seen)?.count ?? -1) bytes of stdin")
        // The same vault opens with the file, and the program's form of the passphrase reads it back.
        #expect(try box.findGenericSecret(service: "prog").1 == secret)
        let found = try box.run(["find-generic-password", "-s", "prog", "-w"] + withProgram)
        #expect(found.stdout == secret + [10], "\(found.stderr)")
    }

    @Test("a program that fails, is killed, prints a wrong or no passphrase: one line, its output never echoed")
    func programFailures() throws {
        let box = try Sandbox()
        try box.initVault()
        let wrong = randomToken("wrong-pass-")
        box.registerPassphrase(wrong)
        let cases: [(body: String, code: Int32, mention: String)] = [
            ("echo '\(wrong)'; exit 3", 1, "the passphrase program exited with status 3"),
            ("echo '\(wrong)'; kill -9 $$", 1, "the passphrase program was killed by signal 9"),
            ("echo '\(wrong)'", 51, "wrong passphrase"),
            ("true", 1, "the passphrase is empty"),
        ]
        // COMMAND is a shell command line (`kill -9 $$` kills that shell itself).
        for c in cases {
            let r = try box.run(["dump-keychain", "--vault", box.vault, "--passphrase-program", c.body])
            expectError(r, c.code, mentions: [c.mention])
        }
        // One source at a time.
        let program = try Self.script(box)
        expectError(
            try box.run(["dump-keychain"] + box.unlock + ["--passphrase-program", program]), 2,
            mentions: ["one of --passphrase-file, --passphrase-fd and --passphrase-program"])
    }

    @Test("under systemd (INVOCATION_ID) with no terminal and no option, systemd-ask-password is asked")
    func systemdAskPassword() throws {
        let box = try Sandbox()
        try box.initVault()
        let directory = box.root + "/bin"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        _ = try Self.script(
            box, "bin/systemd-ask-password",
            body: "printf '%s\\n' \"$@\" > '\(box.root)/asked'; cat '\(box.passphraseFile)'")
        let env: [String: String?] = ["PATH": directory + ":/usr/bin:/bin", "INVOCATION_ID": "0123abcd"]
        let r = try box.run(["dump-keychain", "--vault", box.vault], env: env)
        expectSuccess(r)
        let asked = String(decoding: fileBytes(box.root + "/asked") ?? [], as: UTF8.self)
        #expect(asked == "--id=keychainfs\npassphrase for \(box.vault): \n", "\(asked)")
        // Not under systemd: no prompt anywhere, the usual hint.
        let outside = try box.run(["dump-keychain", "--vault", box.vault], env: ["PATH": directory + ":/usr/bin:/bin"])
        expectError(outside, 1, mentions: ["no passphrase", "--passphrase-program"])
    }

    @Test("mount -o passphrase_program=SCRIPT mounts; with passphrase_file too it is a usage error")
    func mountOption() throws {
        let box = try Sandbox()
        try box.initVault()
        let secret = Array(randomToken("mounted-").utf8)
        expectSuccess(try box.addGeneric(service: "m", account: "a", secret: secret))
        let program = try Self.script(box)
        expectError(
            try box.run([
                "mount", box.vault, box.mnt, "-o",
                "passphrase_file=\(box.passphraseFile),passphrase_program=\(program)",
            ]),
            2, mentions: ["passphrase_file or -o passphrase_program"])

        let mounted = try box.run(["mount", box.vault, box.mnt, "-o", "passphrase_program=\(program)"])
        defer { _ = try? box.run(["unmount", box.mnt]) }
        try #require(mounted.status == 0, "mount: \(mounted.stderr)")
        #expect(fileBytes(box.mnt + "/genp/m/a") == secret)
        expectSuccess(try box.run(["unmount", box.mnt]))
    }
}
