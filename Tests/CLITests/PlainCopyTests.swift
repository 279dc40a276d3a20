import Foundation
import Testing

/// Issue 28, point 4: a plain copy of a closed vault file is whole. A command that ends by
/// `exit` leaves none of its commits only in the `-wal` file beside the vault.
@Suite("A plain copy of a closed vault")
struct PlainCopyTests {
    /// The vault file alone (no -wal, no -shm), copied the way `cp` copies it.
    func copyAlone(_ box: Sandbox, _ name: String) throws -> String {
        let copy = box.root + "/" + name + ".vault"
        try? FileManager.default.removeItem(atPath: copy)
        try FileManager.default.copyItem(atPath: box.vault, toPath: copy)
        return copy
    }

    func walSize(_ box: Sandbox) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: box.vault + "-wal"))?[.size] as? Int) ?? 0
    }

    @Test("after add, update and delete from the CLI the vault file alone holds every commit")
    func everyCommandLeavesTheFileWhole() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        let secret = randomToken("first-")
        box.registerSecret(Array(secret.utf8))
        expectSuccess(try box.run(["add-generic-password", "-s", "copy-svc", "-a", "me", "-w", secret] + box.unlock))
        #expect(walSize(box) == 0)
        let afterAdd = try copyAlone(box, "after-add")
        let read = try box.run([
            "find-generic-password", "-s", "copy-svc", "-w", "--vault", afterAdd, "--passphrase-file",
            box.passphraseFile,
        ])
        expectSuccess(read)
        #expect(read.stdoutString == secret + "\n")

        let second = randomToken("second-")
        box.registerSecret(Array(second.utf8))
        expectSuccess(
            try box.run(["add-generic-password", "-U", "-s", "copy-svc", "-a", "me", "-w", second] + box.unlock))
        #expect(walSize(box) == 0)
        let afterUpdate = try copyAlone(box, "after-update")
        let reread = try box.run([
            "find-generic-password", "-s", "copy-svc", "-w", "--vault", afterUpdate, "--passphrase-file",
            box.passphraseFile,
        ])
        expectSuccess(reread)
        #expect(reread.stdoutString == second + "\n")

        expectSuccess(try box.run(["delete-generic-password", "-s", "copy-svc"] + box.unlock))
        #expect(walSize(box) == 0)
        let afterDelete = try copyAlone(box, "after-delete")
        // Not refused as a rollback (the copy carries the newest commit) and the item is gone.
        let gone = try box.run([
            "find-generic-password", "-s", "copy-svc", "--vault", afterDelete, "--passphrase-file", box.passphraseFile,
        ])
        expectError(gone, 44, mentions: ["not found"])
    }
}
