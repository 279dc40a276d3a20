import Foundation
import Testing

/// Issue 3, point 2: the layout, escaping, long names, inet spellings, mkdir/rmdir.
@Suite("layout and escaping")
struct LayoutTests {

    @Test("the root lists exactly genp inet cert keys idnt views, all directories")
    func rootListing() throws {
        try withMount { box in
            let r = try box.sh("ls -a \(q(box.mnt))")
            #expect(r.status == 0, "\(r.summary)")
            #expect(Set(r.lines) == [".", "..", "genp", "inet", "cert", "keys", "idnt", "views"], "root: \(r.lines)")
            let kinds = try box.sh("cd \(q(box.mnt)) && stat -c '%n %F' genp inet cert keys idnt views")
            #expect(kinds.lines.allSatisfy { $0.hasSuffix(" directory") }, "\(kinds.stdout)")
            // Nothing else exists at the root, and nothing can be made there.
            let bad = try box.pyResults(
                """
                t('stat', os.stat, sys.argv[1] + '/nope')
                t('create', wfd, sys.argv[1] + '/nope', os.O_WRONLY | os.O_CREAT, b'x')
                t('mkdir', os.mkdir, sys.argv[1] + '/nope')
                """, [box.mnt])
            #expect(bad["stat"] == "ENOENT", "\(bad)")
            #expect(bad["create"] != "OK" && bad["create"] != nil, "\(bad)")
            #expect(bad["mkdir"] != "OK" && bad["mkdir"] != nil, "\(bad)")
        }
    }

    @Test("escaping: / % . .. scratch names trailing ~ ; and the empty account, both ways; .hidden is itself")
    func escaping() throws {
        let cases: [(account: String, spelled: String)] = [
            ("a/b", "a%2Fb"), ("50%", "50%25"), (".hidden", ".hidden"), ("", "%"),
            (".", "%2E"), ("..", "%2E."), ("backup~", "backup%7E"), ("semi;colon", "semi%3Bcolon"),
            ("ünïcødé", "ünïcødé"), (".x.swp", "%2Ex.swp"), ("#x#", "%23x#"), ("4913", "%34913"), (".#x", "%2E#x"),
        ]
        try withMount(setup: { box in
            for (i, c) in cases.enumerated() { try box.addGeneric("esc", c.account, "secret-\(i)") }
            try box.addGeneric("svc/with/slashes", "x", "in-slashed-service")
            try box.addGeneric(".dotsvc", "y", "in-dot-service")
        }) { box in
            let ls = try box.sh("ls -a \(q(box.mnt + "/genp/esc"))")
            #expect(Set(ls.lines) == Set([".", ".."] + cases.map(\.spelled)), "listing: \(ls.lines)")
            for (i, c) in cases.enumerated() {
                let r = try box.sh("cat \(q(box.mnt + "/genp/esc/" + c.spelled))")
                #expect(
                    r.status == 0 && r.stdout == "secret-\(i)",
                    "account \(c.account.debugDescription) as \(c.spelled): \(r.summary)")
            }
            let services = try box.sh("ls -a \(q(box.mnt + "/genp"))")
            #expect(
                services.lines.contains("svc%2Fwith%2Fslashes") && services.lines.contains(".dotsvc"),
                "\(services.lines)")
            #expect(try box.sh("cat \(q(box.mnt + "/genp/svc%2Fwith%2Fslashes/x"))").stdout == "in-slashed-service")
            #expect(try box.sh("cat \(q(box.mnt + "/genp/.dotsvc/y"))").stdout == "in-dot-service")

            // Writing through the mount under escaped names stores the unescaped attributes.
            let dir = box.mnt + "/genp/esc"
            let w = try box.sh(
                """
                cd \(q(dir)) && printf one > 'new%2Fslash' && printf two > '100%25' && printf three > '.dot' \
                && mkdir ../'new%2Fservice' && printf four > ../'new%2Fservice/%'
                """)
            #expect(w.status == 0, "\(w.summary)")
            #expect(try box.findGeneric("esc", "new/slash") == Array("one".utf8))
            #expect(try box.findGeneric("esc", "100%") == Array("two".utf8))
            #expect(try box.findGeneric("esc", ".dot") == Array("three".utf8))
            let items = try box.dump()
            #expect(
                items.contains { $0["service"] == "new/service" && $0["account"] == "" },
                "dump: \(items.map(\.attributes))")
        }
    }

    @Test("bad names: non-canonical escapes and invalid UTF-8 are EINVAL; scratch names never become items")
    func badNames() throws {
        try withMount(setup: { try $0.addGeneric("svc", "a", "x") }) { box in
            let before = try box.dump().count
            let res = try box.pyResults(
                """
                d = sys.argv[1]
                t('badescape', wfd, d + '/a%zz', os.O_WRONLY | os.O_CREAT, b'x')
                t('lowerescape', wfd, d + '/a%2fb', os.O_WRONLY | os.O_CREAT, b'x')
                t('rawpercent', wfd, d + '/50%', os.O_WRONLY | os.O_CREAT, b'x')
                t('unescapedsemi', wfd, d + '/a;b', os.O_WRONLY | os.O_CREAT, b'x')
                t('invalidutf8', wfd, os.fsencode(d) + b'/\\xff\\xfe', os.O_WRONLY | os.O_CREAT, b'x')
                t('invalidutf8stat', os.stat, os.fsencode(d) + b'/\\xff\\xfe')
                t('invalidutf8mkdir', os.mkdir, os.fsencode(d + '/..') + b'/\\xc3\\x28')
                t('dotdotcreate', wfd, d + '/..', os.O_WRONLY | os.O_CREAT, b'x')
                t('swap', wfd, d + '/.a.swp', os.O_WRONLY | os.O_CREAT, b'swapdata')
                t('backup', wfd, d + '/a~', os.O_WRONLY | os.O_CREAT, b'backupdata')
                t('swapread', read, d + '/.a.swp')
                """, [box.mnt + "/genp/svc"])
            #expect(res["badescape"] == "EINVAL", "\(res)")
            #expect(res["lowerescape"] == "EINVAL", "\(res)")
            #expect(res["rawpercent"] == "EINVAL", "\(res)")
            #expect(res["unescapedsemi"] == "EINVAL", "\(res)")
            #expect(res["invalidutf8"] == "EINVAL", "\(res)")
            #expect(res["invalidutf8stat"] == "ENOENT", "\(res)")
            #expect(res["invalidutf8mkdir"] == "EINVAL", "\(res)")
            #expect(res["dotdotcreate"] == "EISDIR", "\(res)")
            #expect(res["swap"] == "OK" && res["backup"] == "OK", "\(res)")
            #expect(res["swapread"] == "OK " + "swapdata".hexUTF8, "\(res)")
            // Editor scratch files live in the daemon only: the vault holds no new item.
            #expect(try box.dump().count == before, "scratch or rejected names became items")
        }
    }

    @Test("255-byte names work; 256-byte names are ENAMETOOLONG")
    func nameLengths() throws {
        try withMount(setup: { try $0.addGeneric("svc", "a", "x") }) { box in
            let name255 = String(repeating: "n", count: 255)
            let name256 = String(repeating: "n", count: 256)
            let res = try box.pyResults(
                """
                d = sys.argv[1]
                t('create255', wfd, d + '/' + sys.argv[2], os.O_WRONLY | os.O_CREAT, b'long-ok')
                t('read255', read, d + '/' + sys.argv[2])
                t('create256', wfd, d + '/' + sys.argv[3], os.O_WRONLY | os.O_CREAT, b'x')
                t('stat256', os.stat, d + '/' + sys.argv[3])
                t('mkdir256', os.mkdir, d + '/../' + sys.argv[3])
                """, [box.mnt + "/genp/svc", name255, name256])
            #expect(res["create255"] == "OK" && res["read255"] == "OK " + "long-ok".hexUTF8, "\(res)")
            #expect(try box.findGeneric("svc", name255) == Array("long-ok".utf8))
            #expect(res["create256"] == "ENAMETOOLONG", "create of a 256-byte name: \(res["create256"] ?? "nil")")
            #expect(res["stat256"] == "ENAMETOOLONG", "stat of a 256-byte name: \(res["stat256"] ?? "nil")")
            #expect(res["mkdir256"] == "ENAMETOOLONG", "mkdir of a 256-byte name: \(res["mkdir256"] ?? "nil")")
        }
    }

    @Test("over-long attributes get a stable, unique, readable spelling of at most 255 bytes")
    func overLongNames() throws {
        let longA = String(repeating: "a", count: 300) + "-1"
        let longB = String(repeating: "a", count: 300) + "-2"
        let longService = String(repeating: "s", count: 400)
        try withMount(setup: { box in
            try box.addGeneric("long", longA, "first")
            try box.addGeneric("long", longB, "second")
            try box.addGeneric(longService, "acct", "in-long-service")
        }) { box in
            let ls = try box.sh("ls \(q(box.mnt + "/genp/long"))")
            let names = ls.lines
            #expect(names.count == 2, "\(names)")
            #expect(
                names.allSatisfy { $0.utf8.count <= 255 }, "names longer than 255 bytes: \(names.map(\.utf8.count))")
            #expect(Set(names).count == 2, "two long accounts share one spelling")
            var contents = Set<String>()
            for n in names { contents.insert(try box.sh("cat \(q(box.mnt + "/genp/long/" + n))").stdout) }
            #expect(contents == ["first", "second"], "\(contents)")
            // Stable: the same spelling on a second listing.
            #expect(try box.sh("ls \(q(box.mnt + "/genp/long"))").lines == names)
            let services = try box.sh("ls -a \(q(box.mnt + "/genp"))").lines
            let longDir = try #require(services.first { $0.hasPrefix("sss") }, "\(services)")
            #expect(longDir.utf8.count <= 255)
            let c = try box.sh("cat \(q(box.mnt + "/genp/" + longDir + "/acct"))")
            #expect(c.stdout == "in-long-service", "\(c.summary)")
        }
    }

    @Test("inet spellings: [protocol:]server[:port] directories and ;key=value leaves")
    func inetSpellings() throws {
        try withMount(setup: { box in
            try box.addInternet(["-s", "github.com", "-a", "octo", "-r", "https", "-P", "8443"], "ghp-1")
            try box.addInternet(["-s", "example.org", "-a", "plain"], "plain-pw")
            try box.addInternet(
                ["-s", "example.org", "-a", "u2", "-r", "ftp", "-p", "/pub", "-d", "dom", "-t", "form"], "ftp-pw")
            try box.addInternet(["-s", "ftp", "-a", "u3", "-P", "21"], "host-named-ftp")
            try box.addInternet(["-s", "::1", "-a", "u4", "-r", "ssh", "-P", "22"], "ipv6-pw")
        }) { box in
            let ls = try box.sh("ls \(q(box.mnt + "/inet"))")
            #expect(
                Set(ls.lines) == [
                    "https:github.com:8443", "example.org", "ftp:example.org", "%66tp:21", "ssh:[::1]:22",
                ],
                "inet: \(ls.lines)")
            let expected: [(String, String)] = [
                ("https:github.com:8443/octo", "ghp-1"),
                ("example.org/plain", "plain-pw"),
                ("ftp:example.org/u2;path=%2Fpub;securityDomain=dom;authenticationType=form", "ftp-pw"),
                ("%66tp:21/u3", "host-named-ftp"),
                ("ssh:[::1]:22/u4", "ipv6-pw"),
            ]
            for (path, secret) in expected {
                let r = try box.sh("cat \(q(box.mnt + "/inet/" + path))")
                #expect(r.status == 0 && r.stdout == secret, "\(path): \(r.summary)")
            }
            // A new server directory and item through the mount.
            let w = try box.sh(
                "mkdir \(q(box.mnt + "/inet/https:new.example.com:444")) && printf np > \(q(box.mnt + "/inet/https:new.example.com:444/me"))"
            )
            #expect(w.status == 0, "\(w.summary)")
            let f = try box.cli(
                ["find-internet-password"] + box.unlockArgs + [
                    "-s", "new.example.com", "-a", "me", "-r", "https", "-P", "444", "-w",
                ])
            #expect(f.status == 0 && f.stdout == "np\n", "\(f.summary)")
            // Spellings that name nothing canonical are refused.
            let bad = try box.pyResults(
                """
                d = sys.argv[1]
                t('threeparts', os.mkdir, d + '/bogus:x:y')
                t('badport', os.mkdir, d + '/example.com:0')
                t('codeasname', os.mkdir, d + '/htps:example.com')
                """, [box.mnt + "/inet"])
            #expect(
                bad["threeparts"] == "EINVAL" && bad["badport"] == "EINVAL" && bad["codeasname"] == "EINVAL", "\(bad)")
        }
    }

    @Test("mkdir makes an empty service directory; rmdir of a non-empty one is ENOTEMPTY")
    func mkdirRmdir() throws {
        try withMount(setup: { try $0.addGeneric("full", "a", "x") }) { box in
            let g = box.mnt + "/genp"
            let res = try box.pyResults(
                """
                g = sys.argv[1]
                t('mkdir', os.mkdir, g + '/empty')
                t('listed', lambda: 'empty' in os.listdir(g))
                t('emptylist', os.listdir, g + '/empty')
                t('mkdirexisting', os.mkdir, g + '/full')
                t('rmdirfull', os.rmdir, g + '/full')
                t('rmdirempty', os.rmdir, g + '/empty')
                t('gone', lambda: 'empty' in os.listdir(g))
                t('rmdirmissing', os.rmdir, g + '/never')
                t('mkdirnested', os.mkdir, g + '/full/sub')
                t('mkdirclass', os.mkdir, sys.argv[2] + '/keys/sub')
                t('rmdirclass', os.rmdir, sys.argv[2] + '/genp')
                t('unlinkdir', os.unlink, g + '/full')
                """, [g, box.mnt])
            #expect(res["mkdir"] == "OK" && res["listed"] == "OK True" && res["emptylist"] == "OK", "\(res)")
            #expect(res["mkdirexisting"] == "EEXIST", "\(res)")
            #expect(res["rmdirfull"] == "ENOTEMPTY", "\(res)")
            #expect(res["rmdirempty"] == "OK" && res["gone"] == "OK False", "\(res)")
            #expect(res["rmdirmissing"] == "ENOENT", "\(res)")
            #expect(res["mkdirnested"] != "OK" && res["mkdirclass"] != "OK" && res["rmdirclass"] != "OK", "\(res)")
            #expect(res["unlinkdir"] == "EISDIR" || res["unlinkdir"] == "EPERM", "\(res)")
            #expect(try box.findGeneric("full", "a") == Array("x".utf8), "rmdir of a full directory lost its item")
            // A service directory made with mkdir and then filled is a real service.
            let w = try box.sh(
                "mkdir \(q(g + "/later")) && printf filled > \(q(g + "/later/acct")) && rmdir \(q(g + "/later"))")
            #expect(w.status != 0 && w.stderr.contains("Directory not empty"), "\(w.summary)")
            #expect(try box.findGeneric("later", "acct") == Array("filled".utf8))
        }
    }
}
