import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// Issue 26, items 2 and 3: the CLI's certificate, key, dump and import verbs, the access policy
// and `backup` go through the keychain service when it holds the vault. With the vault mounted
// and nothing that could unlock it (no passphrase option or file, standard input not a
// terminal), each succeeds and its result is read back at once through the mount and by a
// second command; a policy change made through the service takes effect on the live mount at
// once with no alarm; a backup holds what the mount wrote a moment before.
@Suite("the CLI's vault verbs through the keychain service", .serialized)
struct ServedVerbsTests {
    /// A self-signed certificate with its EC key (one PEM bundle: an identity once imported),
    /// and a second certificate alone.
    static func makeFiles(_ box: TestSandbox) throws {
        let script = """
            set -e
            for k in a b; do openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out $k.key 2>/dev/null; done
            openssl req -x509 -key a.key -out one.pem -days 30 -subj "/CN=Alpha Cert"
            openssl req -x509 -key b.key -out two.pem -days 30 -subj "/CN=Beta Cert"
            cat one.pem a.key > bundle.pem
            """
        let r = try box.sh(script, timeout: 60)
        try #require(r.status == 0, "openssl: \(r.summary)")
    }

    static func listing(_ box: TestSandbox, _ directory: String) throws -> [String] {
        let r = try box.run("/bin/ls", ["-1", box.mnt + "/" + directory], timeout: 10)
        return r.status == 0 ? r.lines : ["ls failed: \(r.summary)"]
    }

    static func expectNoAlarm(_ box: TestSandbox, sourceLocation: SourceLocation = #_sourceLocation) {
        let log = box.daemonLog
        #expect(
            !log.contains("altered") && !log.lowercased().contains("tamper") && !log.contains("integrity"),
            "an alarm in the daemon log:\n\(log)", sourceLocation: sourceLocation)
    }

    @Test("certificates, identities, keys and dump-keychain: through the service, no passphrase, seen by the mount")
    func certificatesAndKeys() throws {
        try withMount { box in
            try Self.makeFiles(box)
            let v = ["--vault", box.vault]
            let imported = try box.cliWithoutPassphrase(["import", box.w + "/bundle.pem", "-l", "alpha"] + v)
            #expect(imported.status == 0, "import of a bundle: \(imported.summary)")
            #expect(imported.stdout.contains("1 certificate(s) and 1 key(s) imported"), "\(imported.stdout)")
            let added = try box.cliWithoutPassphrase(["add-certificates", box.w + "/two.pem"] + v)
            #expect(added.status == 0 && added.stdout.contains("Beta Cert"), "add-certificates: \(added.summary)")
            // At once, through the mount.
            #expect(try Self.listing(box, "keys").contains("alpha"), "the imported key in /keys")
            let certs = try Self.listing(box, "cert")
            #expect(certs.count == 2, "two certificates in /cert: \(certs)")

            // A second command reads them back.
            let found = try box.cliWithoutPassphrase(["find-certificate", "-a", "-Z"] + v)
            #expect(found.status == 0, "find-certificate: \(found.summary)")
            #expect(
                found.stdout.contains("Alpha Cert") && found.stdout.contains("Beta Cert")
                    && found.stdout.components(separatedBy: "SHA-1 hash:").count == 3, "\(found.stdout)")
            let identity = try box.cliWithoutPassphrase(["find-identity"] + v)
            #expect(
                identity.status == 0 && identity.stdout.contains("\"Alpha Cert\"")
                    && identity.stdout.contains("1 identities found"), "find-identity: \(identity.summary)")
            let exported = try box.cliWithoutPassphrase(["export", "-t", "identities"] + v)
            #expect(
                exported.status == 0 && exported.stdout.contains("BEGIN CERTIFICATE")
                    && exported.stdout.contains("PRIVATE KEY"), "export -t identities: \(exported.summary)")
            let missing = try box.cliWithoutPassphrase(["find-identity", "-s", "Gamma"] + v)
            #expect(missing.status == 44, "find-identity of no identity: \(missing.summary)")

            // create-keypair: its public key is what the mount shows for the key.
            let pair = try box.cliWithoutPassphrase(["create-keypair", "-l", "kp"] + v)
            #expect(pair.status == 0 && pair.stdout.hasPrefix("ssh-ed25519 "), "create-keypair: \(pair.summary)")
            let shown = try box.run("/bin/cat", [box.mnt + "/keys/kp"], timeout: 10)
            #expect(
                shown.stdout.trimmingCharacters(in: .newlines) == pair.stdout.trimmingCharacters(in: .newlines),
                "/keys/kp: \(shown.summary) vs \(pair.stdout)")
            let again = try box.cliWithoutPassphrase(["find-key", "-l", "kp"] + v)
            #expect(again.status == 0 && again.stdout.contains("\"kp\""), "find-key: \(again.summary)")
            #expect(try box.cliWithoutPassphrase(["delete-key", "-l", "kp"] + v).status == 0)
            #expect(!(try Self.listing(box, "keys").contains("kp")), "/keys still lists the deleted key")
            #expect(try box.cliWithoutPassphrase(["find-key", "-l", "kp"] + v).status == 44)
            let deleted = try box.cliWithoutPassphrase(["delete-certificate", "-c", "Beta"] + v)
            #expect(deleted.status == 0, "delete-certificate: \(deleted.summary)")
            #expect(try Self.listing(box, "cert").count == 1, "/cert after delete-certificate")

            // dump-keychain -d shows what the mount wrote one call before.
            let write = try box.sh(
                "mkdir \(box.mnt)/genp/dumpsvc && printf dumped-secret > \(box.mnt)/genp/dumpsvc/acct")
            #expect(write.status == 0, "write through the mount: \(write.summary)")
            let dump = try box.cliWithoutPassphrase(["dump-keychain", "-d"] + v)
            #expect(dump.status == 0, "dump-keychain: \(dump.summary)")
            #expect(dump.stdout.contains("dumpsvc") && dump.stdout.contains("dumped-secret"), "\(dump.stdout)")
            #expect(dump.stdout.contains("keychain: \"\(box.vault)\""), "the vault named in the dump")

            // The service answered: its audit says via=api for these verbs.
            #expect(!box.auditLines("via=api").isEmpty, "no via=api audit line")
            Self.expectNoAlarm(box)
        }
    }

    @Test("import-csv while mounted: the items are in the mount at once; a refused batch stores nothing, exit 45")
    func importWhileMounted() throws {
        try withMount { box in
            let file = box.w + "/items.csv"
            try "title,account,password\nimpsvc,alice,pw-one\nimpsvc,bob,pw-two\n".write(
                toFile: file, atomically: true, encoding: .utf8)
            let columns = ["--columns", "title=title,account=account,password=password"]
            let v = ["--vault", box.vault]
            let r = try box.cliWithoutPassphrase(["import-csv", "generic", file] + columns + v)
            #expect(r.status == 0, "import-csv: \(r.summary)")
            #expect(r.stdout.contains("2 added"), "\(r.stdout)")
            let cat = try box.run("/bin/cat", [box.mnt + "/genp/impsvc/alice"], timeout: 10)
            #expect(cat.stdout == "pw-one", "the mount shows the import at once: \(cat.summary)")
            let find = try box.cliWithoutPassphrase(["find-generic-password", "-s", "impsvc", "-a", "bob", "-w"] + v)
            #expect(find.stdout == "pw-two\n", "a second command reads it: \(find.summary)")

            // All or nothing: bob exists, carol is new; without -U nothing is stored.
            try "title,account,password\nimpsvc,carol,pw-3\nimpsvc,bob,pw-new\n".write(
                toFile: file, atomically: true, encoding: .utf8)
            let refused = try box.cliWithoutPassphrase(["import-csv", "generic", file, "--json"] + columns + v)
            #expect(refused.status == 45, "a refused batch: \(refused.summary)")
            #expect(
                refused.stdout.contains("\"failed\":1") && refused.stdout.contains("\"added\":0"), "\(refused.stdout)")
            #expect(!(try Self.listing(box, "genp/impsvc").contains("carol")), "a refused batch stored carol")
            // With -U it goes in; --continue-on-error stores through the service too.
            let updated = try box.cliWithoutPassphrase(["import-csv", "generic", file, "-U"] + columns + v)
            #expect(updated.status == 0 && updated.stdout.contains("1 added, 1 updated"), "-U: \(updated.summary)")
            let bob = try box.run("/bin/cat", [box.mnt + "/genp/impsvc/bob"], timeout: 10)
            #expect(bob.stdout == "pw-new", "the update through the mount: \(bob.summary)")
            try "title,account,password\nimpsvc,dave,pw-4\nimpsvc,bob,x\n".write(
                toFile: file, atomically: true, encoding: .utf8)
            let partial = try box.cliWithoutPassphrase(
                ["import-csv", "generic", file, "--continue-on-error"] + columns + v)
            #expect(partial.status == 45, "--continue-on-error with one existing: \(partial.summary)")
            #expect(try Self.listing(box, "genp/impsvc").contains("dave"), "--continue-on-error stored dave")
            #expect(!box.auditLines("via=api").isEmpty, "no via=api audit line")
            Self.expectNoAlarm(box)
        }
    }

    @Test("access-group add and remove through the service: at once on the live mount, no alarm; presence list")
    func accessPolicyWhileMounted() throws {
        try withMount(setup: { box in
            let add = try box.cli(["access-group", "add"] + box.unlockArgs + ["team", "/usr/bin/cat"])
            try #require(add.status == 0, "access-group add: \(add.summary)")
            try box.addGeneric("svc", "acct", "grouped", extra: ["--access-group", "team"])
        }) { box in
            let path = box.mnt + "/genp/svc/acct;accessGroup=team"
            let withFile = ["--vault", box.vault, "--passphrase-file", box.passphraseFile]
            #expect(try box.run("/usr/bin/head", [path], timeout: 10).status != 0, "head is not in team yet")

            let add = try box.cliWithoutPassphrase(["access-group", "add"] + withFile + ["team", "/usr/bin/head"])
            #expect(add.status == 0 && add.stdout.contains("team: /usr/bin/head"), "add: \(add.summary)")
            let head = try box.run("/usr/bin/head", [path], timeout: 10)
            #expect(head.status == 0 && head.stdout == "grouped", "head at once after its add: \(head.summary)")

            let rm = try box.cliWithoutPassphrase(["access-group", "remove"] + withFile + ["team", "/usr/bin/cat"])
            #expect(rm.status == 0, "remove: \(rm.summary)")
            let cat = try box.run("/usr/bin/cat", [path], timeout: 10)
            #expect(cat.status == 1 && cat.stderr.contains("No such file"), "cat at once after removal: \(cat.summary)")

            // The same exit codes as with the vault opened: an absent entry is 44, a wrong passphrase 51.
            let absent = try box.cliWithoutPassphrase(
                ["access-group", "remove"] + withFile + ["team", "/usr/bin/cat"])
            #expect(absent.status == 44, "removing an absent entry: \(absent.summary)")
            try Data("wrong\n".utf8).write(to: URL(fileURLWithPath: box.root + "/wrong"))
            let bad = try box.cliWithoutPassphrase([
                "access-group", "remove", "--vault", box.vault, "--passphrase-file", box.root + "/wrong", "team",
            ])
            #expect(bad.status == 51, "a wrong passphrase: \(bad.summary)")

            let list = try box.cliWithoutPassphrase(["access-group", "list", "--vault", box.vault])
            #expect(list.status == 0 && list.lines == ["team: /usr/bin/head"], "list: \(list.summary)")
            let presence = try box.cliWithoutPassphrase(["presence", "list", "--vault", box.vault])
            #expect(
                presence.status == 0 && presence.stdout.contains("no remembered presence"),
                "presence: \(presence.summary)")
            let forget = try box.cliWithoutPassphrase(["presence", "forget", "--all"] + withFile)
            #expect(forget.status == 44, "forget with nothing remembered: \(forget.summary)")

            // The service made the changes (its log says so), and raised no alarm.
            #expect(box.daemonLog.contains("api: access policy change by"), "log:\n\(box.daemonLog)")
            Self.expectNoAlarm(box)
            // After a remount, the policy is the one the service wrote.
            try box.unmount()
            let after = try box.cli(["access-group", "list"] + box.unlockArgs)
            #expect(after.lines == ["team: /usr/bin/head"], "after unmount: \(after.summary)")
        }
    }

    @Test(
        "backup while mounted: the service's copy holds what the mount wrote one call before; 0600, never overwritten")
    func backupWhileMounted() throws {
        try withMount { box in
            let write = try box.sh("mkdir \(box.mnt)/genp/bk && printf backed-up > \(box.mnt)/genp/bk/acct")
            #expect(write.status == 0, "write through the mount: \(write.summary)")
            // Through a hard link of the vault: the service is found by the file, and writes the copy.
            let linked = box.root + "/link.vault"
            #expect(Glibc.link(box.vault, linked) == 0)
            let copy = "copy.vault"
            let r = try box.run(
                try requireBinary(), ["backup", "--vault", linked, copy], env: ["KEYCHAINFS_PASSPHRASE_FILE": nil],
                cwd: box.w)
            #expect(r.status == 0 && r.stdout.contains("backed up"), "backup: \(r.summary)")
            var st = stat()
            #expect(
                stat(box.w + "/" + copy, &st) == 0 && st.st_mode & 0o777 == 0o600,
                "mode \(String(st.st_mode, radix: 8))")
            #expect(box.daemonLog.contains("api: backup of"), "the service wrote it: \(box.daemonLog)")

            let verify = try box.cli(["verify", box.w + "/" + copy, "--passphrase-file", box.passphraseFile])
            #expect(verify.status == 0 && verify.stdout.contains("ok"), "verify the copy: \(verify.summary)")
            let find = try box.cli([
                "find-generic-password", "--vault", box.w + "/" + copy, "--passphrase-file", box.passphraseFile,
                "-s", "bk", "-w",
            ])
            #expect(find.stdout == "backed-up\n", "the copy holds the mount's write: \(find.summary)")

            let before = try Data(contentsOf: URL(fileURLWithPath: box.w + "/" + copy))
            let twice = try box.cliWithoutPassphrase(["backup", "--vault", box.vault, box.w + "/" + copy])
            #expect(
                twice.status != 0 && twice.stderr.contains("never overwrites"), "backup onto a file: \(twice.summary)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: box.w + "/" + copy)) == before, "the copy was changed")
            Self.expectNoAlarm(box)
        }
    }

    @Test("with no service the same verbs open the vault themselves, with the passphrase, and fail without it")
    func withoutService() throws {
        try withSandbox { box in
            try Self.makeFiles(box)
            let file = box.w + "/items.csv"
            try "title,account,password\nimpsvc,alice,pw-one\n".write(toFile: file, atomically: true, encoding: .utf8)
            let columns = ["--columns", "title=title,account=account,password=password"]
            #expect(
                try box.cliWithoutPassphrase(["import-csv", "generic", file, "--vault", box.vault] + columns).status
                    != 0, "import-csv without a service or a passphrase")
            let runs: [[String]] = [
                ["import-csv", "generic", file] + columns, ["import", box.w + "/bundle.pem", "-l", "alpha"],
                ["add-certificates", box.w + "/two.pem"], ["create-keypair", "-l", "kp"], ["find-identity"],
                ["find-key", "-l", "kp"], ["dump-keychain"], ["access-group", "add", "team", "/usr/bin/cat"],
                ["access-group", "list"], ["presence", "list"], ["backup", box.w + "/copy.vault"],
            ]
            var outputs: [String: RunResult] = [:]
            for args in runs {
                let argv =
                    args[0] == "access-group" || args[0] == "presence"
                    ? [args[0], args[1]] + box.unlockArgs + Array(args.dropFirst(2)) : args + box.unlockArgs
                let r = try box.cli(argv)
                #expect(r.status == 0, "\(args.joined(separator: " ")): \(r.summary)")
                outputs[args.joined(separator: " ")] = r
            }
            let identities = outputs["find-identity"]?.stdout ?? ""
            #expect(identities.contains("1 identities found"), "find-identity: \(identities)")
            #expect(outputs["access-group list"]?.lines == ["team: /usr/bin/cat"])
            let dump = try box.cli(["dump-keychain", "-d"] + box.unlockArgs)
            #expect(dump.stdout.contains("pw-one") && dump.stdout.contains("Alpha Cert"), "dump: \(dump.summary)")
            let find = try box.cli([
                "find-generic-password", "--vault", box.w + "/copy.vault", "--passphrase-file", box.passphraseFile,
                "-s", "impsvc", "-w",
            ])
            #expect(find.stdout == "pw-one\n", "the direct backup holds the import: \(find.summary)")
        }
    }
}
