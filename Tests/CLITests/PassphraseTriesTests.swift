import Foundation
import Testing

/// Issue 28, point 6: three passphrase tries at a terminal (as sudo, gpg and pinentry give), one
/// from any other source; `KEYCHAINFS_PASSPHRASE_FILE` read by the CLI as by the helpers.
@Suite("passphrase tries and KEYCHAINFS_PASSPHRASE_FILE")
struct PassphraseTriesTests {
    /// Runs `keychainfs args` on a pseudo-terminal of its own (python's pty), answering each
    /// "passphrase for" prompt with the next of `answers`; prints the exit status, then the output.
    static let driver = """
        import os, pty, sys, select
        binary, answers, args = sys.argv[1], sys.argv[2].split(','), sys.argv[3:]
        pid, fd = pty.fork()
        if pid == 0:
            os.execv(binary, [binary] + args)
        out, asked = b'', 0
        while True:
            ready, _, _ = select.select([fd], [], [], 30)
            if not ready: break
            try: chunk = os.read(fd, 4096)
            except OSError: break
            if not chunk: break
            out += chunk
            while out.count(b'passphrase for') > asked and asked < len(answers):
                os.write(fd, answers[asked].encode() + b'\\n'); asked += 1
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status)); sys.stdout.write(out.decode(errors='replace'))
        """

    func typed(_ box: Sandbox, _ answers: [String]) throws -> (status: Int, output: String) {
        let r = try box.run(
            "/usr/bin/python3",
            [
                "-c", Self.driver, try requireBinary(), answers.joined(separator: ","), "find-generic-password",
                "--vault", box.vault, "-s", "tries", "-w",
            ],
            timeout: 90)
        let lines = r.stdout.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
        return (Int(lines.first ?? "") ?? -1, lines.count > 1 ? String(lines[1]) : "")
    }

    @Test("typed at a terminal: two wrong passphrases, then the right one, answer; three wrong ones exit 51")
    func threeTries() throws {
        let box = try Sandbox()
        try box.initVault()
        expectSuccess(
            try box.run(["add-generic-password", "-s", "tries", "-a", "me", "-w", "pty-secret"] + box.unlock))
        let ok = try typed(box, ["wrong-one", "wrong-two", box.passphrase])
        #expect(ok.status == 0, "\(ok.output)")
        #expect(ok.output.contains("pty-secret"), "\(ok.output)")
        #expect(ok.output.contains("try again (2 of 3)") && ok.output.contains("try again (3 of 3)"), "\(ok.output)")
        let refused = try typed(box, ["wrong-one", "wrong-two", "wrong-three", "never-asked"])
        #expect(refused.status == 51, "\(refused.output)")
        #expect(refused.output.components(separatedBy: "passphrase for").count - 1 == 3, "\(refused.output)")
        #expect(!refused.output.contains("pty-secret"))
    }

    @Test("KEYCHAINFS_PASSPHRASE_FILE unlocks the CLI with no option and no terminal; a wrong one is one try, exit 51")
    func environmentFile() throws {
        let box = try Sandbox()
        try box.initVault()
        expectSuccess(
            try box.run(["add-generic-password", "-s", "tries", "-a", "me", "-w", "env-secret"] + box.unlock))
        let found = try box.run(
            ["find-generic-password", "--vault", box.vault, "-s", "tries", "-w"],
            env: ["KEYCHAINFS_PASSPHRASE_FILE": box.passphraseFile])
        expectSuccess(found)
        #expect(found.stdoutString == "env-secret\n")
        let wrong = try box.passphraseFile(named: "wrong", "not the passphrase")
        let refused = try box.run(
            ["find-generic-password", "--vault", box.vault, "-s", "tries", "-w"],
            env: ["KEYCHAINFS_PASSPHRASE_FILE": wrong])
        expectError(refused, 51)
        // An option still wins over the variable.
        let option = try box.run(
            ["find-generic-password", "-s", "tries", "-w"] + box.unlock, env: ["KEYCHAINFS_PASSPHRASE_FILE": wrong])
        #expect(option.stdoutString == "env-secret\n", "\(option.stderr)")
    }
}
