import Foundation
import Testing

let formatSixFixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("Fixtures/format6").path

@Suite("The format-6 fixture through the CLI")
struct FormatSixFixtureCLITests {
    @Test(
        "today's CLI migrates the format-6 fixture at a one-shot lookup: the secret, then the same dump and policy, then verify says format 7; watch shows the changes after it"
    )
    func fixtureThroughCLI() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try FileManager.default.copyItem(atPath: formatSixFixture + "/format6.vault", toPath: box.vault)
        try FileManager.default.createDirectory(
            atPath: box.stateHome + "/keychainfs", withIntermediateDirectories: true)
        try FileManager.default.copyItem(
            atPath: formatSixFixture + "/device.key", toPath: box.stateHome + "/keychainfs/device.key")
        let pass = try box.passphraseFile(named: "fixture-pass", "fixture passphrase: format 6")
        let unlock = ["--vault", box.vault, "--passphrase-file", pass]
        // The one-shot lookup (an incremental unlock) migrates first.
        let found = try box.run(["find-generic-password", "-s", "github.com", "-a", "bob", "-w"] + unlock)
        expectSuccess(found)
        #expect(found.stdoutString == "github bob v2\n")
        let dump = try box.run(["dump-keychain", "--json"] + unlock)
        expectSuccess(dump)
        #expect(dump.stdout == fileBytes(formatSixFixture + "/dump.json"), "every item byte-exact after migration")
        let groups = try box.run(["access-group", "list"] + unlock)
        #expect(groups.stdout == fileBytes(formatSixFixture + "/access-groups.txt"))
        let verify = try box.run(["verify"] + unlock)
        expectSuccess(verify)
        #expect(verify.stdoutString.contains("format 8, commit"), "\(verify.stdoutString)")
        #expect(
            verify.stdoutString.contains("items: 18 (cert 1, genp 11, inet 5, keys 1)"), "\(verify.stdoutString)")
        // The migrated vault's log starts empty; the next change is its first row.
        let none = try box.run(["watch", "--once"] + unlock)
        #expect(none.status == 0 && none.stdout.isEmpty, "\(none.stdoutString)")
        expectSuccess(try box.run(["delete-generic-password", "-s", "github.com", "-a", "bob"] + unlock))
        let watched = try box.run(["watch", "--once", "--since", "0"] + unlock)
        #expect(watched.stdoutString == "1 delete genp genp/github.com/bob\n", "\(watched.stdoutString)")
    }
}
