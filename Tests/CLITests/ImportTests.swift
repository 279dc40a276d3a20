import Foundation
import Testing

/// Issue 13, import: `keychainfs import-pass` on a real pass store (a throwaway gpg key, `pass
/// init`, `pass insert -m`) and `keychainfs import-csv` on files written here in each product's
/// exact export format, through the real binary; one import is read back through the mount.
@Suite("import")
struct ImportTests {
    // MARK: pass

    /// A pass store under the sandbox, encrypted to a new passphrase-less gpg key, with its own
    /// GNUPGHOME; its gpg-agent is ended at teardown.
    struct PassStore {
        let box: Sandbox
        let gnupg: String
        let store: String
        var env: [String: String?] { ["GNUPGHOME": gnupg, "PASSWORD_STORE_DIR": store] }

        init(_ box: Sandbox) throws {
            self.box = box
            gnupg = box.root + "/g"
            store = box.root + "/store"
            try FileManager.default.createDirectory(
                atPath: gnupg, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let gnupg = gnupg
            box.onTeardown {
                _ = try? runProcess(
                    "/usr/bin/gpgconf", ["--kill", "gpg-agent"], env: childEnvironment(["GNUPGHOME": gnupg]))
            }
            let key = try box.run(
                "/usr/bin/gpg",
                [
                    "--batch", "--passphrase", "", "--quick-gen-key", "keychainfs test <import@example.invalid>",
                    "future-default", "default", "never",
                ], env: env, timeout: 60)
            try #require(key.status == 0, "gpg --quick-gen-key: \(key.summary)")
            let initialized = try box.run("/usr/bin/pass", ["init", "import@example.invalid"], env: env)
            try #require(initialized.status == 0, "pass init: \(initialized.summary)")
        }

        /// `pass insert -m -f NAME` with `content` (registering its first line as a secret).
        func insert(_ name: String, _ content: String) throws {
            box.registerSecret(Array(content.prefix { $0 != "\n" }.utf8))
            let r = try box.run("/usr/bin/pass", ["insert", "-m", "-f", name], stdin: Array(content.utf8), env: env)
            try #require(r.status == 0, "pass insert: \(r.summary)")
        }

        func importing(_ extra: [String] = []) throws -> CLIResult {
            try box.run(["import-pass"] + box.unlock + extra, env: env)
        }
    }

    @Test(
        "a real pass store: login/url lines make an internet password, the rest generic ones; re-import is refused (45, nothing stored), -U updates; the mount shows them"
    )
    func passStore() throws {
        let box = try Sandbox()
        defer { box.teardown() }
        try box.initVault()
        let pass = try PassStore(box)
        try pass.insert(
            "web/github.com", "gh-Secret-0001\nlogin: alice\nurl: https://github.com/login\nrecovery: kept as a note\n")
        try pass.insert("mountcheck", "mount-Secret-0002\nuser: bob\n")
        try pass.insert("notes-only", "notes-Secret-0003\nsome note\notpauth://totp/x?secret=JBSWY3DPEHPK3PXP\n")
        // Not entries: hidden directories (pass's .git, .extensions) and files not ending in .gpg.
        try FileManager.default.createDirectory(atPath: pass.store + "/.extensions", withIntermediateDirectories: true)
        try box.writeFile(pass.store + "/.extensions/junk.gpg", Array("not an OpenPGP message".utf8))
        try box.writeFile(pass.store + "/web/README", Array("not an entry".utf8))

        let first = try pass.importing(["-v"])
        expectSuccess(first)
        #expect(
            first.stdoutString == """
                added genp service="mountcheck" account="bob" (pass entry mountcheck)
                added genp service="notes-only" account="" (pass entry notes-only)
                added inet server="github.com" account="alice" protocol="htps" path="/login" (pass entry web/github.com)
                imported from pass store \(pass.store): 3 added, 0 updated, 0 skipped, 0 failed

                """)
        #expect(
            first.stderr.contains("warning: pass entry notes-only: its otpauth:// line (a TOTP seed) is not imported"))
        #expect(!first.stderr.contains("JBSWY3DPEHPK3PXP"))
        let inet = try box.run(["find-internet-password"] + box.unlock + ["-s", "github.com", "-a", "alice", "-w"])
        #expect(inet.stdout == Array("gh-Secret-0001\n".utf8), "\(inet.stderr)")
        #expect(try box.findGenericSecret(service: "mountcheck", account: "bob").1 == Array("mount-Secret-0002".utf8))
        let dump = try parseDump(try box.run(["dump-keychain", "--json"] + box.unlock))
        let comments = dump.compactMap { ($0["attributes"] as? [String: Any])?["comment"] as? String }.sorted()
        #expect(comments == ["recovery: kept as a note", "some note"])
        let labels = dump.compactMap { ($0["attributes"] as? [String: Any])?["label"] as? String }.sorted()
        #expect(labels == ["mountcheck", "notes-only", "web/github.com"])

        // Again: every item exists, each a refusal; nothing changes, exit 45, each named.
        let again = try pass.importing()
        #expect(again.status == 45, "\(again.stderr)")
        #expect(
            again.stdoutString == "imported from pass store \(pass.store): 0 added, 0 updated, 0 skipped, 3 failed\n")
        #expect(
            again.stderr.contains(
                "keychainfs: refused genp service=\"mountcheck\" account=\"bob\" (pass entry mountcheck): it already exists (-U updates it)"
            ))
        #expect(again.stderr.contains("keychainfs: error: 3 of 3 items were refused; nothing stored"))

        // A changed entry: a dry run says what -U would do and stores nothing; -U does it.
        try pass.insert("mountcheck", "mount-Secret-0004\nuser: bob\n")
        let dry = try pass.importing(["-n", "-U", "mountcheck", "--verbose"])
        expectSuccess(dry)
        #expect(
            dry.stdoutString == """
                would update genp service="mountcheck" account="bob" (pass entry mountcheck)
                dry run, nothing stored: 0 to add, 1 to update, 0 to skip, 0 failing

                """)
        #expect(try box.findGenericSecret(service: "mountcheck", account: "bob").1 == Array("mount-Secret-0002".utf8))
        let update = try pass.importing(["-U"])
        expectSuccess(update)
        #expect(update.stdoutString.hasSuffix("0 added, 3 updated, 0 skipped, 0 failed\n"))
        #expect(try box.findGenericSecret(service: "mountcheck", account: "bob").1 == Array("mount-Secret-0004".utf8))

        // What the user sees through the mount.
        try box.mount()
        #expect(fileBytes(box.mnt + "/genp/mountcheck/bob") == Array("mount-Secret-0004".utf8))
        let inetFiles = try FileManager.default.contentsOfDirectory(atPath: box.mnt + "/inet/https:github.com")
        #expect(inetFiles.count == 1 && inetFiles[0].hasPrefix("alice;"), "\(inetFiles)")
        #expect(
            fileBytes(box.mnt + "/inet/https:github.com/" + (inetFiles.first ?? "")) == Array("gh-Secret-0001".utf8))
        try box.unmount()
    }

    @Test(
        "entries gpg cannot decrypt are all named at the end and nothing is stored (exit 1); --continue-on-error stores the rest; a symlink out of the store is refused"
    )
    func passUndecryptable() throws {
        let box = try Sandbox()
        defer { box.teardown() }
        try box.initVault()
        let pass = try PassStore(box)
        try pass.insert("good", "good-Secret-0005\n")
        try box.writeFile(pass.store + "/aa-broken.gpg", Array("not an OpenPGP message".utf8))
        try box.writeFile(pass.store + "/zz-broken.gpg", Array("not an OpenPGP message".utf8))
        let r = try pass.importing()
        #expect(r.status == 1, "\(r.stderr)")
        #expect(
            r.stderr.contains("not imported: aa-broken") && r.stderr.contains("not imported: zz-broken"), "\(r.stderr)")
        #expect(r.stderr.contains("2 of 3 entries could not be read"), "\(r.stderr)")
        let dump = try parseDump(try box.run(["dump-keychain", "--json"] + box.unlock))
        #expect(dump.isEmpty, "an import that failed to read its source stored \(dump.count) items")
        let rest = try pass.importing(["--continue-on-error"])
        #expect(rest.status == 0, "\(rest.stderr)")
        #expect(rest.stdoutString.hasSuffix("1 added, 0 updated, 0 skipped, 0 failed\n"), "\(rest.stdoutString)")
        try FileManager.default.removeItem(atPath: pass.store + "/aa-broken.gpg")
        try FileManager.default.removeItem(atPath: pass.store + "/zz-broken.gpg")
        // A symlink leading out of the store is never followed to gpg.
        try box.writeFile(box.root + "/outside.gpg", Array("not an OpenPGP message".utf8))
        #expect(symlink(box.root + "/outside.gpg", pass.store + "/escape.gpg") == 0)
        let escape = try pass.importing(["-U"])
        expectError(escape, 1, mentions: ["leads out of the password store", "escape"])
        try FileManager.default.removeItem(atPath: pass.store + "/escape.gpg")
        // FOLDER (here one entry) limits the import to it.
        let one = try pass.importing(["good", "-U"])
        expectSuccess(one)
        #expect(one.stdoutString.hasSuffix("0 added, 1 updated, 0 skipped, 0 failed\n"))
        // No store at all.
        let none = try box.run(["import-pass", "--store", box.root + "/nosuch"] + box.unlock, env: pass.env)
        expectError(none, 1, mentions: ["no password store at \(box.root)/nosuch"])
    }

    // MARK: CSV

    /// Writes `text` as `name` in the sandbox (CRLF line ends and a BOM when asked, as Windows
    /// exports have them).
    static func csv(_ box: Sandbox, _ name: String, _ text: String, crlf: Bool = false, bom: Bool = false) throws
        -> String
    {
        let path = box.root + "/" + name
        var body = crlf ? text.replacingOccurrences(of: "\n", with: "\r\n") : text
        if bom { body = "\u{FEFF}" + body }
        try box.writeFile(path, Array(body.utf8))
        return path
    }

    @Test("a KeePassXC export (BOM, CRLF, quoted commas, quotes and line breaks): every entry, secrets byte-exact")
    func keepassxc() throws {
        let box = try Sandbox()
        try box.initVault()
        let tricky = "kp,Secret\"0006\nx"
        box.registerSecret(Array("kp,Secret\"0006".utf8))
        box.registerSecret(Array("kp-Secret-0007".utf8))
        let file = try Self.csv(
            box, "keepassxc.csv",
            """
            "Group","Title","Username","Password","URL","Notes","TOTP","Icon","Last Modified","Created"
            "Root/Net","router","admin","kp,Secret""0006
            x","","two
            lines, with a comma","","0","2026-01-02T03:04:05Z","2026-01-01T00:00:00Z"
            "Root/Web","Example","eve","kp-Secret-0007","https://example.com:8443/","","otpauth://totp/e?secret=GEZDGNBV","0","",""

            """, crlf: true, bom: true)
        let r = try box.run(["import-csv", "keepassxc", file, "-v"] + box.unlock)
        expectSuccess(r)
        #expect(
            r.stdoutString == """
                added genp service="router" account="admin" (line 2)
                added inet server="example.com" account="eve" protocol="htps" port=8443 (line 5)
                imported from \(file): 2 added, 0 updated, 0 skipped, 0 failed

                """)
        #expect(r.stderr == "keychainfs: warning: line 5: its TOTP seed is not imported\n")
        // The CRLF inside the quoted password is the file's: kept, as KeePassXC wrote it.
        #expect(
            try box.findGenericSecret(service: "router", account: "admin").1
                == Array(tricky.replacingOccurrences(of: "\n", with: "\r\n").utf8))
        let dump = try parseDump(try box.run(["dump-keychain", "--json"] + box.unlock))
        let comments = dump.compactMap { ($0["attributes"] as? [String: Any])?["comment"] as? String }
        #expect(comments == ["two\r\nlines, with a comma"])
    }

    @Test(
        "a Bitwarden export: logins imported, a secure note skipped, custom fields kept as notes, the first URI taken")
    func bitwarden() throws {
        let box = try Sandbox()
        try box.initVault()
        box.registerSecret(Array("bw-Secret-0008".utf8))
        let file = try Self.csv(
            box, "bitwarden.csv",
            """
            folder,favorite,type,name,notes,fields,reprompt,login_uri,login_username,login_password,login_totp
            Bank,,login,aib,,"pin: 462916",0,"https://onlinebanking.aib.ie,https://aib.ie",dpbx,bw-Secret-0008,
            Notes,,note,a secure note,"just text",,0,,,,

            """)
        let r = try box.run(["import-csv", "bitwarden", file] + box.unlock)
        expectSuccess(r)
        #expect(
            r.stdoutString == """
                imported from \(file): 1 added, 0 updated, 1 skipped, 0 failed

                """)
        #expect(r.stderr == "keychainfs: skipped line 3: a Bitwarden note item, not a login\n")
        let found = try box.run(["find-internet-password"] + box.unlock + ["-s", "onlinebanking.aib.ie", "-w"])
        #expect(found.stdout == Array("bw-Secret-0008\n".utf8))
        let dump = try parseDump(try box.run(["dump-keychain", "--json"] + box.unlock))
        #expect((dump.first?["attributes"] as? [String: Any])?["comment"] as? String == "pin: 462916")
    }

    @Test(
        "a 1Password 8 export; a repeated entry is a refusal (45, nothing stored) without -U, skipped with --continue-on-error, an update with -U"
    )
    func onePassword() throws {
        let box = try Sandbox()
        try box.initVault()
        for s in ["op-Secret-0009", "op-Secret-0010", "op-Secret-0011"] { box.registerSecret(Array(s.utf8)) }
        let file = try Self.csv(
            box, "1password.csv",
            """
            Title,Url,Username,Password,OTPAuth,Favorite,Archived,Tags,Notes
            "Mail","","me@example.org","op-Secret-0009","","false","false","",""
            "Mail","","me@example.org","op-Secret-0010","","false","false","","the newer one"
            "Shop","https://shop.example/","buyer","op-Secret-0011","","true","false","x",""

            """)
        let refused = try box.run(["import-csv", "1password", file] + box.unlock)
        #expect(refused.status == 45, "\(refused.stderr)")
        #expect(refused.stdoutString == "imported from \(file): 0 added, 0 updated, 0 skipped, 1 failed\n")
        #expect(
            refused.stderr.contains(
                "keychainfs: refused genp service=\"Mail\" account=\"me@example.org\" (line 3): it already exists"))
        #expect(try parseDump(try box.run(["dump-keychain", "--json"] + box.unlock)).isEmpty)
        let r = try box.run(["import-csv", "1password", file, "--continue-on-error"] + box.unlock)
        #expect(r.status == 45, "\(r.stderr)")
        #expect(r.stdoutString.hasSuffix("imported from \(file): 2 added, 0 updated, 1 skipped, 0 failed\n"))
        #expect(
            r.stderr.contains(
                "keychainfs: skipped genp service=\"Mail\" account=\"me@example.org\" (line 3): it already exists"))
        #expect(try box.findGenericSecret(service: "Mail").1 == Array("op-Secret-0009".utf8))
        let update = try box.run(["import-csv", "1password", file, "-U"] + box.unlock)
        expectSuccess(update)
        #expect(update.stdoutString.hasSuffix("0 added, 3 updated, 0 skipped, 0 failed\n"))
        #expect(try box.findGenericSecret(service: "Mail").1 == Array("op-Secret-0010".utf8))
    }

    @Test("generic CSV with --columns (from standard input too); the mapping is checked before the vault is opened")
    func generic() throws {
        let box = try Sandbox()
        try box.initVault()
        box.registerSecret(Array("gen-Secret-0012".utf8))
        let text = "Name;ignored,Login,Secret,Site\nwifi,guest,gen-Secret-0012,\n"
        let file = try Self.csv(box, "generic.csv", text)
        let columns = ["--columns", "service=Name;ignored,account=Login,password=Secret,url=Site"]
        let dry = try box.run(["import-csv", "generic", file, "--dry-run", "-v"] + columns + box.unlock)
        expectSuccess(dry)
        #expect(
            dry.stdoutString == """
                would add genp service="wifi" account="guest" (line 2)
                dry run, nothing stored: 1 to add, 0 to update, 0 to skip, 0 failing

                """)
        #expect(try parseDump(try box.run(["dump-keychain", "--json"] + box.unlock)).isEmpty)
        let r = try box.run(["import-csv", "generic", "-"] + columns + box.unlock, stdin: Array(text.utf8))
        expectSuccess(r)
        #expect(try box.findGenericSecret(service: "wifi", account: "guest").1 == Array("gen-Secret-0012".utf8))

        let usage: [([String], String)] = [
            (["generic", file], "generic needs --columns"),
            (["generic", file, "--columns", "account=Login"], "--columns: password=COLUMN is required"),
            (["generic", file, "--columns", "password=Secret"], "title=COLUMN or url=COLUMN is required"),
            (["generic", file, "--columns", "pin=Secret,password=Secret,title=Name"], "unknown field 'pin'"),
            (["generic", file, "--columns", "password=Nope,title=Name;ignored"], "the header line has no column Nope"),
            (["keepassxc", file, "--columns", "password=Secret"], "--columns is for the generic format only"),
            (["lastpass", file], "unknown format"),
        ]
        // Not even a passphrase is needed to find these out.
        for (args, message) in usage {
            expectError(try box.run(["import-csv"] + args + ["--vault", box.vault]), 2, mentions: [message])
        }
    }

    @Test(
        "a bad CSV (wrong header, unterminated quote, short row) stores nothing: exit 2, the line named, no secret echoed"
    )
    func badFiles() throws {
        let box = try Sandbox()
        try box.initVault()
        box.registerSecret(Array("bad-Secret-0013".utf8))
        box.registerSecret(Array("bad-Secret-0014".utf8))
        let header = "\"Group\",\"Title\",\"Username\",\"Password\",\"URL\",\"Notes\"\n"
        let good = "\"Root\",\"first\",\"u\",\"bad-Secret-0013\",\"\",\"\"\n"
        let cases: [(String, String, String)] = [
            (
                "keepassxc", good + good,
                "line 1: not a KeePassXC CSV export: the header line has no column Title, Username, Password, URL"
            ),
            (
                "bitwarden", header + good,
                "line 1: not a Bitwarden CSV export: the header line has no column type, name, login_username, login_password, login_uri"
            ),
            (
                "keepassxc", header + good + "\"Root\",\"second\",\"u\",\"bad-Secret-0014\"x,\"\",\"\"\n",
                "line 3: field 4 has text after its closing quote"
            ),
            (
                "keepassxc", header + good + "\"Root\",\"second\",\"u\",\"bad-Secret-0014\n",
                "line 3: field 4 opens a quote that is never closed"
            ),
            (
                "keepassxc", header + good + "\"Root\",\"third\",\"bad-Secret-0014\"\n",
                "line 3: the record has 3 fields where the header has 6"
            ),
            ("keepassxc", "", "the file is empty"),
            (
                "keepassxc", header + good + "\"Root\",\"\",\"u\",\"bad-Secret-0014\",\"\",\"\"\n",
                "line 3: the entry has neither a title nor a URL with a host"
            ),
        ]
        for (index, (format, text, message)) in cases.enumerated() {
            let file = try Self.csv(box, "bad\(index).csv", text)
            expectError(try box.run(["import-csv", format, file] + box.unlock), 2, mentions: ["\(file): ", message])
        }
        #expect(try parseDump(try box.run(["dump-keychain", "--json"] + box.unlock)).isEmpty)
        expectError(
            try box.run(["import-csv", "keepassxc", box.root + "/nosuch.csv"] + box.unlock), 1,
            mentions: ["cannot open"])
    }

    @Test(
        "an item the core refuses (a 70 KiB note): nothing stored, exit 42 (errSecDataTooLarge); with --continue-on-error it fails alone"
    )
    func perItemFailure() throws {
        let box = try Sandbox()
        try box.initVault()
        box.registerSecret(Array("big-Secret-0015".utf8))
        let note = String(repeating: "n", count: 70 << 10)
        let file = try Self.csv(
            box, "big.csv",
            "Title,Url,Username,Password,Notes\nbig,,u,big-Secret-0015,\(note)\nsmall,,u,big-Secret-0015,\n")
        let whole = try box.run(["import-csv", "1password", file] + box.unlock)
        #expect(whole.status == 42, "\(whole.stderr)")
        #expect(whole.stdoutString.hasSuffix("0 added, 0 updated, 0 skipped, 1 failed\n"))
        #expect(
            whole.stderr.contains(
                "keychainfs: refused genp service=\"big\" account=\"u\" (line 2): attribute 'comment' is"))
        #expect(try parseDump(try box.run(["dump-keychain", "--json"] + box.unlock)).isEmpty)
        let r = try box.run(["import-csv", "1password", file, "--continue-on-error"] + box.unlock)
        #expect(r.status == 42, "\(r.stderr)")
        #expect(r.stdoutString.hasSuffix("1 added, 0 updated, 0 skipped, 1 failed\n"))
        #expect(
            r.stderr.contains("keychainfs: failed genp service=\"big\" account=\"u\" (line 2): attribute 'comment' is"))
        #expect(r.stderr.contains("keychainfs: error: 1 of 2 items were not imported; the first: "))
        #expect(try box.findGenericSecret(service: "small", account: "u").1 == Array("big-Secret-0015".utf8))
    }
}
