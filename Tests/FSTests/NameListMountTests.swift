import Foundation
import Testing

// Directory listings made from the sealed name lists (vault format 5), through a real mount:
// they follow every write (through the mount and from another process, the CLI) at once, each
// access group lists its own items only, and a name-list chunk tampered with in the file fails
// the listing (EIO) while reads of items go on, and `keychainfs verify` reports it; a list's
// bucket tampered with (format 6: checked at the first listing, not at the mount's unlock) fails
// every listing, then every read once the background pass finds it.

@Suite("name lists through the mount (vault format 5)")
struct NameListMountTests {
    /// The names `svc`'s directory should hold for a process in `groups`, from the CLI's dump.
    static func expectedNames(_ box: TestSandbox, service: String, groups: Set<String>) throws -> [String] {
        try box.dump().filter { $0.itemClass == "genp" && $0.attributes["service"] == service }
            .filter { groups.contains($0.attributes["accessGroup"] ?? "default") }
            .map { item in
                let group = item.attributes["accessGroup"] ?? "default"
                return (item.attributes["account"] ?? "") + (group == "default" ? "" : ";accessGroup=\(group)")
            }
            .sorted()
    }

    static func ls(_ box: TestSandbox, _ path: String, as binary: String = "/usr/bin/ls") throws -> RunResult {
        try box.run(binary, ["-1", path], env: ["LC_ALL": "C"], timeout: 30)
    }

    @Test(
        "adds, deletes, renames (mv) and access-group changes, through the mount and the CLI: the listing equals the items at once"
    )
    func listingFollowsWrites() throws {
        try withMount(setup: { box in
            let python = URL(fileURLWithPath: "/usr/bin/python3").resolvingSymlinksInPath().path
            for exe in ["/usr/bin/ls", python, "/usr/bin/mv"] {
                let r = try box.cli(["access-group", "add"] + box.unlockArgs + ["team", exe])
                try #require(r.status == 0, "access-group add: \(r.summary)")
            }
            for i in 1...6 { try box.addGeneric("svc", "a\(i)", "secret \(i)") }
            try box.addGeneric("svc", "t1", "team secret", extra: ["--access-group", "team"])
        }) { box in
            let svc = box.mnt + "/genp/svc"
            let both: Set<String> = ["default", "team"]
            var ls = try Self.ls(box, svc)
            #expect(ls.lines == (try Self.expectedNames(box, service: "svc", groups: both)), "first listing")
            #expect(ls.lines.count == 7)

            // Through the mount: create, unlink, rename within and across services, a group change.
            let ops = try box.py(
                """
                import os, sys
                d = sys.argv[1]
                def create():
                    with open(d + '/m1', 'w') as f:
                        f.write('made here')
                t('create', create)
                t('unlink', os.unlink, d + '/a2')
                t('rename', os.rename, d + '/a3', d + '/r3')
                os.makedirs(d + '/../other', exist_ok=True)
                t('move', os.rename, d + '/a4', d + '/../other/a4')
                t('group', os.setxattr, d + '/a5', 'user.keychain.accessGroup', b'team')
                """, [svc])
            #expect(
                labelled(ops) == ["create": "OK", "unlink": "OK", "rename": "OK", "move": "OK", "group": "OK"],
                "mount writes: \(ops.summary)")
            ls = try Self.ls(box, svc)
            #expect(ls.lines == (try Self.expectedNames(box, service: "svc", groups: both)), "after mount writes")
            #expect(ls.lines == ["a1", "a5;accessGroup=team", "a6", "m1", "r3", "t1;accessGroup=team"])
            #expect(try Self.ls(box, box.mnt + "/genp/other").lines == ["a4"])

            // From another process (the CLI, on the same vault): an add, a delete; no wait.
            try box.addGeneric("svc", "c1", "cli secret")
            try box.addGeneric("svc", "c2", "cli team secret", extra: ["--access-group", "team"])
            let delete = try box.cli(["delete-generic-password"] + box.unlockArgs + ["-s", "svc", "-a", "a1"])
            #expect(delete.status == 0, "delete: \(delete.summary)")
            ls = try Self.ls(box, svc)
            #expect(ls.lines == (try Self.expectedNames(box, service: "svc", groups: both)), "after CLI writes")
            #expect(ls.lines.contains("c1") && ls.lines.contains("c2;accessGroup=team") && !ls.lines.contains("a1"))
            // A rewrite of a secret changes no name: the listing is the same, the new size shows.
            try "a much longer secret".write(toFile: svc + "/a6", atomically: false, encoding: .utf8)
            #expect(try Self.ls(box, svc).lines == ls.lines)
            let size = try box.sh("stat -c %s '\(svc)/a6'")
            #expect(size.stdout == "20\n", "size after the rewrite: \(size.summary)")
        }
    }

    @Test("two access groups: each lister sees the default items and its own group's, never the other's")
    func groupsListTheirOwn() throws {
        try withMount(setup: { box in
            for (group, exe) in [("team", "/usr/bin/ls"), ("ops", "/usr/bin/find")] {
                let r = try box.cli(["access-group", "add"] + box.unlockArgs + [group, exe])
                try #require(r.status == 0, "access-group add: \(r.summary)")
            }
            try box.addGeneric("svc", "d", "default secret")
            try box.addGeneric("svc", "t", "team secret", extra: ["--access-group", "team"])
            try box.addGeneric("svc", "o", "ops secret", extra: ["--access-group", "ops"])
        }) { box in
            let svc = box.mnt + "/genp/svc"
            #expect(try Self.ls(box, svc).lines == ["d", "t;accessGroup=team"])
            let find = try box.run("/usr/bin/find", [svc, "-mindepth", "1", "-printf", "%f\n"], timeout: 30)
            #expect(find.lines.sorted() == ["d", "o;accessGroup=ops"], "find (ops): \(find.summary)")
            // `dir` (in no group) sees the default item only.
            #expect(try Self.ls(box, svc, as: "/usr/bin/dir").lines == ["d"])
        }
    }

    @Test("a 1,000-entry directory: right at once after an add and a delete by the CLI (another process)")
    func largeDirectoryAfterAnotherProcess() throws {
        try withMount(setup: { box in
            try box.importGeneric((0..<1_000).map { ("big", "acct\(String(format: "%04d", $0))", "secret-\($0)") })
        }) { box in
            let big = box.mnt + "/genp/big"
            let first = try Self.ls(box, big)
            #expect(first.lines == (0..<1_000).map { "acct" + String(format: "%04d", $0) })
            try box.addGeneric("big", "acct9999", "new")
            let delete = try box.cli(["delete-generic-password"] + box.unlockArgs + ["-s", "big", "-a", "acct0500"])
            #expect(delete.status == 0, "delete: \(delete.summary)")
            let after = try Self.ls(box, big)
            #expect(after.lines.count == 1_000)
            #expect(after.lines.contains("acct9999") && !after.lines.contains("acct0500"))
            #expect(try box.sh("cat '\(big)/acct9999'").stdout == "new")
        }
    }

    /// Tampering with the name_chunk table in the file, by sqlite3 (python's), while mounted.
    static let tamperings: [(name: String, script: String)] = [
        (
            "flip a byte",
            """
            sidx, chunk, sealed = db.execute("SELECT sidx, chunk, sealed FROM name_chunk ORDER BY chunk LIMIT 1").fetchone()
            sealed = bytearray(sealed); sealed[len(sealed) // 2] ^= 1
            db.execute("UPDATE name_chunk SET sealed = ? WHERE sidx = ? AND chunk = ?", (bytes(sealed), sidx, chunk))
            """
        ),
        ("delete a chunk", "db.execute(\"DELETE FROM name_chunk WHERE chunk = (SELECT max(chunk) FROM name_chunk)\")"),
        (
            "swap two chunks",
            """
            rows = db.execute("SELECT sidx, chunk, sealed FROM name_chunk WHERE length(sealed) > 1000 ORDER BY chunk LIMIT 2").fetchall()
            db.execute("UPDATE name_chunk SET sealed = ? WHERE sidx = ? AND chunk = ?", (rows[1][2], rows[0][0], rows[0][1]))
            db.execute("UPDATE name_chunk SET sealed = ? WHERE sidx = ? AND chunk = ?", (rows[0][2], rows[1][0], rows[1][1]))
            """
        ),
        (
            "replay an old chunk",
            "db.execute(\"UPDATE name_chunk SET sealed = (SELECT sealed FROM saved) WHERE chunk = (SELECT chunk FROM saved)\")"
        ),
    ]

    @Test(
        "a name-list chunk flipped, deleted, swapped or replayed in the file: the listing fails EIO, items still read, verify reports it"
    )
    func tamperedChunkFailsTheListing() throws {
        for (name, script) in Self.tamperings {
            try withMount(
                "tamper-\(name.split(separator: " ").last!)",
                setup: { box in try box.importGeneric((0..<1_000).map { ("big", "acct\($0)", "secret-\($0)") }) }
            ) { box in
                let big = box.mnt + "/genp/big"
                #expect(try Self.ls(box, big).lines.count == 1_000)
                // For the replay: the last chunk as it is now, then an add that re-seals it.
                let save = try box.py(
                    """
                    import sqlite3, sys
                    db = sqlite3.connect(sys.argv[1])
                    db.execute("CREATE TABLE saved AS SELECT chunk, sealed FROM name_chunk WHERE chunk = (SELECT max(chunk) FROM name_chunk)")
                    db.commit()
                    """, [box.vault])
                try #require(save.status == 0, "save: \(save.summary)")
                try box.addGeneric("big", "zz-new", "new secret")
                #expect(try Self.ls(box, big).lines.count == 1_001)
                let tamper = try box.py(
                    "import sqlite3, sys\ndb = sqlite3.connect(sys.argv[1])\n" + script + "\ndb.commit()\n", [box.vault]
                )
                try #require(tamper.status == 0, "\(name): \(tamper.summary)")
                let ls = try Self.ls(box, big)
                #expect(ls.status != 0 && ls.stderr.contains("Input/output error"), "\(name): ls \(ls.summary)")
                #expect(
                    box.daemonLog.contains("the name list of directory bucket"), "\(name): \(box.daemonLog.suffix(600))"
                )
                #expect(!box.daemonLog.contains("acct1"), "\(name): the log names no item")
                // Reading an item by its name still works.
                #expect(try box.sh("cat '\(big)/acct7'").stdout == "secret-7", "\(name): cat")
                let verify = try box.cli(["verify"] + box.unlockArgs)
                #expect(verify.status != 0, "\(name): verify \(verify.summary)")
            }
        }
    }

    @Test(
        "a list's bucket altered in the file before the mount (format 6): the mount goes live, every listing fails EIO, then the background pass fails every read"
    )
    func tamperedListBucket() throws {
        try withMount(
            "tamper-bucket",
            setup: { box in
                try box.importGeneric((0..<1_000).map { ("big", "acct\($0)", "secret-\($0)") })
                let tamper = try box.py(
                    "import sqlite3, sys\ndb = sqlite3.connect(sys.argv[1])\n"
                        + "db.execute(\"UPDATE name_bucket SET count = count + 1\")\ndb.commit()\n", [box.vault])
                try #require(tamper.status == 0, "tamper: \(tamper.summary)")
            }
        ) { box in
            let ls = try Self.ls(box, box.mnt + "/genp/big")
            #expect(ls.status != 0 && ls.stderr.contains("Input/output error"), "ls \(ls.summary)")
            for _ in 0..<100 where !box.daemonLog.contains("every read of this vault now fails") { usleep(100_000) }
            #expect(
                box.daemonLog.contains("the name lists' bucket table does not match"), "\(box.daemonLog.suffix(600))")
            #expect(box.daemonLog.contains("every read of this vault now fails"), "\(box.daemonLog.suffix(600))")
            let cat = try box.sh("cat '\(box.mnt)/genp/big/acct7'")
            #expect(cat.status != 0 && !cat.stdout.contains("secret-7"), "cat \(cat.summary)")
        }
    }

    @Test(
        "a listing after a change elsewhere takes the unchanged chunks from the last one; after changes in the directory it follows them"
    )
    func listingAfterChanges() throws {
        try withMount(
            "kept-chunks",
            setup: { box in
                try box.importGeneric(
                    (0..<1_500).map { ("many", "acct\($0)", "secret-\($0)") } + [("else", "e0", "secret-e")])
            }
        ) { box in
            let many = box.mnt + "/genp/many"
            var names = Set((0..<1_500).map { "acct\($0)" })
            #expect(Set(try Self.ls(box, many).lines) == names, "first listing")
            // A change elsewhere: every chunk of `many` is kept, the listing is the same.
            try "changed".write(toFile: box.mnt + "/genp/else/e0", atomically: false, encoding: .utf8)
            try box.addGeneric("else", "e1", "secret-e1")
            #expect(Set(try Self.ls(box, many).lines) == names, "after a change elsewhere")
            // Changes in the directory: a rename in the middle, an unlink near the start, a create
            // (the end), an add from the CLI; then a change elsewhere again.
            let ops = try box.py(
                """
                import os, sys
                d = sys.argv[1]
                t('rename', os.rename, d + '/acct700', d + '/renamed700')
                t('unlink', os.unlink, d + '/acct3')
                def create():
                    with open(d + '/zz-new', 'w') as f:
                        f.write('made here')
                t('create', create)
                """, [many])
            #expect(labelled(ops) == ["rename": "OK", "unlink": "OK", "create": "OK"], "\(ops.summary)")
            try box.addGeneric("many", "cli-added", "secret-c")
            names.subtract(["acct700", "acct3"])
            names.formUnion(["renamed700", "zz-new", "cli-added"])
            #expect(Set(try Self.ls(box, many).lines) == names, "after changes in the directory")
            try box.addGeneric("else", "e2", "secret-e2")
            let ls = try Self.ls(box, many)
            #expect(Set(ls.lines) == names && ls.lines.count == names.count, "after another change elsewhere")
            #expect(try box.sh("cat '\(many)/renamed700'").stdout == "secret-700")
        }
    }

    @Test(
        "the first listing of a fresh daemon (several chunks, warmed at mount): every name, byte for byte, to another process"
    )
    func firstListingAfterMount() throws {
        // Accounts the listing spells from their stored bytes (plain, NFC and NFD, longer than a
        // small string) and accounts PathCodec spells (a leading dot, kept; `%`, `;` and a
        // trailing `~`, escaped).
        let plain = (0..<1_200).map { "acct\($0)" } + ["caf\u{E9}", "cafe\u{301}", "a-name-longer-than-fifteen-bytes"]
        let escaped = [
            ".hidden": ".hidden", "50%off": "50%25off", "semi;colon": "semi%3Bcolon", "trail~": "trail%7E",
        ]
        try withMount(
            "first-listing",
            setup: { box in
                try box.importGeneric(
                    (plain + escaped.keys).map { ("many", $0, "secret") } + [("few", "f0", "secret-f")])
            }
        ) { box in
            // From a process other than the mount's caller: the names as bytes, sorted.
            let list = "import os, sys\nfor n in sorted(os.listdir(os.fsencode(sys.argv[1]))): print(n.hex())"
            let expected = (plain + escaped.values).map { Data($0.utf8) }.sorted { $0.lexicographicallyPrecedes($1) }
            let first = try box.py(list, [box.mnt + "/genp/many"])
            try #require(first.status == 0, "first listing: \(first.summary)")
            let listed = first.lines.map { line in
                Data(
                    stride(from: 0, to: line.count, by: 2).compactMap { i -> UInt8? in
                        let start = line.index(line.startIndex, offsetBy: i)
                        return UInt8(line[start..<line.index(start, offsetBy: 2)], radix: 16)
                    })
            }
            #expect(listed.count == expected.count, "first listing: \(listed.count) names")
            #expect(listed == expected, "first listing: the names differ")
            // The same listing again (from the cache), and the other directory's own first one.
            #expect(try box.py(list, [box.mnt + "/genp/many"]).lines == first.lines)
            #expect(
                try box.py(list, [box.mnt + "/genp/few"]).lines == [
                    Data("f0".utf8).map { String(format: "%02x", $0) }.joined()
                ])
        }
    }
}
