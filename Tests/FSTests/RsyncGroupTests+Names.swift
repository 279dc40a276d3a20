import Foundation
import Testing

/// Issue 28, point 9, for the names whose temp file rsync does not name `.` + N + `.XXXXXX`
/// (docs/paths.md, rule 10): a name over 246 bytes (rsync cuts it, never inside a UTF-8
/// sequence), a name ending in `.` (rsync drops it), a dot name whose rest is no item's name
/// (`.4913`: vim's `4913`; `..#x`: emacs's `.#x`); and /cert. Real rsync, getfattr, ls and cat on a real mount.
extension RsyncGroupTests {
    /// Backs `directory` (under the mount) up with `rsync -aX`, empties it, restores it with
    /// `rsync -aX` and checks, from other processes, the names, bytes and xattrs of `names`.
    static func roundTrip(_ box: TestSandbox, _ directory: String, _ names: [String]) throws {
        let dir = box.mnt + "/" + directory,
            backup = box.root + "/backup-" + directory.replacingOccurrences(of: "/", with: "-")
        let out = try box.sh("rsync -aX \(q(dir + "/")) \(q(backup + "/"))")
        try #require(out.status == 0 && out.stderr.isEmpty, "backup: \(out.summary)")
        var attributes: [String: [String]] = [:]
        var secrets: [String: [UInt8]] = [:]
        for name in names {
            secrets[name] = try box.run("/usr/bin/cat", [backup + "/" + name]).stdoutBytes
            attributes[name] = try Self.xattrs(box, backup + "/" + name)
            #expect(attributes[name]?.isEmpty == false, "backup xattrs of \(name)")
        }
        let wipe = try box.run("/usr/bin/rm", names.map { dir + "/" + $0 })
        try #require(wipe.status == 0 && (try box.dump()).isEmpty, "rm: \(wipe.summary)")

        let restore = try box.sh("rsync -aX \(q(backup + "/")) \(q(dir + "/"))", timeout: 60)
        #expect(restore.status == 0 && restore.stderr.isEmpty, "rsync -aX restore: \(restore.summary)")
        let ls = try box.run("/usr/bin/ls", ["-A1", dir], env: ["LC_ALL": "C"])
        #expect(ls.lines == names.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }, "ls: \(ls.summary)")
        for name in names {
            let cat = try box.run("/usr/bin/cat", [dir + "/" + name])
            #expect(cat.status == 0 && cat.stdoutBytes == secrets[name], "cat \(name.prefix(40)): \(cat.summary)")
            let restored = try Self.xattrs(box, dir + "/" + name)
            #expect(
                restored == attributes[name], "xattrs of \(name.prefix(40)): \(restored) for \(attributes[name] ?? [])")
        }
        #expect(try box.dump().count == names.count)
    }

    @Test("rsync -aX restores names it cuts (over 246 bytes, UTF-8), ending in `.`, `.4913` and `..#x`")
    func restoresNamesRsyncShortens() throws {
        let long = String(repeating: "a", count: 250)
        // 243 + 2 × 2 + 1 = 248 bytes: rsync's cut falls inside the second `é`.
        let utf8 = String(repeating: "b", count: 243) + "\u{E9}\u{E9}x"
        let accounts = [long, utf8, String(repeating: "c", count: 247), "a.", ".4913", ".x.", "..#x"]
        try withMount(setup: { box in
            for (i, account) in accounts.enumerated() {
                try box.addGeneric("long", account, "secret \(i)\n", extra: ["-j", "comment \(i)"])
            }
        }) { box in
            try Self.roundTrip(box, "genp/long", accounts)
        }
    }

    @Test("rsync -aX restores /cert (default group and team) into an empty mount: PEM bytes and attributes")
    func restoresCertificates() throws {
        try withMount(setup: { box in try Self.addGroups(box) }) { box in
            let made = try box.sh(
                """
                set -e
                for n in 1 2; do
                  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout k$n.pem -out c$n.pem \
                    -subj /CN=rsync-$n -days 2 2>/dev/null
                done
                rsync c1.pem \(q(box.mnt + "/cert/c1")); rsync c2.pem \(q(box.mnt + "/cert/c2;accessGroup=team"))
                """)
            try #require(made.status == 0, "certificates: \(made.summary)")
            try Self.roundTrip(box, "cert", ["c1", "c2;accessGroup=team"])
            #expect(try box.run("/usr/bin/cmp", [box.w + "/c1.pem", box.mnt + "/cert/c1"]).status == 0)
        }
    }
}
