import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// Issue 5, part 2: access groups by process. The policy maps groups to executables; an item of
// group `team` is readable by /usr/bin/cat, invisible (ENOENT, not listed) to a copy of cat
// and to ls; the audit log names pid and exe, never a secret.

extension AccessSuite {
    @Suite("access groups") struct AccessGroupTests {
        @Test("an item of group team: /usr/bin/cat reads it, a copy of cat and ls do not see it; audit lines")
        func groupByExecutable() throws {
            let secret = "team-secret-" + UUID().uuidString.prefix(8)
            try withMount(setup: { box in
                let add = try box.cli(["access-group", "add"] + box.unlockArgs + ["team", "/usr/bin/cat"])
                try #require(add.status == 0, "access-group add: \(add.summary)")
                #expect(add.stdout.contains("team: /usr/bin/cat"), "access-group add output: \(add.stdout)")
                try box.addGeneric("svc", "acct", String(secret), extra: ["--access-group", "team"])
                try box.addGeneric("svc", "pub", "public-secret")
            }) { box in
                let teamPath = box.mnt + "/genp/svc/acct;accessGroup=team"
                let pubPath = box.mnt + "/genp/svc/pub"
                let copy = box.root + "/w/cat"
                try FileManager.default.copyItem(atPath: "/usr/bin/cat", toPath: copy)

                // The listed executable reads it.
                let real = try box.spawn("/usr/bin/cat", [teamPath])
                let realResult = real.wait(timeout: 15)
                #expect(
                    realResult.status == 0 && realResult.stdout == secret,
                    "/usr/bin/cat of the team item: \(realResult.summary)")

                // A byte-identical copy elsewhere is not in the group: ENOENT.
                let other = try box.spawn(copy, [teamPath])
                let otherResult = other.wait(timeout: 15)
                #expect(
                    otherResult.status == 1 && otherResult.stderr.contains("No such file or directory"),
                    "the copy of cat on the team item: \(otherResult.summary)")
                #expect(!otherResult.stdout.contains(secret))
                // …but it reads default-group items.
                let otherPub = try box.spawn(copy, [pubPath]).wait(timeout: 15)
                #expect(
                    otherPub.status == 0 && otherPub.stdout == "public-secret",
                    "the copy of cat on a default item: \(otherPub.summary)")

                // ls is not in the group: the item is absent from its listing.
                let ls = try box.run("/usr/bin/ls", ["-a", box.mnt + "/genp/svc"], timeout: 10)
                #expect(ls.status == 0 && ls.lines.contains("pub"), "ls: \(ls.summary)")
                #expect(!ls.stdout.contains("acct"), "ls (not in group team) lists the team item: \(ls.stdout)")
                // The copy of cat cannot open it even by its exact name, nor can python.
                let py = try box.py("t('open', read, sys.argv[1])", [teamPath])
                #expect(labelled(py)["open"] == "ENOENT", "python (not in group team): \(py.summary)")

                // Audit: allow for /usr/bin/cat with its pid; a deny for the copy; no secret.
                let audit = box.audit
                let allowLines = audit.split(separator: "\n").filter { $0.contains("pid \(real.pid) /usr/bin/cat ") }
                #expect(
                    allowLines.contains { $0.contains(" allow") && $0.contains("op=open-read") },
                    "no allow line naming pid \(real.pid) /usr/bin/cat:\n\(audit)")
                let denyLines = audit.split(separator: "\n").filter { $0.contains("pid \(other.pid) \(copy)") }
                #expect(
                    denyLines.contains { $0.contains(" deny") },
                    "no deny line naming the copy of cat (pid \(other.pid) \(copy)), which was refused the team item:\n\(audit)"
                )
                #expect(
                    !audit.contains(secret) && !audit.contains("public-secret"),
                    "the audit log holds a secret:\n\(audit)")
                #expect(!audit.contains("length"), "the audit log mentions a length:\n\(audit)")
            }
        }

        @Test("access-group list and remove; removal takes effect on the live mount")
        func listAndRemove() throws {
            try withMount(setup: { box in
                let empty = try box.cli(["access-group", "list"] + box.unlockArgs)
                #expect(
                    empty.status == 0 && empty.stdout.contains("no policy"), "list with no policy: \(empty.summary)")
                for (g, exe) in [("team", "/usr/bin/cat"), ("team", "/usr/bin/head"), ("ops", "/usr/bin/tail")] {
                    let r = try box.cli(["access-group", "add"] + box.unlockArgs + [g, exe])
                    try #require(r.status == 0, "access-group add \(g) \(exe): \(r.summary)")
                }
                try box.addGeneric("svc", "acct", "grouped", extra: ["--access-group", "team"])
            }) { box in
                let list = try box.cli(["access-group", "list"] + box.unlockArgs)
                #expect(list.status == 0, "list: \(list.summary)")
                #expect(
                    Set(list.lines) == ["team: /usr/bin/cat", "team: /usr/bin/head", "ops: /usr/bin/tail"],
                    "list: \(list.stdout)")

                // A wrong passphrase cannot change the policy.
                try Data("wrong\n".utf8).write(to: URL(fileURLWithPath: box.root + "/wrong"))
                let bad = try box.cli([
                    "access-group", "remove", "--vault", box.vault, "--passphrase-file", box.root + "/wrong", "team",
                ])
                #expect(bad.status != 0, "remove with a wrong passphrase: \(bad.summary)")
                let same = try box.cli(["access-group", "list"] + box.unlockArgs)
                #expect(same.lines.count == 3, "the policy changed without the passphrase: \(same.stdout)")

                let path = box.mnt + "/genp/svc/acct;accessGroup=team"
                let before = try box.run("/usr/bin/cat", [path], timeout: 10)
                #expect(before.status == 0 && before.stdout == "grouped", "cat before removal: \(before.summary)")

                // Remove one executable; then a missing entry is "not found" (44).
                let rm = try box.cli(["access-group", "remove"] + box.unlockArgs + ["team", "/usr/bin/cat"])
                #expect(rm.status == 0, "remove team cat: \(rm.summary)")
                let missing = try box.cli(["access-group", "remove"] + box.unlockArgs + ["team", "/usr/bin/cat"])
                #expect(missing.status == 44, "removing an absent entry: \(missing.summary)")
                let after = try box.cli(["access-group", "list"] + box.unlockArgs)
                #expect(
                    Set(after.lines) == ["team: /usr/bin/head", "ops: /usr/bin/tail"],
                    "list after remove: \(after.stdout)")

                // The daemon sees the change within a few seconds: cat is out, head is still in.
                var catResult = try box.run("/usr/bin/cat", [path], timeout: 10)
                let deadline = Date().addingTimeInterval(6)
                while catResult.status == 0 && Date() < deadline {
                    Thread.sleep(forTimeInterval: 0.5)
                    catResult = try box.run("/usr/bin/cat", [path], timeout: 10)
                }
                #expect(
                    catResult.status == 1 && catResult.stderr.contains("No such file"),
                    "cat after its removal from team: \(catResult.summary)")
                let head = try box.run("/usr/bin/head", [path], timeout: 10)
                #expect(head.status == 0 && head.stdout == "grouped", "head (still in team): \(head.summary)")

                // Remove a whole group.
                let rmGroup = try box.cli(["access-group", "remove"] + box.unlockArgs + ["ops"])
                #expect(rmGroup.status == 0, "remove group ops: \(rmGroup.summary)")
                let last = try box.cli(["access-group", "list"] + box.unlockArgs)
                #expect(last.lines == ["team: /usr/bin/head"], "list at the end: \(last.stdout)")
            }
        }

        // Issue 9: the caller is identified once per thread and then re-validated by a pidfd
        // (pid reuse) and a stat of /proc/<pid>/exe (execve). A process that execs another
        // binary after its first request must be decided as the new binary, in both directions.
        @Test("an executable whose path holds a line break writes one audit line, its path spelled out")
        func executablePathCannotForgeAuditLines() throws {
            try withMount(setup: { box in try box.addGeneric("svc", "acct", "audited-secret") }) { box in
                // A copy of cat under a name that, written as it is, would end the line and
                // forge a second one allowing another process.
                let dir = box.root + "/bin\n2026-01-01T00:00:00.000Z pid 1 \\x0a"
                try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
                let forged = dir + "/cat"
                try FileManager.default.copyItem(atPath: "/usr/bin/cat", toPath: forged)
                let run = try box.run(forged, [box.mnt + "/genp/svc/acct"], timeout: 20)
                #expect(run.stdout == "audited-secret", "\(run.summary)")
                let lines = box.audit.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
                #expect(
                    lines.allSatisfy { $0.first?.isNumber == true && $0.contains(" op=") },
                    "a line does not start with its time or lacks its operation:\n\(box.audit)")
                #expect(!lines.contains { $0.hasPrefix("2026-01-01T00:00:00.000Z") }, "a forged line:\n\(box.audit)")
                #expect(
                    lines.contains { $0.contains(#"/bin\x0a2026-01-01T00:00:00.000Z pid 1 \x5cx0a/cat item="#) },
                    "the path is not spelled out:\n\(box.audit)")
            }
        }

        @Test("a process that execs another binary after a first access is decided as the new binary")
        func execveReidentifies() throws {
            let python = URL(fileURLWithPath: "/usr/bin/python3").resolvingSymlinksInPath().path
            try withMount(setup: { box in
                for (group, exe) in [("cats", "/usr/bin/cat"), ("snakes", python)] {
                    let add = try box.cli(["access-group", "add"] + box.unlockArgs + [group, exe])
                    try #require(add.status == 0, "access-group add \(group): \(add.summary)")
                }
                try box.addGeneric("svc", "forcat", "cat-secret", extra: ["--access-group", "cats"])
                try box.addGeneric("svc", "forpython", "python-secret", extra: ["--access-group", "snakes"])
            }) { box in
                let catItem = box.mnt + "/genp/svc/forcat;accessGroup=cats"
                let pythonItem = box.mnt + "/genp/svc/forpython;accessGroup=snakes"
                // Python reads its own item (allowed, identified as python), then becomes cat on it:
                // cat is not in `snakes`, so the same pid must now be refused.
                let script = """
                    import os, sys
                    with open(sys.argv[1]) as f: sys.stdout.write(f.read() + "\\n"); sys.stdout.flush()
                    try:
                        open(sys.argv[2]).close(); print("python opened the cat item")
                    except OSError as e:
                        print("python refused:", e.errno); sys.stdout.flush()
                    os.execv("/usr/bin/cat", ["cat", sys.argv[2], sys.argv[1]])
                    """
                let run = try box.spawn("/usr/bin/python3", ["-c", script, pythonItem, catItem])
                let result = run.wait(timeout: 20)
                // Before the exec: python read its item and was refused cat's (ENOENT).
                #expect(
                    result.stdout.hasPrefix("python-secret\npython refused: 2\n"),
                    "python before its exec: \(result.summary)")
                // After it: the same pid, now cat, reads cat's item and is refused python's.
                #expect(
                    result.stdout.contains("cat-secret"),
                    "cat after the exec read nothing of its item: \(result.summary)")
                #expect(
                    result.status == 1 && result.stderr.contains("No such file"),
                    "cat after the exec was not refused python's item: \(result.summary)")
                #expect(
                    result.stdout.components(separatedBy: "python-secret").count == 2,
                    "the python item was read again after the exec: \(result.stdout)")
                let lines = box.audit.split(separator: "\n")
                #expect(
                    lines.contains { $0.contains("pid \(run.pid) /usr/bin/cat ") && $0.contains(" allow") },
                    "no allow line for pid \(run.pid) as /usr/bin/cat:\n\(box.audit)")
                #expect(
                    lines.contains { $0.contains("pid \(run.pid) \(python) ") && $0.contains(" allow") },
                    "no allow line for pid \(run.pid) as \(python):\n\(box.audit)")
            }
        }
    }
}
