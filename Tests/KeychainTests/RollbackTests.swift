import Foundation
import Keychain
import KeychainCrypto
import Testing

// Whole-file rollback: the device's mark (beside the device key) against the vault's
// authenticated commit counter.

@Suite("Rollback detection")
struct RollbackTests {
    /// The mark file of `v` on its device.
    static func mark(_ v: TestVault) throws -> Int64? {
        let dir = v.dir + "/state/rollback"
        guard let name = try FileManager.default.contentsOfDirectory(atPath: dir).first(where: { !$0.contains(".") })
        else { return nil }
        let text = try String(contentsOfFile: dir + "/" + name, encoding: .utf8)
        let attributes = try FileManager.default.attributesOfItem(atPath: dir + "/" + name)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        return Int64(text.trimmingCharacters(in: .newlines))
    }

    @Test("every write raises the mark; a whole older copy is refused, and accepted with acceptRollback")
    func wholeFileRollback() throws {
        try withVault { v throws in
            let kc = v.keychain
            try kc.add(.genericPassword, genp("svc", "a"), data: bytes("a-1"))
            let old = try snapshotFile(v, "old.vault")
            let markAtCopy = try #require(try Self.mark(v))
            try kc.update(Query(.genericPassword, genp("svc", "a")), attributes: [:], data: bytes("a-2"))
            try kc.add(.genericPassword, genp("svc", "b"), data: bytes("b"))
            let mark = try #require(try Self.mark(v))
            #expect(mark == markAtCopy + 2)
            // Restore the old copy over the vault (with no WAL of the newer state beside it).
            try v.raw().exec("PRAGMA wal_checkpoint(TRUNCATE)")
            for suffix in ["-wal", "-shm"] { unlink(v.path + suffix) }
            try FileManager.default.removeItem(atPath: v.path)
            try FileManager.default.copyItem(atPath: old, toPath: v.path)

            let refused = try v.open()
            expectError(.decode, containing: ["rolled back", "\(markAtCopy)", "\(mark)", "--accept-rollback"]) {
                try refused.unlock(passphrase: try secure(testPassphrase))
            }
            #expect(refused.lockState == .neverUnlocked)
            #expect(try Self.mark(v) == mark)

            let accepted = try v.open()
            try accepted.unlock(passphrase: try secure(testPassphrase), acceptRollback: true)
            #expect(try secret(accepted, "svc", "a") == bytes("a-1"))
            #expect(try Self.mark(v) == markAtCopy)
            // From then on it is the vault again: opens without the flag, and writes go on.
            try accepted.add(.genericPassword, genp("svc", "c"), data: bytes("c"))
            #expect(try secret(v.openUnlocked(), "svc", "c") == bytes("c"))
        }
    }

    @Test("the kept mark follows its file: a removed mark is made again, a higher one renamed over it refuses a write")
    func keptMarkFollowsItsFile() throws {
        try withVault { v throws in
            let kc = v.keychain
            try kc.add(.genericPassword, genp("svc", "a"), data: bytes("a-1"))
            let dir = v.dir + "/state/rollback"
            let name = try #require(
                try FileManager.default.contentsOfDirectory(atPath: dir).first(where: { !$0.contains(".") }))
            let path = dir + "/" + name
            let mark = try #require(try Self.mark(v))
            // Removed while the vault is open: the next write makes it again, at its counter.
            try FileManager.default.removeItem(atPath: path)
            try kc.update(Query(.genericPassword, genp("svc", "a")), attributes: [:], data: bytes("a-2"))
            #expect(try Self.mark(v) == mark + 1)
            // Replaced by a mark ahead of the vault (renamed over it): the next write is refused.
            let ahead = String(repeating: "0", count: 20 - String(mark + 100).count) + String(mark + 100) + "\n"
            #expect(FileManager.default.createFile(atPath: path + ".new", contents: Data(ahead.utf8)))
            #expect(chmod(path + ".new", 0o600) == 0)
            #expect(rename(path + ".new", path) == 0)
            expectError(.decode, containing: ["rolled back"]) {
                try kc.update(Query(.genericPassword, genp("svc", "a")), attributes: [:], data: bytes("a-3"))
            }
            #expect(try secret(kc, "svc", "a") == bytes("a-2"))
        }
    }

    @Test("a vault copied to another machine (no mark there yet) opens; an older copy there is then refused")
    func newMachine() throws {
        try withVault { v throws in
            try v.keychain.add(.genericPassword, genp("svc", "a"), data: bytes("a"))
            let old = try snapshotFile(v, "old.vault")
            try v.keychain.add(.genericPassword, genp("svc", "b"), data: bytes("b"))
            let new = try snapshotFile(v, "new.vault")
            let otherDevice = v.dir + "/other-machine/device.key"
            let there = try Keychain.open(at: new, deviceKeyPath: otherDevice)
            try there.unlock(passphrase: try secure(testPassphrase))
            #expect(try secret(there, "svc", "b") == bytes("b"))
            let older = try Keychain.open(at: old, deviceKeyPath: otherDevice)
            expectError(.decode, containing: ["rolled back"]) {
                try older.unlock(passphrase: try secure(testPassphrase))
            }
        }
    }
}

@Suite("Item ids")
struct ItemIDTests {
    @Test("a rolled-back sqlite_sequence never makes an id be issued twice (no false 'already exists')")
    func rolledBackSequence() throws {
        try withVault { v throws in
            let kc = v.keychain
            try kc.add(.genericPassword, genp("svc", "a"), data: bytes("a"))
            try kc.add(.genericPassword, genp("svc", "b"), data: bytes("b"))
            let c = try kc.add(.genericPassword, genp("svc", "c"), data: bytes("c"))
            try kc.delete(Query(.genericPassword, genp("svc", "c")))
            try v.raw().exec("UPDATE sqlite_sequence SET seq = 1 WHERE name = 'items'")
            let d = try kc.add(.genericPassword, genp("svc", "d"), data: bytes("d"))
            #expect(d.id == c.id + 1)
            #expect(try secret(v.openUnlocked(), "svc", "d") == bytes("d"))
        }
    }
}
