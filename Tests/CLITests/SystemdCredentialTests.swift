import Foundation
import Testing

/// Issue 13, passphrase sources: the systemd credential `keychainfs.passphrase` in
/// `$CREDENTIALS_DIRECTORY` (LoadCredential= / LoadCredentialEncrypted= of the user unit).
@Suite("systemd credential")
struct SystemdCredentialTests {
    @Test(
        "$CREDENTIALS_DIRECTORY/keychainfs.passphrase unlocks; an option wins over it; absent, the next source is asked"
    )
    func credential() throws {
        let box = try Sandbox()
        try box.initVault()
        let directory = box.root + "/credentials"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try box.writeFile(directory + "/keychainfs.passphrase", Array((box.passphrase + "\n").utf8))
        chmod(directory + "/keychainfs.passphrase", 0o400)
        let env: [String: String?] = ["CREDENTIALS_DIRECTORY": directory]
        expectSuccess(try box.run(["dump-keychain", "--vault", box.vault], env: env))

        // A wrong credential: 51; an explicit option is used instead of it.
        let wrong = randomToken("wrong-cred-")
        box.registerPassphrase(wrong)
        chmod(directory + "/keychainfs.passphrase", 0o600)
        try box.writeFile(directory + "/keychainfs.passphrase", Array(wrong.utf8))
        expectError(try box.run(["dump-keychain", "--vault", box.vault], env: env), 51, mentions: ["wrong passphrase"])
        expectSuccess(try box.run(["dump-keychain"] + box.unlock, env: env))

        // No such credential (the unit loads none), or no directory: as without systemd.
        try FileManager.default.removeItem(atPath: directory + "/keychainfs.passphrase")
        expectError(try box.run(["dump-keychain", "--vault", box.vault], env: env), 1, mentions: ["no passphrase"])
        // A credential that cannot be read is said so, not skipped.
        try FileManager.default.createDirectory(
            atPath: directory + "/keychainfs.passphrase", withIntermediateDirectories: true)
        expectError(
            try box.run(["dump-keychain", "--vault", box.vault], env: env), 1,
            mentions: ["the systemd credential \(directory)/keychainfs.passphrase"])
    }
}
