import Foundation
import Testing

let formatFiveFixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("Fixtures/format5").path

@Suite("The format-5 fixture through the CLI")
struct FormatFiveFixtureCLITests {
    @Test(
        "today's CLI migrates the format-5 fixture at a one-shot lookup: the secret, then the same dump and policy, then verify says format 6"
    )
    func fixtureThroughCLI() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try FileManager.default.copyItem(atPath: formatFiveFixture + "/format5.vault", toPath: box.vault)
        try FileManager.default.createDirectory(
            atPath: box.stateHome + "/keychainfs", withIntermediateDirectories: true)
        try FileManager.default.copyItem(
            atPath: formatFiveFixture + "/device.key", toPath: box.stateHome + "/keychainfs/device.key")
        let pass = try box.passphraseFile(named: "fixture-pass", "fixture passphrase: format 5")
        let unlock = ["--vault", box.vault, "--passphrase-file", pass]
        // The one-shot lookup (an incremental unlock) migrates first.
        let found = try box.run(["find-generic-password", "-s", "github.com", "-a", "bob", "-w"] + unlock)
        expectSuccess(found)
        #expect(found.stdoutString == "github bob v2\n")
        let dump = try box.run(["dump-keychain", "--json"] + unlock)
        expectSuccess(dump)
        #expect(dump.stdout == fileBytes(formatFiveFixture + "/dump.json"), "every item byte-exact after migration")
        let groups = try box.run(["access-group", "list"] + unlock)
        #expect(groups.stdout == fileBytes(formatFiveFixture + "/access-groups.txt"))
        let verify = try box.run(["verify"] + unlock)
        expectSuccess(verify)
        #expect(verify.stdoutString.contains("format 8, commit"), "\(verify.stdoutString)")
        #expect(
            verify.stdoutString.contains("items: 18 (cert 1, genp 11, inet 5, keys 1)"), "\(verify.stdoutString)")
    }
}
