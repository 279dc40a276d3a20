import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// Issue 5, part 1: lock state. `keychainfs lock|unlock|status MOUNTPOINT`, `-o lock_after`,
// `-o locked`; while locked WhenUnlocked data is EACCES at once, AfterFirstUnlock data stays
// readable, listing and xattrs keep working.

/// "2026-11-23T07:46:30Z" somewhere in the text, as a Date.
func isoDate(in text: String) -> Date? {
    guard let range = text.range(of: #"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"#, options: .regularExpression) else {
        return nil
    }
    let f = ISO8601DateFormatter()
    return f.date(from: String(text[range]))
}

extension AccessSuite {
    @Suite("lock state") struct LockTests {
        @Test("lock, status, reads while locked, wrong and right unlock")
        func lockUnlockStatus() throws {
            try withMount(setup: { box in
                try box.addGeneric("wu", "alice", "when-unlocked-secret")
                try box.addGeneric(
                    "afu", "bob", "after-first-unlock-secret", extra: ["--accessible", "afterFirstUnlock"])
            }) { box in
                let wu = box.mnt + "/genp/wu/alice", afu = box.mnt + "/genp/afu/bob"
                let mountedAt = Date()

                // Unlocked since the mount.
                let s0 = try box.cli(["status", box.mnt])
                #expect(s0.status == 0, "status: \(s0.summary)")
                #expect(s0.stdout.contains("unlocked since"), "status while unlocked: \(s0.stdout)")
                if let since = isoDate(in: s0.stdout) {
                    #expect(
                        abs(since.timeIntervalSince(mountedAt)) < 120,
                        "unlocked since \(since), mounted at \(mountedAt)")
                } else {
                    Issue.record("status gives no ISO 8601 time: \(s0.stdout)")
                }
                let before = try box.reader(["read:" + wu, "read:" + afu])
                #expect(before.results.map(\.outcome) == ["OK", "OK"], "reads before lock: \(before.summary)")
                #expect(before.results.first?.secret == "when-unlocked-secret")

                // Lock.
                let lockedAt = Date()
                let l = try box.cli(["lock", box.mnt])
                #expect(l.status == 0, "lock: \(l.summary)")
                #expect(l.stdout.contains("locked since") && !l.stdout.contains("unlocked"), "lock output: \(l.stdout)")
                let s1 = try box.cli(["status", box.mnt])
                #expect(
                    s1.status == 0 && s1.stdout.contains("locked since") && !s1.stdout.contains("unlocked"),
                    "status when locked: \(s1.summary)")
                if let since = isoDate(in: s1.stdout) {
                    #expect(
                        since.timeIntervalSince(lockedAt) > -2 && since.timeIntervalSince(lockedAt) < 60,
                        "locked since \(since), locked at \(lockedAt)")
                } else {
                    Issue.record("status gives no ISO 8601 time when locked: \(s1.stdout)")
                }

                // While locked: WhenUnlocked data EACCES at once; AfterFirstUnlock readable.
                let locked = try box.reader(["read:" + wu, "read:" + afu])
                let results = locked.results
                #expect(results.count == 2, "reader: \(locked.summary)")
                if results.count == 2 {
                    #expect(results[0].outcome == "EACCES", "WhenUnlocked item while locked: \(results[0])")
                    #expect(
                        results[0].seconds < 2,
                        "the locked read took \(results[0].seconds) s: it must not wait for an unlock")
                    #expect(
                        results[1].outcome == "OK" && results[1].secret == "after-first-unlock-secret",
                        "AfterFirstUnlock item while locked: \(results[1])")
                }
                // cat says so too.
                let cat = try box.run("/usr/bin/cat", [wu], timeout: 10)
                #expect(cat.status == 1 && cat.stderr.contains("Permission denied"), "cat while locked: \(cat.summary)")

                // Listing and xattrs keep working.
                let ls = try box.run("/usr/bin/ls", [box.mnt + "/genp", box.mnt + "/genp/wu"], timeout: 10)
                #expect(
                    ls.status == 0 && ls.stdout.contains("wu") && ls.stdout.contains("afu")
                        && ls.stdout.contains("alice"),
                    "ls while locked: \(ls.summary)")
                let gf = try box.run("/usr/bin/getfattr", ["-d", wu], timeout: 10)
                #expect(
                    gf.status == 0 && gf.stdout.contains("user.keychain.service=\"wu\"")
                        && gf.stdout.contains("user.keychain.account=\"alice\""),
                    "getfattr while locked: \(gf.summary)")
                let st = try box.run("/usr/bin/stat", ["-c", "%s", wu], timeout: 10)
                #expect(
                    st.status == 0
                        && st.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
                            == "\("when-unlocked-secret".utf8.count)",
                    "stat while locked: \(st.summary)")

                // A wrong passphrase: exit 51 (errSecAuthFailed, the daemon's reply), still locked.
                try Data("not-the-passphrase\n".utf8).write(to: URL(fileURLWithPath: box.root + "/wrong"))
                let bad = try box.cli(["unlock", box.mnt, "--passphrase-file", box.root + "/wrong"])
                #expect(bad.status == 51, "unlock with a wrong passphrase: \(bad.summary)")
                #expect(
                    !bad.stderr.contains("not-the-passphrase") && !bad.stdout.contains("not-the-passphrase"),
                    "the passphrase was echoed")
                let s2 = try box.cli(["status", box.mnt])
                #expect(
                    s2.stdout.contains("locked since") && !s2.stdout.contains("unlocked"),
                    "status after a failed unlock: \(s2.summary)")
                let stillLocked = try box.reader(["read:" + wu])
                #expect(stillLocked.results.first?.outcome == "EACCES", "after a failed unlock: \(stillLocked.summary)")

                // The right passphrase restores.
                let good = try box.cli(["unlock", box.mnt, "--passphrase-file", box.passphraseFile])
                #expect(good.status == 0 && good.stdout.contains("unlocked since"), "unlock: \(good.summary)")
                let s3 = try box.cli(["status", box.mnt])
                #expect(s3.stdout.contains("unlocked since"), "status after unlock: \(s3.summary)")
                let after = try box.reader(["read:" + wu])
                #expect(
                    after.results.first?.outcome == "OK" && after.results.first?.secret == "when-unlocked-secret",
                    "read after unlock: \(after.summary)")

                // Audit: the denied and allowed opens are there with pid and exe, the secrets never.
                let audit = box.audit
                if let pid = locked.pid {
                    let lines = audit.split(separator: "\n").filter { $0.contains("pid \(pid) ") }
                    #expect(
                        lines.contains { $0.contains(" deny") && $0.contains("python3") },
                        "no deny line for the locked read of pid \(pid):\n\(audit)")
                    #expect(
                        lines.contains { $0.contains(" allow") },
                        "no allow line for pid \(pid)'s AfterFirstUnlock read:\n\(audit)")
                }
                for secret in ["when-unlocked-secret", "after-first-unlock-secret", box.passphrase] {
                    #expect(!audit.contains(secret), "the audit log holds a secret")
                    #expect(!box.daemonLog.contains(secret), "the daemon log holds a secret")
                }
                let log = try box.cli(["log"])
                #expect(
                    log.status == 0 && log.stdout.contains(" deny") && log.stdout.contains(" allow"),
                    "keychainfs log: \(log.summary)")
            }
        }

        @Test("a lock stops descriptors opened before it: the next read of a WhenUnlocked item is EACCES")
        func lockRevokesOpenHandles() throws {
            try withMount(setup: { box in
                try box.addGeneric("wu", "alice", "when-unlocked-secret")
                try box.addGeneric(
                    "afu", "bob", "after-first-unlock-secret", extra: ["--accessible", "afterFirstUnlock"])
            }) { box in
                let go = box.root + "/go"
                let reader = try box.spawn(
                    "/usr/bin/python3",
                    [
                        "-c",
                        pythonPrelude + """
                            wu = os.open(sys.argv[1], os.O_RDONLY)
                            afu = os.open(sys.argv[2], os.O_RDONLY)
                            print('before', os.pread(wu, 100, 0).decode(), flush=True)
                            for _ in range(1000):
                                if os.path.exists(sys.argv[3]): break
                                time.sleep(0.01)
                            t('wu', os.pread, wu, 100, 0)
                            t('afu', os.pread, afu, 100, 0)
                            """, box.mnt + "/genp/wu/alice", box.mnt + "/genp/afu/bob", go,
                    ])
                #expect(waitUntil(10) { reader.stdoutSoFar.contains("before") }, "reader not started")
                let l = try box.cli(["lock", box.mnt])
                #expect(l.status == 0, "lock: \(l.summary)")
                FileManager.default.createFile(atPath: go, contents: nil)
                let r = reader.wait(timeout: 20)
                #expect(r.lines.contains("before when-unlocked-secret"), "\(r.summary)")
                #expect(r.lines.contains("wu EACCES"), "an fd opened before the lock still reads: \(r.summary)")
                #expect(
                    r.lines.contains(
                        "afu OK " + "after-first-unlock-secret".utf8.map { String(format: "%02x", $0) }.joined()),
                    "an AfterFirstUnlock fd stopped reading: \(r.summary)")
            }
        }

        @Test("-o lock_after=2 locks after idle, not while in use")
        func autoLock() throws {
            try withMount(
                options: ["lock_after=2"],
                setup: { box in
                    try box.addGeneric("wu", "alice", "idle-secret")
                    try box.addGeneric("afu", "bob", "afu-secret", extra: ["--accessible", "afterFirstUnlock"])
                }
            ) { box in
                let wu = box.mnt + "/genp/wu/alice", afu = box.mnt + "/genp/afu/bob"
                // Busy: a read of the AfterFirstUnlock item every 0.4 s for 4 s keeps it unlocked.
                var busy = ["read:" + wu]
                for _ in 0..<10 { busy += ["sleep:0.4", "read:" + afu] }
                busy.append("read:" + wu)
                let r = try box.reader(busy)
                #expect(
                    r.results.first?.outcome == "OK" && r.results.last?.outcome == "OK",
                    "the keychain locked while it was in use (lock_after=2, a read every 0.4 s): \(r.summary)")

                // Idle for 5 s: locked.
                Thread.sleep(forTimeInterval: 5)
                let s = try box.cli(["status", box.mnt])
                #expect(
                    s.stdout.contains("locked since") && !s.stdout.contains("unlocked"),
                    "status after 5 s idle: \(s.summary)")
                let idle = try box.reader(["read:" + wu, "read:" + afu])
                #expect(idle.results.map(\.outcome) == ["EACCES", "OK"], "reads after the idle lock: \(idle.summary)")

                // Unlocking works again, and is not undone at once.
                let u = try box.cli(["unlock", box.mnt, "--passphrase-file", box.passphraseFile])
                #expect(u.status == 0, "unlock: \(u.summary)")
                let again = try box.reader(["read:" + wu])
                #expect(again.results.first?.outcome == "OK", "read after unlock: \(again.summary)")
            }
        }

        @Test("-o locked: nothing readable, not even a listing, before the first unlock")
        func mountedLocked() throws {
            try withMount(
                options: ["locked"],
                setup: { box in
                    try box.addGeneric("wu", "alice", "wu-secret")
                    try box.addGeneric("afu", "bob", "afu-secret", extra: ["--accessible", "afterFirstUnlock"])
                }
            ) { box in
                let s = try box.cli(["status", box.mnt])
                #expect(
                    s.status == 0 && s.stdout.contains(box.mnt + ": locked"), "status of a locked mount: \(s.summary)")

                let r = try box.py(
                    """
                    t('lsgenp', lambda: sorted(os.listdir(sys.argv[1] + '/genp')))
                    t('afu', read, sys.argv[1] + '/genp/afu/bob')
                    t('wu', read, sys.argv[1] + '/genp/wu/alice')
                    """, [box.mnt])
                let out = labelled(r)
                #expect(out["lsgenp"] == "EACCES", "ls /genp before the first unlock: \(r.summary)")
                #expect(
                    out["afu"] == "EACCES" || out["afu"] == "ENOENT",
                    "AfterFirstUnlock read before the first unlock: \(r.summary)")
                #expect(
                    out["wu"] == "EACCES" || out["wu"] == "ENOENT",
                    "WhenUnlocked read before the first unlock: \(r.summary)")
                #expect(!r.stdout.contains("secret"), "a secret was readable before the first unlock")

                let u = try box.cli(["unlock", box.mnt, "--passphrase-file", box.passphraseFile])
                #expect(u.status == 0 && u.stdout.contains("unlocked since"), "unlock: \(u.summary)")
                let after = try box.reader(["read:" + box.mnt + "/genp/wu/alice", "read:" + box.mnt + "/genp/afu/bob"])
                #expect(after.results.map(\.outcome) == ["OK", "OK"], "reads after the first unlock: \(after.summary)")
                let ls = try box.run("/usr/bin/ls", [box.mnt + "/genp"], timeout: 10)
                #expect(ls.status == 0 && ls.lines.sorted() == ["afu", "wu"], "ls after unlock: \(ls.summary)")
            }
        }
    }
}
