import Foundation
import Testing

// The format-1 fixture through the CLI, whole-file rollback and --accept-rollback, backup and
// verify.

/// Tests/Fixtures/format1 (see its README).
let formatOneFixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("Fixtures/format1").path

extension Sandbox {
    /// Tampers with the sandbox vault through python's sqlite3 (no keychainfs code involved).
    func tamper(_ sql: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let r = try py(
            """
            import sqlite3, sys
            db = sqlite3.connect(sys.argv[1])
            db.executescript(sys.argv[2])
            db.commit()
            """, [vault, sql])
        try #require(r.status == 0, "tamper: \(r.summary)", sourceLocation: sourceLocation)
    }

    /// Puts the file at `copy` in place of the vault (no WAL of the newer state left beside it).
    func restore(_ copy: String) throws {
        for suffix in ["", "-wal", "-shm"] { unlink(vault + suffix) }
        try FileManager.default.copyItem(atPath: copy, toPath: vault)
    }
}

@Suite("Integrity commands")
struct IntegrityCommandTests {
    @Test("the format-1 fixture through today's CLI: the same dump and policy as format 1 printed, then format 6")
    func fixtureThroughCLI() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try FileManager.default.copyItem(atPath: formatOneFixture + "/format1.vault", toPath: box.vault)
        try FileManager.default.createDirectory(
            atPath: box.stateHome + "/keychainfs", withIntermediateDirectories: true)
        try FileManager.default.copyItem(
            atPath: formatOneFixture + "/device.key", toPath: box.stateHome + "/keychainfs/device.key")
        let pass = try box.passphraseFile(named: "fixture-pass", "fixture passphrase: format 1")
        let unlock = ["--vault", box.vault, "--passphrase-file", pass]
        let dump = try box.run(["dump-keychain", "--json"] + unlock)
        expectSuccess(dump)
        #expect(dump.stdout == fileBytes(formatOneFixture + "/dump.json"))
        let groups = try box.run(["access-group", "list"] + unlock)
        #expect(groups.stdout == fileBytes(formatOneFixture + "/access-groups.txt"))
        let verify = try box.run(["verify"] + unlock)
        expectSuccess(verify)
        #expect(verify.stdoutString.contains("format 8, commit 1\nitems: 11 (cert 2, genp 6, inet 2, keys 1)"))
        #expect(verify.stdoutString.contains("class keys: 7 open"))
        // Without the device key (another machine), -d still dumps every item, naming the
        // ones whose data cannot be read here.
        unlink(box.stateHome + "/keychainfs/device.key")
        let elsewhere = try box.run(["dump-keychain", "-d", "--json"] + unlock)
        #expect(elsewhere.status == 0, "dump -d: \(elsewhere.stderr)")
        #expect(try parseDump(elsewhere).count == 11)
        #expect(elsewhere.stderr.contains("(item 3): data not dumped"))
        #expect(elsewhere.stderr.contains("(item 6): data not dumped"))
    }

    @Test("a whole-file rollback: refused naming --accept-rollback; accepted with it, then the vault goes on")
    func wholeFileRollback() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        expectSuccess(try box.addGeneric(service: "svc", account: "a", secret: Array("a-secret".utf8)))
        let backup = box.root + "/backup.vault"
        expectSuccess(try box.run(["backup", "--vault", box.vault, backup]))
        expectSuccess(try box.addGeneric(service: "svc", account: "b", secret: Array("b-secret".utf8)))
        try box.restore(backup)

        let refused = try box.run(["find-generic-password", "-s", "svc", "-a", "a", "-w"] + box.unlock)
        expectError(refused, 93, mentions: ["rolled back", "--accept-rollback"])  // errSecDecode
        let accepted = try box.run(
            ["find-generic-password", "-s", "svc", "-a", "a", "-w", "--accept-rollback"] + box.unlock)
        expectSuccess(accepted)
        #expect(accepted.stdoutString == "a-secret\n")
        #expect(try box.findGenericSecret(service: "svc", account: "b").1 == nil)
        expectSuccess(try box.addGeneric(service: "svc", account: "c", secret: Array("c-secret".utf8)))
        #expect(try box.findGenericSecret(service: "svc", account: "c").1 == Array("c-secret".utf8))
    }

    @Test("backup: 0600, never over an existing file; verify: ok on a clean vault")
    func backupAndVerifyClean() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        expectSuccess(try box.addGeneric(service: "svc", account: "a", secret: Array("a-secret".utf8)))
        let backup = box.root + "/backup.vault"
        let r = try box.run(["backup", "--vault", box.vault, backup])
        expectSuccess(r)
        #expect(r.stdoutString.hasPrefix("backed up 1 items (format 8, commit "))
        #expect(fileMode(backup) == 0o600)
        let before = fileBytes(backup)
        let again = try box.run(["backup", "--vault", box.vault, backup])
        expectError(again, 48, mentions: ["never overwrites"])  // errSecDuplicateKeychain
        #expect(fileBytes(backup) == before)
        let verify = try box.run(["verify", box.vault, "--passphrase-file", box.passphraseFile])
        expectSuccess(verify)
        #expect(verify.stdoutString.hasSuffix("access policy: none\nok\n"))
        // Issue 28, point 10: once the vault moved on, the backup is whole but older: exit 3,
        // so a script gating on verify cannot take a rolled-back file for the live vault.
        expectSuccess(try box.addGeneric(service: "svc", account: "b", secret: Array("b-secret".utf8)))
        let older = try box.run(["verify", backup, "--passphrase-file", box.passphraseFile])
        #expect(older.status == 3, "verify of an older copy: \(older.stdoutString) \(older.stderr)")
        #expect(older.stderr.contains("is an older copy"), "\(older.stderr)")
        #expect(older.stdoutString.contains("this is an older copy") && older.stdoutString.hasSuffix("ok\n"))
        expectSuccess(try box.run(["verify", box.vault, "--passphrase-file", box.passphraseFile]))
    }

    enum Tampering: String, CaseIterable, Sendable {
        case data, attributes, manifest, deletedRow, policy
    }

    @Test("verify on a tampered vault: exit 1, naming what failed and each damaged item", arguments: Tampering.allCases)
    func verifyTampered(_ tampering: Tampering) throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        expectSuccess(try box.run(["access-group", "add", "team", "/usr/bin/dd"] + box.unlock))
        expectSuccess(try box.addGeneric(service: "svc", account: "a", secret: Array("a-secret".utf8)))
        expectSuccess(try box.addGeneric(service: "svc", account: "b", secret: Array("b-secret".utf8)))
        let expected: [String]
        switch tampering {
        case .data:
            try box.tamper("UPDATE items SET data = data || x'00' WHERE id = 2")
            expected = ["damaged: item 2 (genp): its data does not authenticate", "rows were altered"]
        case .attributes:
            try box.tamper("UPDATE items SET attrs = x'00' || attrs WHERE id = 1")
            expected = ["damaged: item 1 (genp): its attributes do not authenticate"]
        case .manifest:
            try box.tamper("UPDATE meta SET value = zeroblob(8) || substr(value, 9) WHERE name = 'manifest'")
            expected = ["authentication tag does not verify"]
        case .deletedRow:
            try box.tamper("DELETE FROM items WHERE id = 1")
            expected = ["1 rows found, 2 expected", "deleted"]
        case .policy:
            try box.tamper("UPDATE meta SET value = value || x'00' WHERE name = 'access_policy'")
            expected = ["access policy"]
        }
        let r = try box.run(["verify", box.vault, "--passphrase-file", box.passphraseFile])
        #expect(r.status == 1, "verify: \(r.stdoutString) \(r.stderr)")
        #expect(r.stderr.hasPrefix("keychainfs: error: "))
        for text in expected {
            #expect(r.stdoutString.contains(text), "verify output should say '\(text)': \(r.stdoutString)")
        }
        #expect(!r.stdoutString.hasSuffix("ok\n"))
    }

    @Test("salvage: a vault that no longer unlocks gives up every intact item to a new vault")
    func salvage() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        expectSuccess(try box.addGeneric(service: "svc", account: "a", secret: Array("a-secret".utf8)))
        expectSuccess(try box.addGeneric(service: "svc", account: "b", secret: Array("b-secret".utf8)))
        try box.tamper("UPDATE items SET data = data || x'00' WHERE id = 2")
        expectError(try box.run(["dump-keychain"] + box.unlock), 93, mentions: ["manifest"])  // errSecDecode
        let destination = box.root + "/salvaged.vault"
        let r = try box.run(["salvage", destination] + box.unlock)
        expectSuccess(r)
        #expect(r.stdoutString.hasPrefix("salvaged 1 items into \(destination)\n"))
        #expect(r.stdoutString.contains("left behind: item 2 (genp): its data does not authenticate"))
        #expect(fileMode(destination) == 0o600)
        let found = try box.run(
            [
                "find-generic-password", "-s", "svc", "-a", "a", "-w", "--vault", destination, "--passphrase-file",
                box.passphraseFile,
            ])
        #expect(found.stdoutString == "a-secret\n")
        let again = try box.run(["salvage", destination] + box.unlock)
        expectError(again, 48, mentions: ["refusing to overwrite"])  // errSecDuplicateKeychain
    }
}
