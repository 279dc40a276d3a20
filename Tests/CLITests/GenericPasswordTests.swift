import Foundation
import Testing

/// add- / find- / delete-generic-password.
@Suite("Generic passwords")
struct GenericPasswordTests {

    @Test("add from stdin, find -w returns exactly the bytes (binary-safe)")
    func stdinRoundTripIsBinarySafe() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        let token = randomToken("")
        let secrets: [(String, [UInt8])] = [
            ("plain", Array("plain-\(token)".utf8)),
            ("trailing-newline", Array("nl-\(token)\n".utf8)),
            ("two-trailing-newlines", Array("nl2-\(token)\n\n".utf8)),
            ("crlf", Array("crlf-\(token)\r\n".utf8)),
            ("nul-bytes", [0] + Array("nul-\(token)".utf8) + [0, 0] + Array("more-\(token)".utf8) + [0]),
            ("not-utf8", [0xff, 0xfe, 0x80] + Array("bin-\(token)".utf8) + [0xc3, 0x28, 0x00, 0x0a]),
            ("every-byte", (0...255).map { UInt8($0) } + Array("all-\(token)".utf8)),
            ("unicode", Array("ünïcødé-🔑-\(token)".utf8)),
        ]
        for (service, secret) in secrets {
            let add = try box.addGeneric(service: service, account: "acct", secret: secret)
            expectSuccess(add)
            #expect(add.stdout.isEmpty, "add should print nothing on stdout (\(service))")
        }
        for (service, secret) in secrets {
            let (r, found) = try box.findGenericSecret(service: service, account: "acct")
            #expect(r.status == 0, "\(service): \(r.stderr)")
            #expect(r.stdout == secret + [10], "\(service): find -w must print exactly the secret and one newline")
            #expect(found == secret)
            #expect(r.stderr.isEmpty)
        }
    }

    @Test("-w VALUE stores the value as given")
    func passwordOption() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        let value = randomToken("w-option-") + " with spaces & ünïcødé"
        box.registerSecret(Array(value.utf8))
        // stdin is ignored when -w is given.
        let ignored = Array(randomToken("stdin-ignored-").utf8)
        box.registerSecret(ignored)
        let add = try box.run(
            ["add-generic-password"] + box.unlock + ["-s", "wsvc", "-a", "me", "-w", value], stdin: ignored)
        expectSuccess(add)
        let (r, found) = try box.findGenericSecret(service: "wsvc", account: "me")
        #expect(r.stdout == Array((value + "\n").utf8))
        #expect(found == Array(value.utf8))
    }

    @Test("find without -w prints attributes, not the secret; -g prints the secret on stderr")
    func findPrintsAttributes() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        let secret = Array(randomToken("attr-").utf8)
        expectSuccess(
            try box.addGeneric(
                service: "svc.example", account: "alice", secret: secret,
                extra: ["-l", "My Label", "-j", "a comment"]))
        let r = try box.run(["find-generic-password"] + box.unlock + ["-s", "svc.example"])
        expectSuccess(r)
        let text = r.stdoutString
        #expect(text.contains("keychain: \"\(box.vault)\""))
        #expect(text.contains("class: \"genp\""))
        #expect(text.contains("\"svce\"<blob>=\"svc.example\""))
        #expect(text.contains("\"acct\"<blob>=\"alice\""))
        #expect(text.contains("\"labl\"<blob>=\"My Label\""))
        #expect(text.contains("\"icmt\"<blob>=\"a comment\""))
        #expect(r.stderr.isEmpty)

        let g = try box.run(["find-generic-password"] + box.unlock + ["-s", "svc.example", "-g"])
        #expect(g.status == 0)
        #expect(g.stdoutString.contains("\"svce\"<blob>=\"svc.example\""))
        #expect(g.stderr == "password: \"\(String(decoding: secret, as: UTF8.self))\"\n")
    }

    @Test("duplicate add: exit 45, the message names the item, the first secret is kept")
    func duplicateAdd() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        let first = Array(randomToken("first-").utf8), second = Array(randomToken("second-").utf8)
        expectSuccess(try box.addGeneric(service: "dup.service", account: "dup-account", secret: first))
        let r = try box.addGeneric(service: "dup.service", account: "dup-account", secret: second)
        expectError(r, 45, mentions: ["dup.service", "dup-account", "already exists"])
        // With -w as well.
        let third = randomToken("third-")
        box.registerSecret(Array(third.utf8))
        expectError(
            try box.run(
                ["add-generic-password"] + box.unlock + ["-s", "dup.service", "-a", "dup-account", "-w", third]), 45,
            mentions: ["dup.service"])
        #expect(try box.findGenericSecret(service: "dup.service", account: "dup-account").1 == first)
        // Same service, other account: not a duplicate.
        expectSuccess(try box.addGeneric(service: "dup.service", account: "other", secret: second))
    }

    @Test("-U updates an existing item (secret and other attributes) and adds a missing one")
    func updateIfPresent() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        let v1 = Array(randomToken("v1-").utf8), v2: [UInt8] = Array(randomToken("v2-").utf8) + [0, 10]
        expectSuccess(try box.addGeneric(service: "upd", account: "acct", secret: v1, extra: ["-l", "old label"]))
        let r = try box.addGeneric(service: "upd", account: "acct", secret: v2, extra: ["-U", "-l", "new label"])
        expectSuccess(r)
        #expect(try box.findGenericSecret(service: "upd", account: "acct").1 == v2)
        let dump = try parseDump(try box.run(["dump-keychain", "--json"] + box.unlock))
        #expect(dump.count == 1)
        let attributes = dump.first?["attributes"] as? [String: Any]
        #expect(attributes?["label"] as? String == "new label")

        // -U with no existing item simply adds.
        let v3 = Array(randomToken("v3-").utf8)
        expectSuccess(try box.addGeneric(service: "upd-new", account: "acct", secret: v3, extra: ["-U"]))
        #expect(try box.findGenericSecret(service: "upd-new", account: "acct").1 == v3)
    }

    @Test("-U updates only the item with the same primary key")
    func updateIfPresentTouchesOnlyTheDuplicate() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        let a1 = Array(randomToken("acct1-").utf8), blank = Array(randomToken("blank-").utf8)
        let replacement = Array(randomToken("replacement-").utf8)
        expectSuccess(try box.addGeneric(service: "shared", account: "a1", secret: a1))
        expectSuccess(try box.addGeneric(service: "shared", secret: blank))  // account ""
        // Collides with (shared, "") only; (shared, a1) is another item.
        expectSuccess(try box.addGeneric(service: "shared", secret: replacement, extra: ["-U"]))
        #expect(try box.findGenericSecret(service: "shared", account: "").1 == replacement)
        let otherIntact = try box.findGenericSecret(service: "shared", account: "a1").1 == a1
        #expect(otherIntact, "the secret of (service shared, account a1) was overwritten")
    }

    @Test("find of a missing item: exit 44, one line naming it")
    func findMissing() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        expectError(
            try box.run(["find-generic-password"] + box.unlock + ["-s", "nope.example", "-a", "nobody"]), 44,
            mentions: ["nope.example", "not found"])
        expectError(try box.run(["find-generic-password"] + box.unlock + ["-s", "nope.example", "-w"]), 44)
        let secret = Array(randomToken("present-").utf8)
        expectSuccess(try box.addGeneric(service: "present", account: "x", secret: secret))
        expectError(try box.run(["find-generic-password"] + box.unlock + ["-s", "present", "-a", "y"]), 44)
        expectError(
            try box.run(["find-generic-password"] + box.unlock + ["-s", "present", "-l", "no such label", "-w"]), 44)
    }

    @Test("delete: exit 0 and prints what it deleted, then 44")
    func delete() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        let secret = Array(randomToken("del-").utf8), keep = Array(randomToken("keep-").utf8)
        expectSuccess(try box.addGeneric(service: "del.example", account: "bob", secret: secret))
        expectSuccess(try box.addGeneric(service: "keep.example", account: "bob", secret: keep))
        let d = try box.run(["delete-generic-password"] + box.unlock + ["-s", "del.example", "-a", "bob"])
        expectSuccess(d)
        #expect(d.stdoutString.contains("\"svce\"<blob>=\"del.example\""))
        #expect(d.stdoutString.hasSuffix("password has been deleted.\n"))
        expectError(try box.run(["find-generic-password"] + box.unlock + ["-s", "del.example", "-a", "bob"]), 44)
        expectError(
            try box.run(["delete-generic-password"] + box.unlock + ["-s", "del.example", "-a", "bob"]), 44,
            mentions: ["del.example"])
        #expect(try box.findGenericSecret(service: "keep.example", account: "bob").1 == keep)
        // Re-adding after delete works.
        expectSuccess(try box.addGeneric(service: "del.example", account: "bob", secret: secret))
    }

    @Test("1 MiB secret is accepted; 1 MiB + 1 is refused with the limit and nothing is stored")
    func dataSizeLimit() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        let limit = 1 << 20
        var big = (0..<limit).map { _ in UInt8.random(in: 0...255) }
        big.replaceSubrange(0..<16, with: Array("big-\(randomToken(""))".utf8).prefix(16))
        let ok = try box.addGeneric(service: "big", secret: big)
        expectSuccess(ok)
        let (r, found) = try box.findGenericSecret(service: "big")
        #expect(r.status == 0)
        #expect(found?.count == limit)
        #expect(found == big)

        let tooBig = big + [42]
        let refused = try box.addGeneric(service: "too-big", secret: tooBig)
        expectError(refused, 42, mentions: ["1048576"])  // errSecDataTooLarge −25302
        #expect(refused.stderr.contains("limit") || refused.stderr.lowercased().contains("too large"))
        expectError(try box.run(["find-generic-password"] + box.unlock + ["-s", "too-big"]), 44)
        // -U over an existing item with too much data: refused, old secret intact.
        let refusedUpdate = try box.addGeneric(service: "big", secret: tooBig, extra: ["-U"])
        expectError(refusedUpdate, 42, mentions: ["1048576"])
        #expect(try box.findGenericSecret(service: "big").1 == big)
        let dump = try parseDump(try box.run(["dump-keychain", "--json"] + box.unlock))
        #expect(dump.count == 1)
    }

    @Test("usage errors: exit 2, one line, nothing touched")
    func usageErrors() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        let before = fileBytes(box.vault)
        let secret = randomToken("usage-secret-")
        box.registerSecret(Array(secret.utf8))
        let cases: [[String]] = [
            ["add-generic-password"] + box.unlock + ["-s", "svc", "--no-such-option", "-w", secret],
            ["find-generic-password"] + box.unlock + ["-s", "svc", "-Z"],
            ["no-such-command"],
            ["add-generic-password"] + box.unlock + ["-s"],
            ["init", "--kdf", "fastest"] + box.unlock,
            ["dump-keychain", "--vault", box.vault, "--passphrase-file", box.passphraseFile, "--passphrase-fd", "0"],
            ["add-generic-password"] + box.unlock + ["-s", "svc", "-w", secret, "--accessible", "sometimes"],
        ]
        for args in cases {
            let r = try box.run(args)
            expectError(r, 2)
            #expect(!r.stderr.contains(secret))
        }
        let unknown = try box.run(["find-generic-password", "--bogus"])
        expectError(unknown, 2, mentions: ["--bogus"])
        #expect(fileBytes(box.vault) == before)
    }

    @Test("-wVALUE (value attached, getopt style): whatever the outcome, the value is not echoed")
    func attachedPasswordValueIsNotEchoed() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        let secret = randomToken("attached-")
        box.registerSecret(Array(secret.utf8))
        let args = ["add-generic-password"] + box.unlock + ["-s", "attached", "-w\(secret)"]
        // Run without the automatic leak check, so the known leak is attributed below.
        let r = try runCLI(args, stdin: nil, env: box.environment())
        if r.status == 0 {
            #expect(try box.findGenericSecret(service: "attached").1 == Array(secret.utf8))
        } else {
            expectError(r, 2)
        }
        box.checkLeaks(args, r, sourceLocation: #_sourceLocation)
    }
}
