import Foundation
import Testing

// Backup while the mount is written to, and a damaged row met while mounted.

@Suite("Integrity while mounted")
struct IntegrityMountTests {
    /// Writes `count` items through the mount, one file each, and appends a line to the
    /// acknowledgement file after each close(2) returned (close flushes: the item is committed).
    static let writerLoop = """
        import sys
        directory, acks, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
        with open(acks, 'a') as log:
            for i in range(count):
                with open(f'{directory}/acct{i}', 'w') as f:
                    f.write(f'secret-{i}')
                log.write(f'{i}\\n')
                log.flush()
        """

    static func acknowledged(_ path: String) -> Int {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").count
    }

    @Test("backup while a writer loop writes through the mount: every write acknowledged before it is in the copy")
    func backupWhileWriting() throws {
        try withMount { box in
            let mkdir = try box.sh("mkdir '\(box.mnt)/genp/loop'")
            try #require(mkdir.status == 0, "mkdir: \(mkdir.summary)")
            let acks = box.w + "/acks"
            let writer = try box.spawn(
                "/usr/bin/python3", ["-c", Self.writerLoop, box.mnt + "/genp/loop", acks, "400"])
            #expect(waitUntil(30) { Self.acknowledged(acks) >= 25 }, "the writer loop did not get going")
            let before = Self.acknowledged(acks)
            let backup = box.root + "/backup.vault"
            let r = try box.cli(["backup", "--vault", box.vault, backup], timeout: 60)
            #expect(r.status == 0, "backup: \(r.summary)")
            #expect(r.stdout.contains("backed up"))
            let finished = writer.wait(timeout: 120)
            #expect(finished.status == 0, "writer: \(finished.summary)")
            var st = stat()
            #expect(stat(backup, &st) == 0 && st.st_mode & 0o777 == 0o600)

            // Read the copy as another machine would (no rollback mark there for this vault).
            let elsewhere = ["XDG_STATE_HOME": box.root + "/elsewhere"]
            let bin = try #require(keychainfsBinary)
            let dump = try box.run(
                bin, ["dump-keychain", "--json", "--vault", backup, "--passphrase-file", box.passphraseFile],
                env: elsewhere)
            try #require(dump.status == 0, "dump of the backup: \(dump.summary)")
            let items = try #require(try JSONSerialization.jsonObject(with: Data(dump.stdoutBytes)) as? [[String: Any]])
            let accounts = Set(items.compactMap { ($0["attributes"] as? [String: Any])?["account"] as? String })
            let missing = (0..<before).filter { !accounts.contains("acct\($0)") }
            #expect(missing.isEmpty, "acknowledged before the backup but not in it: \(missing)")
            let verify = try box.run(
                bin, ["verify", backup, "--passphrase-file", box.passphraseFile], env: elsewhere, timeout: 60)
            #expect(verify.status == 0, "verify of the backup: \(verify.summary)")
            #expect(verify.stdout.hasSuffix("ok\n"))
        }
    }

    @Test(
        "a row damaged while mounted: its name still lists (from the sealed name list), reading it fails EIO with a log line; the others read"
    )
    func damagedRowSkipped() throws {
        try withMount { box in
            try box.addGeneric("svc", "good", "good secret")
            try box.addGeneric("svc", "bad", "bad secret")
            // Damage the second row's attribute box behind the daemon's back.
            let tamper = try box.py(
                """
                import sqlite3, sys
                db = sqlite3.connect(sys.argv[1])
                db.execute("UPDATE items SET attrs = x'00' || attrs WHERE id = (SELECT max(id) FROM items)")
                db.commit()
                """, [box.vault])
            try #require(tamper.status == 0, "tamper: \(tamper.summary)")
            // The listing comes from the directory's name list (vault format 5), which is intact
            // and covered by the manifest: both names are there. The damaged row is found where
            // its attributes are opened: a read of it.
            let listing = try box.sh("ls '\(box.mnt)/genp/svc'")
            #expect(listing.status == 0, "ls: \(listing.summary)")
            #expect(listing.stdout == "bad\ngood\n")
            let bad = try box.sh("cat '\(box.mnt)/genp/svc/bad'")
            #expect(bad.status != 0 && bad.stdout.isEmpty, "cat bad: \(bad.summary)")
            #expect(try box.sh("cat '\(box.mnt)/genp/svc/good'").stdout == "good secret")
            #expect(box.daemonLog.contains("item 2"), "log: \(box.daemonLog.suffix(800))")
            #expect(!box.daemonLog.contains("bad secret"))
        }
    }

    @Test(
        "an item read before its attribute box was damaged is not served from what the daemon kept: the next cat fails EIO"
    )
    func damagedAfterReadIsNotReused() throws {
        try withMount { box in
            try box.addGeneric("svc", "acct", "the secret")
            let path = "\(box.mnt)/genp/svc/acct"
            // Read twice: the daemon now holds the row's attributes as opened (RecentRows).
            #expect(try box.sh("cat '\(path)'").stdout == "the secret")
            #expect(try box.sh("cat '\(path)'").stdout == "the secret")
            // One byte of the sealed attributes changed, same length, behind the daemon's back.
            let tamper = try box.py(
                """
                import sqlite3, sys
                db = sqlite3.connect(sys.argv[1])
                (blob,) = db.execute("SELECT attrs FROM items WHERE id = (SELECT max(id) FROM items)").fetchone()
                blob = bytearray(blob)
                blob[len(blob) // 2] ^= 0x01
                db.execute("UPDATE items SET attrs = ? WHERE id = (SELECT max(id) FROM items)", (bytes(blob),))
                db.commit()
                """, [box.vault])
            try #require(tamper.status == 0, "tamper: \(tamper.summary)")
            let cat = try box.sh("cat '\(path)'")
            #expect(cat.status != 0, "cat served a damaged item: \(cat.summary)")
            #expect(cat.stdout.isEmpty)
            #expect(cat.stderr.contains("Input/output error"), "cat: \(cat.summary)")
        }
    }

    @Test(
        "with every open looking its name up (-o cache=0), a name looked up before its attribute box was damaged is not answered from what the lookup kept: stat and cat fail EIO"
    )
    func damagedAfterLookupIsNotReused() throws {
        try withMount(
            options: ["cache=0"],
            setup: {
                try $0.addGeneric("svc", "acct", "the secret")
                try $0.addGeneric("svc", "other", "other secret")
            }
        ) { box in
            let path = "\(box.mnt)/genp/svc/acct"
            // Each cat looks the name up (LOOKUP by name, then OPEN by id): the daemon keeps the
            // attributes the lookup opened and the open reuses them (RecentRows).
            for _ in 0..<3 { #expect(try box.sh("cat '\(path)'").stdout == "the secret") }
            let found = try box.py("import os, sys; os.close(os.open(sys.argv[1], os.O_PATH)); print('found')", [path])
            #expect(found.stdout == "found\n", "lookup: \(found.summary)")
            let tamper = try box.py(
                """
                import sqlite3, sys
                db = sqlite3.connect(sys.argv[1])
                (id, blob) = db.execute("SELECT id, attrs FROM items WHERE id = (SELECT min(id) FROM items)").fetchone()
                blob = bytearray(blob)
                blob[len(blob) // 2] ^= 0x01
                db.execute("UPDATE items SET attrs = ? WHERE id = ?", (bytes(blob), id))
                db.commit()
                """, [box.vault])
            try #require(tamper.status == 0, "tamper: \(tamper.summary)")
            // An O_PATH open is the lookup alone (no GETATTR, no OPEN): only the lookup's own
            // query can refuse it, so it fails only if that query compares the box it read.
            let lookupOnly = try box.py(
                """
                import errno, os, sys
                try:
                    os.close(os.open(sys.argv[1], os.O_PATH))
                    print("found")
                except OSError as e:
                    print(errno.errorcode[e.errno])
                """, [path])
            #expect(lookupOnly.stdout == "EIO\n", "lookup of the damaged item: \(lookupOnly.summary)")
            let stat = try box.sh("stat -c %s '\(path)'")
            #expect(stat.status != 0 && stat.stderr.contains("Input/output error"), "stat: \(stat.summary)")
            let cat = try box.sh("cat '\(path)'")
            #expect(cat.status != 0 && cat.stdout.isEmpty, "cat served a damaged item: \(cat.summary)")
            #expect(!box.daemonLog.contains("the secret"))
        }
    }
}
