import Foundation
import Testing

/// Issue 28, point 9, for every name form: `rsync -aX` restores a backup of items whose names
/// carry fields (`;accessGroup=team`, `;synchronizable=true`, /inet's `;path=`, `;protocol=` …)
/// into an empty mount. rsync writes `alice;accessGroup=team` through the temp file
/// `.alice;accessGroup=team.XXXXXX`, which is its temp file, not an item of group
/// `team.XXXXXX` (docs/paths.md, rule 10). Real rsync, cat, getfattr, mv and the CLI.
@Suite("rsync -aX and mv with access groups and name fields (issue 28)")
struct RsyncGroupTests {
    /// One item: where it is, its name, the CLI options that make it, its secret.
    struct Item {
        let directory: String  // under the mount: genp/<svc> or inet/<server>
        let name: String
        let find: [String]  // find-*-password's options that name it
        let add: [String]  // add-*-password's options beyond `find`
        let secret: [UInt8]
        /// Made through the mount (the CLI takes no protocol code without a name).
        var throughMount = false
        var isInternet: Bool { directory.hasPrefix("inet/") }
    }

    static let groups = ["team", "team.ABC123"]

    static let items: [Item] = [
        Item(
            directory: "genp/rsvc", name: "alice;accessGroup=team", find: ["-s", "rsvc", "-a", "alice"],
            add: ["--access-group", "team", "-j", "alice's comment"], secret: [0, 1, 2, 0xFF, 0x0A, 0x41, 0x0A]),
        Item(
            directory: "genp/rsvc", name: "bob;synchronizable=true", find: ["-s", "rsvc", "-a", "bob"],
            add: ["--synchronizable"], secret: Array("bob secret\n".utf8)),
        Item(
            directory: "genp/rsvc", name: "carol;accessGroup=team;synchronizable=true",
            find: ["-s", "rsvc", "-a", "carol"],
            add: ["--access-group", "team", "--synchronizable", "-l", "carol label"],
            secret: Array("carol \u{E9}\u{1F600}".utf8)),
        Item(
            directory: "genp/rsvc", name: ".env;accessGroup=team", find: ["-s", "rsvc", "-a", ".env"],
            add: ["--access-group", "team"], secret: Array("TOKEN=1\n".utf8)),
        // A group that ends like rsync's suffix: the leading `.` escaped (rule 10), read as itself.
        Item(
            directory: "genp/rsvc", name: "%2Eenv;accessGroup=team.ABC123", find: ["-s", "rsvc", "-a", ".env"],
            add: ["--access-group", "team.ABC123"], secret: Array("TOKEN=2\n".utf8)),
        // Its protection class, set by rsync before its account (name order), is not the default.
        Item(
            directory: "genp/rsvc", name: "dave", find: ["-s", "rsvc", "-a", "dave"],
            add: ["--accessible", "afterFirstUnlock"], secret: Array("dave".utf8)),
        // A hidden name: rsync's temp file is `.npmrc.XXXXXX` (no second dot).
        Item(
            directory: "genp/rsvc", name: ".npmrc", find: ["-s", "rsvc", "-a", ".npmrc"], add: ["-j", "npm"],
            secret: Array("//registry/:_authToken=x\n".utf8)),
        Item(
            directory: "inet/https:rsync.example.com",
            name: "erin;path=%2Flogin;securityDomain=realm;authenticationType=form;accessGroup=team",
            find: ["-s", "rsync.example.com", "-a", "erin"],
            add: ["-r", "https", "-p", "/login", "-d", "realm", "-t", "form", "--access-group", "team"],
            secret: Array("erin\u{0}pw".utf8)),
        Item(
            directory: "inet/https:rsync.example.com", name: "gina;path=%2Fx;synchronizable=true",
            find: ["-s", "rsync.example.com", "-a", "gina"], add: ["-r", "https", "-p", "/x", "--synchronizable"],
            secret: Array("gina".utf8)),
        Item(
            directory: "inet/https:rsync.example.com", name: "hank;authenticationType=form",
            find: ["-s", "rsync.example.com", "-a", "hank"], add: ["-r", "https", "-t", "form"],
            secret: Array("hank".utf8)),
        Item(
            directory: "inet/ssh.example.com:2222", name: "ivan;protocol=zzzz;accessGroup=team",
            find: ["-s", "ssh.example.com", "-a", "ivan"], add: ["--access-group", "team"],
            secret: Array("ivan\n".utf8), throughMount: true),
    ]

    /// Every executable that touches the items, in both groups.
    static func addGroups(_ box: TestSandbox) throws {
        let python = URL(fileURLWithPath: "/usr/bin/python3").resolvingSymlinksInPath().path
        let tools =
            ["rsync", "cat", "getfattr", "setfattr", "ls", "rm", "mv", "find"].map { "/usr/bin/" + $0 } + [python]
        for group in groups {
            for exe in tools {
                let r = try box.cli(["access-group", "add"] + box.unlockArgs + [group, exe])
                try #require(r.status == 0, "access-group add \(group) \(exe): \(r.summary)")
            }
        }
    }

    static func addItems(_ box: TestSandbox) throws {
        for item in items where !item.throughMount {
            let command = item.isInternet ? "add-internet-password" : "add-generic-password"
            let r = try box.cli([command] + box.unlockArgs + item.find + item.add, stdin: item.secret)
            try #require(r.status == 0, "\(command) \(item.name): \(r.summary)")
        }
    }

    /// `getfattr -d` of a file's `user.keychain.*` xattrs, hex values, without the dates (an
    /// item's own record) and the `# file:` line.
    static func xattrs(_ box: TestSandbox, _ path: String) throws -> [String] {
        let r = try box.sh("getfattr --absolute-names -d -e hex -m '^user[.]keychain[.]' \(q(path))")
        #expect(r.status == 0, "getfattr \(path): \(r.summary)")
        return r.lines.filter {
            !$0.hasPrefix("#") && !$0.isEmpty && !$0.contains("creationDate=") && !$0.contains("modificationDate=")
        }
    }

    static func findSecret(_ box: TestSandbox, _ item: Item) throws -> [UInt8]? {
        let command = item.isInternet ? "find-internet-password" : "find-generic-password"
        var args = [command] + box.unlockArgs + item.find + ["-w"]
        if let i = item.add.firstIndex(of: "--access-group") { args += ["--access-group", item.add[i + 1]] }
        let r = try box.cli(args)
        guard r.status == 0, r.stdoutBytes.last == 10 else { return nil }
        return Array(r.stdoutBytes.dropLast())
    }

    /// The dump's attributes of each item, without the ones a new item has of its own.
    static func dumpedAttributes(_ box: TestSandbox) throws -> [[String: String]] {
        try box.dump().map { item in
            item.attributes.filter { !["creationDate", "modificationDate"].contains($0.key) }
                .merging(["class": item.itemClass]) { a, _ in a }
        }
        .sorted { "\($0.sorted { $0.key < $1.key })" < "\($1.sorted { $0.key < $1.key })" }
    }

    @Test("rsync -aX restores a backup of items in groups, synchronizable, with inet fields, into an empty mount")
    func restoresEveryNameForm() throws {
        try withMount(setup: { box in
            try Self.addGroups(box)
            try Self.addItems(box)
        }) { box in
            let backup = box.root + "/backup"
            let dirs = Set(Self.items.map(\.directory)).sorted()
            for item in Self.items where item.throughMount {
                let made = try box.py(
                    "import os, sys\nos.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)\n"
                        + "open(sys.argv[1], 'wb').write(sys.argv[2].encode())",
                    [box.mnt + "/" + item.directory + "/" + item.name, String(decoding: item.secret, as: UTF8.self)])
                try #require(made.status == 0, "\(item.name) through the mount: \(made.summary)")
            }
            let out = try box.sh(
                "set -e; mkdir -p \(q(backup))/genp \(q(backup))/inet\n"
                    + ["genp", "inet"].map { "rsync -aX \(q(box.mnt + "/" + $0 + "/")) \(q(backup + "/" + $0 + "/"))" }
                    .joined(separator: "\n"))
            try #require(out.status == 0 && out.stderr.isEmpty, "backup: \(out.summary)")
            var attributes: [String: [String]] = [:]
            for item in Self.items {
                let path = backup + "/" + item.directory + "/" + item.name
                #expect(try box.sh("cat \(q(path))").stdoutBytes == item.secret, "backup of \(item.name)")
                attributes[item.name] = try Self.xattrs(box, path)
                #expect(attributes[item.name]?.isEmpty == false, "backup xattrs of \(item.name)")
            }
            let before = try Self.dumpedAttributes(box)
            #expect(before.count == Self.items.count)

            // Empty the mount, then restore into it.
            let wipe = try box.sh("rm -rf \(dirs.map { q(box.mnt + "/" + $0) }.joined(separator: " "))")
            try #require(wipe.status == 0, "rm: \(wipe.summary)")
            try #require(try box.dump().isEmpty, "the vault is not empty")
            let restore = try box.sh(
                ["genp", "inet"].map { "rsync -aX \(q(backup + "/" + $0 + "/")) \(q(box.mnt + "/" + $0 + "/"))" }
                    .joined(separator: " && "), timeout: 60)
            #expect(restore.status == 0 && restore.stderr.isEmpty, "rsync -aX restore: \(restore.summary)")

            // At once, from other processes: the names (no temp file left), bytes, xattrs; the CLI.
            for dir in dirs {
                let expected = Self.items.filter { $0.directory == dir }.map(\.name).sorted()
                let ls = try box.run("/usr/bin/ls", ["-A1", box.mnt + "/" + dir], env: ["LC_ALL": "C"])
                #expect(ls.lines == expected, "ls \(dir): \(ls.summary)")
            }
            for item in Self.items {
                let path = box.mnt + "/" + item.directory + "/" + item.name
                let cat = try box.run("/usr/bin/cat", [path])
                #expect(cat.status == 0 && cat.stdoutBytes == item.secret, "cat \(item.name): \(cat.summary)")
                #expect(try Self.xattrs(box, path) == attributes[item.name], "xattrs of \(item.name)")
                #expect(try Self.findSecret(box, item) == item.secret, "CLI find of \(item.name)")
            }
            #expect(try Self.dumpedAttributes(box) == before, "the items' attributes after the restore")
            // The protocol code with no name: its own bytes are accepted (what rsync -X did), another
            // code with no name is not a value a setxattr may give.
            let ivan = box.mnt + "/inet/ssh.example.com:2222/ivan;protocol=zzzz;accessGroup=team"
            let same = try box.run("/usr/bin/setfattr", ["-n", "user.keychain.protocol", "-v", "zzzz", ivan])
            #expect(same.status == 0 && same.stderr.isEmpty, "setfattr protocol zzzz: \(same.summary)")
            let other = try box.run("/usr/bin/setfattr", ["-n", "user.keychain.protocol", "-v", "yyyy", ivan])
            #expect(other.status != 0 && other.stderr.contains("Invalid argument"), "\(other.summary)")

            // Restored again over the items, with one secret changed in the backup: rsync's temp
            // file is renamed over the item.
            let alice = Self.items[0]
            try Data("alice restored".utf8).write(to: URL(fileURLWithPath: backup + "/genp/rsvc/" + alice.name))
            let again = try box.sh("rsync -aX \(q(backup + "/genp/")) \(q(box.mnt + "/genp/"))", timeout: 60)
            #expect(again.status == 0 && again.stderr.isEmpty, "rsync -aX again: \(again.summary)")
            #expect(try box.run("/usr/bin/cat", [box.mnt + "/genp/rsvc/" + alice.name]).stdout == "alice restored")
            #expect(try Self.findSecret(box, alice) == Array("alice restored".utf8))
            #expect(try Self.xattrs(box, box.mnt + "/genp/rsvc/" + alice.name) == attributes[alice.name])
            #expect(try Self.dumpedAttributes(box).count == Self.items.count)
        }
    }

    @Test(
        "mv of items in a group, synchronizable, from /genp to /inet: exit 0, no error line, bytes and attributes go along"
    )
    func mvWithGroupsFromGenpToInet() throws {
        try withMount(setup: { box in
            try Self.addGroups(box)
            try box.addGeneric(
                "mvsvc", "alice", [0, 0xFF, 0x0A], extra: ["--access-group", "team", "-j", "alice's comment"])
            try box.addGeneric("mvsvc", "carol", "carol", extra: ["--access-group", "team", "--synchronizable"])
        }) { box in
            let dst = box.mnt + "/inet/https:mv.example.com"
            try #require(try box.sh("mkdir \(q(dst))").status == 0)
            for (name, secret) in [
                ("alice;accessGroup=team", [UInt8]([0, 0xFF, 0x0A])),
                ("carol;accessGroup=team;synchronizable=true", Array("carol".utf8)),
            ] {
                let src = box.mnt + "/genp/mvsvc/" + name
                let comment = try Self.xattrs(box, src).filter { $0.hasPrefix("user.keychain.comment=") }
                let mv = try box.run("/usr/bin/mv", [src, dst + "/"])
                #expect(mv.status == 0 && mv.stderr.isEmpty, "mv \(name): \(mv.summary)")
                let moved = dst + "/" + name
                #expect(try box.run("/usr/bin/cat", [moved]).stdoutBytes == secret, "cat \(name)")
                let after = try Self.xattrs(box, moved)
                #expect(after.filter { $0.hasPrefix("user.keychain.comment=") } == comment, "comment of \(name)")
                #expect(after.contains("user.keychain.accessGroup=0x" + "team".hexUTF8), "group of \(name): \(after)")
                #expect(after.contains("user.keychain.server=0x" + "mv.example.com".hexUTF8), "server of \(name)")
            }
            #expect(try box.run("/usr/bin/ls", ["-A1", box.mnt + "/genp/mvsvc"]).lines == [])
            #expect(try box.dump().filter { $0.itemClass == "genp" }.isEmpty)
            #expect(try box.dump().filter { $0.itemClass == "inet" }.count == 2)
        }
    }
}

extension RsyncGroupTests {
    @Test("rsync -aX restores /keys (default group and team) into an empty mount: bytes and attributes")
    func restoresKeys() throws {
        try withMount(setup: { box in try Self.addGroups(box) }) { box in
            let keys = box.mnt + "/keys", names = ["id1", "id2;accessGroup=team"]
            let made = try box.sh(
                """
                set -e; ssh-keygen -q -t ed25519 -N '' -f k1; ssh-keygen -q -t ed25519 -N '' -f k2
                rsync k1 \(q(keys + "/" + names[0])); rsync k2 \(q(keys + "/" + names[1]))
                rsync -aX \(q(keys + "/")) backup/
                """)
            try #require(made.status == 0, "keys and backup: \(made.summary)")
            let attributes = try names.map { try Self.xattrs(box, box.w + "/backup/" + $0) }
            #expect(attributes.allSatisfy { $0.contains { $0.hasPrefix("user.keychain.applicationLabel=") } })
            let wipe = try box.run("/usr/bin/rm", names.map { keys + "/" + $0 })
            try #require(wipe.status == 0 && (try box.dump()).isEmpty, "rm: \(wipe.summary)")
            let restore = try box.sh("rsync -aX backup/ \(q(keys + "/"))", timeout: 60)
            #expect(restore.status == 0 && restore.stderr.isEmpty, "rsync -aX restore: \(restore.summary)")
            #expect(try box.run("/usr/bin/ls", ["-A1", keys], env: ["LC_ALL": "C"]).lines == names)
            for (i, name) in names.enumerated() {
                let key = try Data(contentsOf: URL(fileURLWithPath: box.w + "/k\(i + 1)"))
                #expect(try box.run("/usr/bin/cat", [keys + "/" + name]).stdoutBytes == Array(key), "cat \(name)")
                #expect(try Self.xattrs(box, keys + "/" + name) == attributes[i], "xattrs of \(name)")
            }
        }
    }
}
