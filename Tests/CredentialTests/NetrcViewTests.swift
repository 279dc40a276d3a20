import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `/views/netrc` on a real mount, read by curl (`--netrc` through a `~/.netrc` link) against a
/// local server with HTTP basic auth, and by Python's netrc module.
@Suite("netrc view")
struct NetrcViewTests {
    /// Answers 200 `hello USER` to the `user:password` of the file argv[1], else 401.
    static let basicAuthServer = """
        import base64, http.server, sys
        user, _, password = open(sys.argv[1]).read().partition(':')
        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a): pass
            def do_GET(self):
                auth = self.headers.get('Authorization', '')
                ok = auth.startswith('Basic ') and base64.b64decode(auth[6:]).decode() == user + ':' + password
                body = ('hello ' + user).encode() if ok else b'no'
                self.send_response(200 if ok else 401)
                self.send_header('Content-Length', str(len(body)))
                self.end_headers()
                self.wfile.write(body)
        server = http.server.HTTPServer(('127.0.0.1', 0), Handler)
        print('PORT', server.server_address[1], flush=True)
        server.serve_forever()
        """

    @Test func curlReadsTheViewThroughDotNetrc() throws {
        let password = #"p a"ss\word"#
        try withMount(
            #function,
            setup: { box in
                // The user cat is in group `team`; python3 and curl are not.
                let policy = try box.cli(["access-group", "add"] + box.unlockArgs + ["team", "/usr/bin/cat"])
                try #require(policy.status == 0, "\(policy.summary)")
                try box.addInternet(["-s", "127.0.0.1", "-r", "http", "-a", "curl user", "-D", "netrc"], password)
                try box.addInternet(["-s", "hidden.example.com", "-a", "nobody"], "not-opted-in")
                try box.addInternet(
                    ["-s", "team.example.com", "-a", "t", "-D", "netrc", "--access-group", "team"], "team-secret")
                try box.addInternet(
                    ["-s", "guarded.example.com", "-a", "g", "-D", "netrc", "--access-control", "userPresence"],
                    "guarded-secret")
            }
        ) { box in
            let users = box.root + "/user"
            try Data("curl user:\(password)".utf8).write(to: URL(fileURLWithPath: users))
            let (_, port) = try box.startServer(Self.basicAuthServer, [users])
            let view = box.mnt + "/views/netrc"
            let link = try box.sh("ln -s \(q(view)) \(q(box.home + "/.netrc")) && ls -l \(q(view))")
            #expect(link.status == 0 && link.stdout.hasPrefix("-rw------- "), "\(link.summary)")

            let curl = try box.run(
                "/usr/bin/curl", ["-s", "--netrc", "-w", " %{http_code}", "http://127.0.0.1:\(port)/"], timeout: 20)
            #expect(curl.stdout == "hello curl user 200", "curl --netrc: \(curl.summary)")

            // Python's netrc checks the default file's owner and mode, and reads the quoted values.
            let python = try box.run(
                "/usr/bin/python3",
                [
                    "-c",
                    "import netrc; n = netrc.netrc(); print(sorted(n.hosts)); print(n.authenticators('127.0.0.1'))",
                ],
                timeout: 20)
            #expect(python.status == 0, "\(python.summary)")
            #expect(python.lines.first == "['127.0.0.1']", "\(python.summary)")
            #expect(python.lines.last == "('curl user', '', 'p a\"ss\\\\word')", "\(python.summary)")

            // Filtered by the reader's access groups: cat (in `team`) sees the team's item.
            let cat = try box.run("/usr/bin/cat", [view], timeout: 20)
            #expect(
                cat.stdout.contains("machine team.example.com\n\tlogin t\n\tpassword team-secret\n"), "\(cat.summary)")
            #expect(!cat.stdout.contains("hidden.example.com") && !cat.stdout.contains("guarded"), "\(cat.summary)")

            // Read-only.
            let write = try box.pyResults("t('write', wfd, sys.argv[1], os.O_WRONLY, b'x')", [view])
            #expect(write["write"] == "EPERM", "\(write)")

            // Locked: empty, and the daemon log says why.
            #expect(try box.cli(["lock", box.mnt]).status == 0)
            let locked = try box.run("/usr/bin/cat", [view], timeout: 20)
            #expect(locked.status == 0 && locked.stdout.isEmpty, "\(locked.summary)")
            #expect(box.daemonLog.contains("views/netrc is empty"), "\(box.daemonLog.suffix(500))")
            let refused = try box.run(
                "/usr/bin/curl",
                ["-s", "--netrc", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1:\(port)/"],
                timeout: 20)
            #expect(refused.stdout == "401", "\(refused.summary)")
        }
    }

    @Test func valuesAreQuotedWhenTheyMustBe() throws {
        try withMount(
            #function,
            setup: { box in
                try box.addInternet(["-s", "plain.example.com", "-a", "ann", "-D", "netrc"], "simple")
                try box.addInternet(["-s", "empty.example.com", "-D", "netrc"], "")
                try box.addInternet(["-s", "multi.example.com", "-a", "bad", "-D", "netrc"], "two\nlines")
            }
        ) { box in
            let r = try box.run("/usr/bin/cat", [box.mnt + "/views/netrc"], timeout: 20)
            #expect(
                r.stdout
                    == "machine plain.example.com\n\tlogin ann\n\tpassword simple\nmachine empty.example.com\n\tpassword \"\"\n",
                "\(r.summary)")
            #expect(box.daemonLog.contains("views/netrc leaves out"), "\(box.daemonLog.suffix(500))")

            // A login holding NUL (set through the mount) would read as the part before it: the
            // entry is left out, and the daemon's log line says so whole, the NUL spelled \x00.
            let set = try box.pyResults(
                "t('set', os.setxattr, sys.argv[1], 'user.keychain.account', b'ann\\x00eve')",
                [box.mnt + "/inet/plain.example.com/ann"])
            #expect(set["set"] == "OK", "\(set)")
            let after = try box.run("/usr/bin/cat", [box.mnt + "/views/netrc"], timeout: 20)
            #expect(after.stdout == "machine empty.example.com\n\tpassword \"\"\n", "\(after.summary)")
            let log = box.daemonLog
            #expect(log.contains("account=\"ann\\x00eve\""), "\(log.suffix(600))")
            #expect(!log.contains("\u{0}"), "a NUL reached the daemon log")
        }
    }
}
