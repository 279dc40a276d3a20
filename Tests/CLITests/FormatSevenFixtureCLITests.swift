import Foundation
import Testing

let formatSevenFixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("Fixtures/format7").path

@Suite("The format-7 fixture through the CLI")
struct FormatSevenFixtureCLITests {
    @Test(
        "today's CLI migrates the format-7 fixture at a one-shot lookup: the secrets, then the same dump and policy, verify says format 8, and the change log keeps its 23 rows"
    )
    func fixtureThroughCLI() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try FileManager.default.copyItem(atPath: formatSevenFixture + "/format7.vault", toPath: box.vault)
        try FileManager.default.createDirectory(
            atPath: box.stateHome + "/keychainfs", withIntermediateDirectories: true)
        try FileManager.default.copyItem(
            atPath: formatSevenFixture + "/device.key", toPath: box.stateHome + "/keychainfs/device.key")
        let pass = try box.passphraseFile(named: "fixture-pass", "fixture passphrase: format 7")
        let unlock = ["--vault", box.vault, "--passphrase-file", pass]
        let found = try box.run(["find-generic-password", "-s", "github.com", "-a", "bob", "-w"] + unlock)
        expectSuccess(found)
        #expect(found.stdoutString == "github bob v2\n")
        let deviceOnly = try box.run(["find-generic-password", "-s", "github.com", "-a", "dora", "-w"] + unlock)
        #expect(deviceOnly.stdoutString == "device only\n", "\(deviceOnly.stderr)")
        let dump = try box.run(["dump-keychain", "--json"] + unlock)
        expectSuccess(dump)
        #expect(dump.stdout == fileBytes(formatSevenFixture + "/dump.json"), "every item byte-exact after migration")
        let groups = try box.run(["access-group", "list"] + unlock)
        #expect(groups.stdout == fileBytes(formatSevenFixture + "/access-groups.txt"))
        let verify = try box.run(["verify"] + unlock)
        expectSuccess(verify)
        #expect(verify.stdoutString.contains("format 8, commit"), "\(verify.stdoutString)")
        #expect(
            verify.stdoutString.contains("items: 20 (cert 1, genp 12, inet 6, keys 1)"), "\(verify.stdoutString)")
        // The change log made in format 7 is kept, row for row; the next change follows it.
        let log = try box.run(["watch", "--once", "--since", "0"] + unlock)
        let lines = log.stdoutString.split(separator: "\n")
        #expect(lines.count == 23, "\(log.stdoutString)")
        #expect(lines.first == "1 add genp genp/github.com/alice", "\(log.stdoutString)")
        #expect(lines.last == "23 add genp genp/fixture-app/color=blue&project=beta", "\(log.stdoutString)")
        expectSuccess(try box.run(["delete-generic-password", "-s", "github.com", "-a", "bob"] + unlock))
        let next = try box.run(["watch", "--once", "--since", "23"] + unlock)
        #expect(next.stdoutString == "24 delete genp genp/github.com/bob\n", "\(next.stdoutString)")
    }
}
