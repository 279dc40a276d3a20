import Foundation
import Testing

/// Issue 28, point 10: Argon2id parameters other than those this device last unlocked the vault
/// with are refused before the Argon2id runs (a header edited to the highest parameters cost 15 s
/// and 1 GB per attempt before the passphrase was found wrong); `--accept-kdf-change` takes a
/// change made on purpose on another device, and `passwd --kdf` on this device records its own.
@Suite("Argon2id parameters this device has not seen")
struct KDFMarkTests {
    @Test("a vault whose KDF was changed elsewhere is refused before deriving; --accept-kdf-change opens it once")
    func changedElsewhere() throws {
        let box = try Sandbox()
        try box.initVault()
        expectSuccess(try box.run(["add-generic-password", "-s", "kdf", "-a", "me", "-w", "kdf-secret"] + box.unlock))
        // Another device (its own state directory) changes the parameters of a copy.
        let other = box.root + "/other.vault"
        try FileManager.default.copyItem(atPath: box.vault, toPath: other)
        let elsewhere = ["XDG_STATE_HOME": box.root + "/other-device"]
        let changed = try box.run(
            [
                "passwd", "--vault", other, "--passphrase-file", box.passphraseFile, "--new-passphrase-file",
                box.passphraseFile, "--kdf", "moderate",
            ], env: elsewhere)
        expectSuccess(changed)
        try FileManager.default.removeItem(atPath: box.vault)
        try FileManager.default.copyItem(atPath: other, toPath: box.vault)

        let refused = try box.run(["find-generic-password", "-s", "kdf", "-w"] + box.unlock)
        #expect(refused.status != 0, "\(refused.stderr)")
        #expect(refused.stderr.contains("other than those this device last unlocked it with"), "\(refused.stderr)")
        #expect(refused.stderr.contains("--accept-kdf-change"))
        let accepted = try box.run(["find-generic-password", "-s", "kdf", "-w", "--accept-kdf-change"] + box.unlock)
        #expect(accepted.stdoutString == "kdf-secret\n", "\(accepted.stderr)")
        // Recorded: the next open needs no flag.
        let again = try box.run(["find-generic-password", "-s", "kdf", "-w"] + box.unlock)
        #expect(again.stdoutString == "kdf-secret\n", "\(again.stderr)")
    }

    @Test("passwd --kdf on this device records the new parameters: no refusal after it")
    func changedHere() throws {
        let box = try Sandbox()
        try box.initVault()
        expectSuccess(try box.run(["add-generic-password", "-s", "kdf", "-a", "me", "-w", "here"] + box.unlock))
        expectSuccess(
            try box.run(["passwd", "--new-passphrase-file", box.passphraseFile, "--kdf", "moderate"] + box.unlock))
        let found = try box.run(["find-generic-password", "-s", "kdf", "-w"] + box.unlock)
        #expect(found.stdoutString == "here\n", "\(found.stderr)")
    }
}
