import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `git credential fill/approve/reject` through the helper, the fields git ≥ 2.41 adds, and
/// the helper's answers when the vault cannot be used (locked, a presence item, a timeout).
@Suite("git credential round trips")
struct GitCredentialTests {
    func request(_ fields: [(String, String)]) -> [UInt8] {
        Array((fields.map { "\($0)=\($1)\n" }.joined() + "\n").utf8)
    }

    func fields(_ r: RunResult) -> [String: String] {
        var out: [String: String] = [:]
        for line in r.lines {
            let parts = line.split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count == 2 { out[parts[0]] = parts[1] }
        }
        return out
    }

    @Test func fillApproveRejectRoundTrip() throws {
        try withSandbox(#function) { box in
            try helperBinary("git-credential-keychainfs")
            try box.configureGitHelper()
            let site = [("protocol", "https"), ("host", "git.example.com:8443")]
            let approve = try box.git(
                "git credential approve", stdin: request(site + [("username", "dave"), ("password", "dave pw 1")]))
            #expect(approve.status == 0, "approve: \(approve.summary)")
            // Stored the way osxkeychain stores it: an inet item with server, port, protocol, account.
            let args = ["-s", "git.example.com", "-P", "8443", "-r", "https", "-a", "dave"]
            #expect(try box.findInternet(args) == "dave pw 1")

            try box.addInternet(["-s", "git.example.com", "-P", "8443", "-r", "https", "-a", "erin"], "erin-pw")
            let dave = try box.git("git credential fill", stdin: request(site + [("username", "dave")]))
            #expect(dave.status == 0, "fill: \(dave.summary)")
            #expect(fields(dave)["password"] == "dave pw 1")
            let erin = try box.git("git credential fill", stdin: request(site + [("username", "erin")]))
            #expect(fields(erin)["password"] == "erin-pw")
            #expect(fields(erin)["username"] == "erin")
            // Without a username: the oldest item of the host (dave's), with its username.
            let anyone = try box.git("git credential fill", stdin: request(site))
            #expect(fields(anyone)["username"] == "dave")
            // Another port is another location.
            let otherPort = try box.git(
                "git credential fill",
                stdin: request([("protocol", "https"), ("host", "git.example.com"), ("username", "dave")]))
            #expect(otherPort.status != 0, "a credential for another port: \(otherPort.summary)")

            // A URL without a port is the protocol's default port: an item of port 443 answers
            // https://host, and a rejected password there is erased.
            try box.addInternet(["-s", "github.example.com", "-r", "https", "-P", "443", "-a", "kim"], "kim-pw")
            let defaultPort = [("protocol", "https"), ("host", "github.example.com"), ("username", "kim")]
            #expect(fields(try box.git("git credential fill", stdin: request(defaultPort)))["password"] == "kim-pw")
            _ = try box.git("git credential reject", stdin: request(defaultPort + [("password", "kim-pw")]))
            #expect(try box.findInternet(["-s", "github.example.com", "-a", "kim"]) == nil)

            // reject with a password the item no longer holds keeps it; with its password, erases it.
            let stale = try box.git(
                "git credential reject", stdin: request(site + [("username", "dave"), ("password", "older")]))
            #expect(stale.status == 0)
            #expect(try box.findInternet(args) == "dave pw 1")
            let reject = try box.git(
                "git credential reject", stdin: request(site + [("username", "dave"), ("password", "dave pw 1")]))
            #expect(reject.status == 0, "reject: \(reject.summary)")
            #expect(try box.findInternet(args) == nil)
            #expect(try box.findInternet(["-s", "git.example.com", "-a", "erin"]) == "erin-pw")
        }
    }

    @Test func expiryAndRefreshTokenAreKeptWithThePassword() throws {
        try withSandbox(#function) { box in
            let helper = try helperBinary("git-credential-keychainfs")
            let site = [("protocol", "https"), ("host", "tokens.example.com"), ("username", "frank")]
            let future = Int(Date().timeIntervalSince1970) + 3600
            let store = try box.run(
                helper, box.unlockArgs + ["store"],
                stdin: request(
                    site + [
                        ("password", "short-lived"), ("password_expiry_utc", "\(future)"),
                        ("oauth_refresh_token", "refresh-me"),
                    ]))
            #expect(store.status == 0, "store: \(store.summary)")
            let get = try box.run(helper, box.unlockArgs + ["get"], stdin: request(site))
            #expect(
                fields(get) == [
                    "username": "frank", "password": "short-lived", "password_expiry_utc": "\(future)",
                    "oauth_refresh_token": "refresh-me",
                ], "get: \(get.summary)")

            // An expired password is not answered, and stderr says why.
            _ = try box.run(
                helper, box.unlockArgs + ["store"],
                stdin: request(site + [("password", "stale"), ("password_expiry_utc", "1000")]))
            let expired = try box.run(helper, box.unlockArgs + ["get"], stdin: request(site))
            #expect(expired.status == 0 && expired.stdout.isEmpty, "expired: \(expired.summary)")
            #expect(expired.stderr.contains("expired"))
        }
    }

    @Test func aLockedVaultSaysWhyAndAnswersNotFound() throws {
        try withSandbox(#function) { box in
            let helper = try helperBinary("git-credential-keychainfs")
            try box.addInternet(["-s", "locked.example.com", "-r", "https", "-a", "gina"], "gina-pw")
            let site = request([("protocol", "https"), ("host", "locked.example.com"), ("username", "gina")])

            // No passphrase file and no terminal: the vault stays locked.
            let noPassphrase = try box.run(helper, ["--vault", box.vault, "get"], stdin: site, timeout: 20)
            #expect(noPassphrase.status == 0 && noPassphrase.stdout.isEmpty, "\(noPassphrase.summary)")
            #expect(noPassphrase.stderr.contains("locked") && noPassphrase.stderr.contains("no passphrase"))
            // git shows the reason before giving up.
            _ = try box.run(
                "/usr/bin/git", ["config", "--global", "credential.helper", "keychainfs --vault \(box.vault)"])
            let fill = try box.git("git credential fill", stdin: site)
            #expect(fill.status != 0 && fill.stderr.contains("no passphrase"), "fill: \(fill.summary)")

            // A wrong passphrase.
            let wrong = box.root + "/wrong"
            try Data("not it\n".utf8).write(to: URL(fileURLWithPath: wrong))
            let denied = try box.run(
                helper, ["--vault", box.vault, "--passphrase-file", wrong, "get"], stdin: site, timeout: 20)
            #expect(denied.stdout.isEmpty && denied.stderr.contains("stays locked"), "\(denied.summary)")

            // A passphrase file nobody writes (a FIFO): the helper gives up after --timeout.
            let fifo = box.root + "/fifo"
            #expect(mkfifo(fifo, 0o600) == 0)
            let started = Date()
            let hung = try box.run(
                helper, ["--vault", box.vault, "--passphrase-file", fifo, "--timeout", "2", "get"], stdin: site,
                timeout: 20)
            #expect(!hung.timedOut && hung.status == 0 && hung.stdout.isEmpty, "\(hung.summary)")
            #expect(hung.stderr.contains("gave up after 2 s"))
            #expect(Date().timeIntervalSince(started) < 10)
        }
    }

    @Test func aPresenceItemIsNotAnsweredAndSaysWhy() throws {
        try withSandbox(#function) { box in
            let helper = try helperBinary("git-credential-keychainfs")
            try box.addInternet(
                ["-s", "guarded.example.com", "-r", "https", "-a", "hank", "--access-control", "userPresence"],
                "hank-pw")
            let r = try box.run(
                helper, box.unlockArgs + ["get"],
                stdin: request([("protocol", "https"), ("host", "guarded.example.com"), ("username", "hank")]),
                timeout: 20)
            #expect(r.status == 0 && r.stdout.isEmpty, "\(r.summary)")
            #expect(
                r.stderr.contains("needs user presence") && r.stderr.contains("errSecInteractionRequired"),
                "\(r.summary)")
            #expect(!r.stderr.contains("hank-pw"))
        }
    }

    @Test func anAccountHoldingALineBreakIsNotAnsweredAndSaysWhy() throws {
        try withSandbox(#function) { box in
            let helper = try helperBinary("git-credential-keychainfs")
            // Answered as is, this account would add a `host=` line to git's answer.
            try box.addInternet(["-s", "inject.example.com", "-r", "https", "-a", "eve\nhost=evil.example"], "eve-pw")
            let r = try box.run(
                helper, box.unlockArgs + ["get"],
                stdin: request([("protocol", "https"), ("host", "inject.example.com")]), timeout: 20)
            #expect(r.status == 0 && r.stdout.isEmpty, "\(r.summary)")
            #expect(r.stderr.contains("the account holds a line break or NUL"), "\(r.summary)")
            #expect(!r.stderr.contains("eve-pw"))
        }
    }

    @Test func theHelperSeesTheAccessGroupsOfItsOwnExecutable() throws {
        try withSandbox(#function) { box in
            let helper = try helperBinary("git-credential-keychainfs")
            let policy = try box.cli(["access-group", "add"] + box.unlockArgs + ["work", "/usr/bin/cat"])
            try #require(policy.status == 0, "\(policy.summary)")
            try box.addInternet(
                ["-s", "work.example.com", "-r", "https", "-a", "lee", "--access-group", "work"], "work-pw")
            try box.addInternet(["-s", "work.example.com", "-r", "https", "-a", "max"], "default-pw")
            func get(_ user: String) throws -> RunResult {
                try box.run(
                    helper, box.unlockArgs + ["get"],
                    stdin: request([("protocol", "https"), ("host", "work.example.com"), ("username", user)]),
                    timeout: 20)
            }
            #expect(try get("lee").stdout.isEmpty, "an item of a group the helper is not in was answered")
            #expect(fields(try get("max"))["password"] == "default-pw")
            let join = try box.cli(["access-group", "add"] + box.unlockArgs + ["work", helper])
            try #require(join.status == 0, "\(join.summary)")
            #expect(fields(try get("lee"))["password"] == "work-pw")
        }
    }

    @Test func badInputIsAClearError() throws {
        try withSandbox(#function) { box in
            let helper = try helperBinary("git-credential-keychainfs")
            let noOp = try box.run(helper, box.unlockArgs, timeout: 20)
            #expect(noOp.status == 2 && noOp.stderr.contains("no operation"), "\(noOp.summary)")
            let unknown = try box.run(helper, box.unlockArgs + ["frobnicate"], timeout: 20)
            #expect(unknown.status == 2 && !unknown.stderr.contains("frobnicate"), "\(unknown.summary)")
            let malformed = try box.run(
                helper, box.unlockArgs + ["store"], stdin: Array("protocol=https\ngarbage\n\n".utf8), timeout: 20)
            #expect(malformed.status == 1 && malformed.stderr.contains("malformed"), "\(malformed.summary)")
            let noProtocolCode = try box.run(
                helper, box.unlockArgs + ["store"],
                stdin: request([("protocol", "gopher"), ("host", "h"), ("username", "u"), ("password", "p")]),
                timeout: 20)
            #expect(noProtocolCode.status == 1 && noProtocolCode.stderr.contains("gopher"), "\(noProtocolCode.summary)")
            #expect(try box.findInternet(["-s", "h"]) == nil)
        }
    }

    @Test func anItemMadeThroughTheMountIsWhatGitFinds() throws {
        try withMount(#function) { box in
            try helperBinary("git-credential-keychainfs")
            try box.configureGitHelper()
            let dir = box.mnt + "/inet/https:mounted.example.com:8443"
            let made = try box.sh("mkdir \(q(dir)) && printf %s 'ivy pw' > \(q(dir + "/ivy"))")
            #expect(made.status == 0, "\(made.summary)")
            let fill = try box.git(
                "git credential fill",
                stdin: request([("protocol", "https"), ("host", "mounted.example.com:8443"), ("username", "ivy")]))
            #expect(fill.status == 0, "fill while mounted: \(fill.summary)")
            #expect(fields(fill)["password"] == "ivy pw")
        }
    }
}
