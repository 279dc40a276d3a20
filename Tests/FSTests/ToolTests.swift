import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 3, point 5: real tools on a real mount.
@Suite("real tools")
struct ToolTests {

    @Test("printf, echo >>, cat, cp, cp -p, mv, rm, ls -l, stat, find")
    func coreutils() throws {
        try withMount(setup: { try $0.addGeneric("tools", "existing", "abc") }) { box in
            let m = box.mnt, d = box.mnt + "/genp/tools"
            let local = box.root + "/local.txt"
            try Data("from a local file\n".utf8).write(to: URL(fileURLWithPath: local))
            let script = """
                set -e
                printf %s 'printed secret' > \(q(d + "/printed"))
                echo line1 > \(q(d + "/echoed"))
                echo line2 >> \(q(d + "/echoed"))
                cp \(q(local)) \(q(d + "/copied"))
                cp -p \(q(local)) \(q(d + "/copied-p"))
                cp \(q(d + "/existing")) \(q(box.root + "/out.txt"))
                mv \(q(d + "/printed")) \(q(d + "/moved"))
                cp \(q(local)) \(q(box.root + "/tomove.txt"))
                mv \(q(box.root + "/tomove.txt")) \(q(d + "/moved-in"))
                printf x > \(q(d + "/doomed"))
                rm \(q(d + "/doomed"))
                """
            let r = try box.sh(script)
            #expect(r.status == 0, "\(r.summary)")
            #expect(r.stderr.isEmpty, "tools complained: \(r.stderr)")
            #expect(try box.findGeneric("tools", "moved") == Array("printed secret".utf8))
            #expect(try box.findGeneric("tools", "printed") == nil)
            #expect(try box.findGeneric("tools", "echoed") == Array("line1\nline2\n".utf8))
            #expect(try box.findGeneric("tools", "copied") == Array("from a local file\n".utf8))
            #expect(try box.findGeneric("tools", "copied-p") == Array("from a local file\n".utf8))
            #expect(try box.findGeneric("tools", "moved-in") == Array("from a local file\n".utf8))
            #expect(try box.findGeneric("tools", "doomed") == nil)
            #expect(FileManager.default.contents(atPath: box.root + "/out.txt") == Data("abc".utf8))
            #expect(!FileManager.default.fileExists(atPath: box.root + "/tomove.txt"))
            let cat = try box.sh("cat \(q(d + "/echoed"))")
            #expect(cat.stdout == "line1\nline2\n")

            let ls = try box.sh("ls -l \(q(d))")
            #expect(ls.status == 0 && ls.stderr.isEmpty, "\(ls.summary)")
            let entries = ls.lines.filter { !$0.hasPrefix("total") }
            #expect(entries.count == 6, "\(ls.stdout)")
            #expect(entries.allSatisfy { $0.hasPrefix("-rw------- 1 ") }, "\(ls.stdout)")
            let me = String(cString: getpwuid(getuid())!.pointee.pw_name)
            #expect(
                entries.allSatisfy { $0.split(separator: " ", omittingEmptySubsequences: true)[2] == me },
                "\(ls.stdout)")
            let lsRoot = try box.sh("ls -l \(q(m))")
            #expect(lsRoot.lines.filter { $0.hasPrefix("drwx------") }.count == 6, "\(lsRoot.stdout)")

            let st = try box.sh("stat -c '%n %s %a %F' \(q(d + "/moved"))")
            #expect(st.stdout == "\(d)/moved 14 600 regular file\n", "\(st.summary)")

            let find = try box.sh("cd \(q(m)) && find . -type f | sort")
            #expect(find.status == 0, "\(find.summary)")
            #expect(
                find.lines == [
                    "./genp/tools/copied", "./genp/tools/copied-p", "./genp/tools/echoed", "./genp/tools/existing",
                    "./genp/tools/moved", "./genp/tools/moved-in", "./views/changes", "./views/netrc",
                ], "\(find.stdout)")
            let findDirs = try box.sh("cd \(q(m)) && find . -type d | sort")
            #expect(
                findDirs.lines == [".", "./cert", "./genp", "./genp/tools", "./idnt", "./inet", "./keys", "./views"],
                "\(findDirs.stdout)")
        }
    }

    @Test("python3 open(), os.getxattr, os.listxattr")
    func python() throws {
        try withMount(setup: { try $0.addGeneric("py", "acct", "python-secret", extra: ["-l", "Py Label"]) }) { box in
            let res = try box.pyResults(
                """
                p = sys.argv[1]
                with open(p) as f: print('text', f.read())
                with open(p, 'a') as f: f.write('+more')
                with open(p, 'rb') as f: print('bytes', f.read().hex())
                print('label', os.getxattr(p, 'user.keychain.label').decode())
                print('names', ','.join(sorted(os.listxattr(p))))
                with open(sys.argv[2], 'x') as f: f.write('created by python')
                with open(sys.argv[2]) as f: print('created', f.read())
                """, [box.mnt + "/genp/py/acct", box.mnt + "/genp/py/new"])
            #expect(res["text"] == "python-secret", "\(res)")
            #expect(res["bytes"] == "python-secret+more".hexUTF8, "\(res)")
            #expect(res["label"] == "Py Label", "\(res)")
            let names = Set((res["names"] ?? "").split(separator: ",").map(String.init))
            #expect(
                names.isSuperset(of: [
                    "user.keychain.service", "user.keychain.account", "user.keychain.label",
                    "user.keychain.creationDate", "user.keychain.accessible",
                ]), "\(names)")
            #expect(res["created"] == "created by python", "\(res)")
            #expect(try box.findGeneric("py", "new") == Array("created by python".utf8))
        }
    }

    @Test("getfattr and setfattr")
    func getfattrSetfattr() throws {
        try withMount(setup: { try $0.addGeneric("gs", "acct", "x") }) { box in
            let f = box.mnt + "/genp/gs/acct"
            let s = try box.sh(
                "setfattr -n user.keychain.label -v 'set by setfattr' \(q(f)) && getfattr --absolute-names -n user.keychain.label \(q(f))"
            )
            #expect(s.status == 0 && s.stdout.contains("user.keychain.label=\"set by setfattr\""), "\(s.summary)")
            let d = try box.sh("getfattr --absolute-names -d -m - \(q(f))")
            #expect(d.status == 0 && d.stdout.contains("user.keychain.label=\"set by setfattr\""), "\(d.summary)")
            #expect(try box.dump().first?["label"] == "set by setfattr")
        }
    }

    @Test("sed -i: one updated item, no stray items, attributes kept")
    func sedInPlace() throws {
        try withMount(setup: { box in
            try box.addGeneric(
                "sed", "target", "hello world", extra: ["-j", "keep me", "--accessible", "whenUnlockedThisDeviceOnly"])
            try box.addGeneric("sed", "neighbour", "untouched")
        }) { box in
            let before = try box.dump()
            let original = try #require(before.first { $0["account"] == "target" })
            let r = try box.sh("sed -i 's/world/there/' \(q(box.mnt + "/genp/sed/target"))")
            #expect(r.status == 0 && r.stderr.isEmpty, "\(r.summary)")
            #expect(try box.findGeneric("sed", "target") == Array("hello there".utf8))
            let after = try box.dump()
            let keys = after.map { "\($0.itemClass)/\($0["service"] ?? "")/\($0["account"] ?? "")" }.sorted()
            #expect(keys == ["genp/sed/neighbour", "genp/sed/target"], "stray items after sed -i: \(keys)")
            #expect(
                try box.sh("ls -a \(q(box.mnt + "/genp/sed"))").lines.sorted() == [".", "..", "neighbour", "target"])
            let updated = try #require(after.first { $0["account"] == "target" })
            #expect(updated["comment"] == "keep me", "sed -i dropped the item's comment: \(updated.attributes)")
            #expect(
                updated["accessible"] == "whenUnlockedThisDeviceOnly",
                "sed -i changed the item's accessibility to \(updated["accessible"] ?? "nil")")
            #expect(
                updated["creationDate"] == original["creationDate"], "sed -i replaced the item (creationDate changed)")
            #expect(try box.findGeneric("sed", "neighbour") == Array("untouched".utf8))
        }
    }

    @Test("vim -Es: saves the item in place; swap and temp files never become items")
    func vim() throws {
        try withMount(setup: { try $0.addGeneric("vim", "notes", "line one\n") }) { box in
            let before = try box.dump()
            let maxID = before.map(\.id).max() ?? 0
            let f = box.mnt + "/genp/vim/notes"
            // A fresh Debian 12 has vim-tiny (`vim.tiny`) only; a full vim is used when present.
            let vim = "$(command -v vim || command -v vim.tiny)"
            let r = try box.sh("\(vim) -Es -u NONE -i NONE -c '%s/one/two/' -c 'wq' \(q(f))")
            #expect(r.status == 0, "\(r.summary)")
            #expect(try box.findGeneric("vim", "notes") == Array("line two\n".utf8))
            let r2 = try box.sh(
                "\(vim) -Es -u NONE -i NONE -c 'set nocompatible backup writebackup' -c 'normal Goline three' -c 'wq' \(q(f))"
            )
            #expect(r2.status == 0, "\(r2.summary)")
            #expect(try box.findGeneric("vim", "notes") == Array("line two\nline three\n".utf8))
            #expect(try box.sh("ls -a \(q(box.mnt + "/genp/vim"))").lines.sorted() == [".", "..", "notes"])
            let after = try box.dump()
            #expect(after.count == before.count, "\(after.map(\.attributes))")
            // No item was ever added during the edits: the next id is the one after the
            // largest id before them (ids are never reused).
            try box.addGeneric("vim", "probe", "p")
            let probe = try #require(try box.dump().first { $0["account"] == "probe" })
            #expect(
                probe.id == maxID + 1,
                "vim's swap/backup/temp files became keychain items (ids \(maxID + 1)…\(probe.id - 1) used)")
        }
    }

    @Test("ssh-keygen -y -f reads an ed25519 key stored under /keys")
    func sshKeygen() throws {
        try withMount { box in
            let key = box.root + "/id_ed25519"
            let gen = try box.sh("ssh-keygen -q -t ed25519 -N '' -C keychainfs-test -f \(q(key))")
            try #require(gen.status == 0, "\(gen.summary)")
            let stored = box.mnt + "/keys/id_test"
            let cp = try box.sh("cp \(q(key)) \(q(stored))")
            #expect(cp.status == 0, "\(cp.summary)")
            #expect(try box.sh("cmp \(q(key)) \(q(stored))").status == 0, "the key read back differs")
            let y = try box.sh("ssh-keygen -y -f \(q(stored))")
            #expect(y.status == 0, "\(y.summary)")
            let pub = (try? String(contentsOfFile: key + ".pub", encoding: .utf8)) ?? ""
            let expected = pub.split(separator: " ").prefix(2).joined(separator: " ")
            #expect(!expected.isEmpty && y.stdout.hasPrefix(expected), "ssh-keygen -y: \(y.stdout) vs \(expected)")
            #expect(try box.sh("stat -c %a \(q(stored))").stdout == "600\n")
        }
    }

    @Test("openssl x509 reads a PEM certificate stored under /cert; /idnt is read-only")
    func opensslAndIdentity() throws {
        try withMount { box in
            let cert = box.root + "/cert.pem", key = box.root + "/key.pem"
            let gen = try box.sh(
                "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout \(q(key)) -out \(q(cert)) -subj /CN=keychainfs-test -days 2"
            )
            try #require(gen.status == 0, "\(gen.summary)")
            let stored = box.mnt + "/cert/mycert"
            let cp = try box.sh("cp \(q(cert)) \(q(stored))")
            #expect(cp.status == 0, "\(cp.summary)")
            let s = try box.sh("openssl x509 -noout -subject -in \(q(stored))")
            #expect(s.status == 0 && s.stdout.contains("CN = keychainfs-test"), "\(s.summary)")
            #expect(
                try box.sh("cmp \(q(cert)) \(q(stored))").status == 0, "the PEM read back differs from the PEM written")
            // Not a certificate: refused, nothing stored.
            let junk = try box.pyResults(
                "t('junk', wfd, sys.argv[1], os.O_WRONLY | os.O_CREAT, b'not a certificate')",
                [box.mnt + "/cert/junk"])
            #expect(junk["junk"] == "EINVAL", "writing a non-certificate to /cert: \(junk)")
            #expect(try box.sh("ls \(q(box.mnt + "/cert"))").lines == ["mycert"])

            // With its private key under /keys the certificate is an identity, read-only.
            #expect(try box.sh("cp \(q(key)) \(q(box.mnt + "/keys/mykey"))").status == 0)
            let ls = try box.sh("ls \(q(box.mnt + "/idnt"))")
            #expect(ls.lines == ["mycert"], "\(ls.summary)")
            let idnt = box.mnt + "/idnt/mycert"
            let content = try box.sh("cat \(q(idnt))")
            let certText = (try? String(contentsOfFile: cert, encoding: .utf8)) ?? "?"
            #expect(
                content.status == 0 && content.stdout.hasPrefix(certText) && content.stdout.contains("PRIVATE KEY"),
                "\(content.summary)")
            let res = try box.pyResults(
                """
                p = sys.argv[1]; d = os.path.dirname(p)
                t('write', wfd, p, os.O_WRONLY, b'x')
                t('trunc', wfd, p, os.O_WRONLY | os.O_TRUNC, b'')
                t('truncate', os.truncate, p, 0)
                t('create', wfd, d + '/new', os.O_WRONLY | os.O_CREAT, b'x')
                t('unlink', os.unlink, p)
                t('rename', os.rename, p, d + '/renamed')
                t('setxattr', os.setxattr, p, 'user.keychain.label', b'x')
                t('mkdir', os.mkdir, d + '/sub')
                t('missing', os.stat, d + '/missing')
                t('label', os.getxattr, p, 'user.keychain.label')
                """, [idnt])
            for op in ["write", "trunc", "truncate", "create", "unlink", "rename", "setxattr", "mkdir"] {
                #expect(res[op] == "EPERM", "\(op) on /idnt: \(res[op] ?? "nil")")
            }
            #expect(res["missing"] == "ENOENT", "\(res)")
            #expect(res["label"] == "OK " + "mycert".hexUTF8, "\(res)")
            #expect(try box.sh("cat \(q(idnt))").stdout == content.stdout, "a refused write changed the identity")
        }
    }
}
