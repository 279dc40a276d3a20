import Foundation
import Testing

let formatTwoFixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("Fixtures/format2").path

@Suite("The format-2 fixture through the CLI")
struct FormatTwoFixtureCLITests {
    @Test("today's CLI migrates the format-2 fixture at first unlock: the same dump and policy, then today's format")
    func fixtureThroughCLI() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try FileManager.default.copyItem(atPath: formatTwoFixture + "/format2.vault", toPath: box.vault)
        try FileManager.default.createDirectory(
            atPath: box.stateHome + "/keychainfs", withIntermediateDirectories: true)
        try FileManager.default.copyItem(
            atPath: formatTwoFixture + "/device.key", toPath: box.stateHome + "/keychainfs/device.key")
        let pass = try box.passphraseFile(named: "fixture-pass", "fixture passphrase: format 2")
        let unlock = ["--vault", box.vault, "--passphrase-file", pass]
        let dump = try box.run(["dump-keychain", "--json"] + unlock)
        expectSuccess(dump)
        #expect(dump.stdout == fileBytes(formatTwoFixture + "/dump.json"), "every item byte-exact after migration")
        let groups = try box.run(["access-group", "list"] + unlock)
        #expect(groups.stdout == fileBytes(formatTwoFixture + "/access-groups.txt"))
        let verify = try box.run(["verify"] + unlock)
        expectSuccess(verify)
        #expect(verify.stdoutString.contains("format 8, commit"), "\(verify.stdoutString)")
        #expect(verify.stdoutString.contains("items: 11 (genp 7, inet 4)"), "\(verify.stdoutString)")
    }
}
