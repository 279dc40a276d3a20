import Foundation
import Testing

/// Issue 13, generation: `keychainfs generate` for scripts, and `--generate[=LENGTH]` on the add
/// commands, which store a password no command line ever held and print it only with --print.
@Suite("password generation")
struct GenerateTests {
    static let lower = Set("abcdefghijklmnopqrstuvwxyz"), upper = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    static let digits = Set("0123456789"), symbols = Set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")

    /// stdout without its one trailing newline.
    static func password(_ r: CLIResult) -> String {
        #expect(r.stdoutString.hasSuffix("\n") && r.stdoutString.filter { $0 == "\n" }.count == 1, "\(r.stdoutString)")
        return String(r.stdoutString.dropLast())
    }

    @Test("generate: 20 characters by default, every class present, nothing outside them, never twice the same")
    func generateDefaults() throws {
        let box = try Sandbox()
        var seen: Set<String> = []
        for _ in 0..<5 {
            let r = try box.run(["generate"])
            expectSuccess(r)
            #expect(r.stderr.isEmpty)
            let p = Self.password(r)
            #expect(p.count == 20, "\(p)")
            for set in [Self.lower, Self.upper, Self.digits, Self.symbols] {
                #expect(p.contains(where: set.contains), "\(p) lacks a class")
            }
            #expect(p.allSatisfy { Self.lower.union(Self.upper).union(Self.digits).union(Self.symbols).contains($0) })
            seen.insert(p)
        }
        #expect(seen.count == 5)
    }

    @Test("generate: --length and --no-… shape the password; impossible recipes exit 2")
    func generateRecipes() throws {
        let box = try Sandbox()
        let alnum = Self.password(try box.run(["generate", "--length", "64", "--no-symbols"]))
        #expect(alnum.count == 64 && alnum.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) }, "\(alnum)")
        let pin = Self.password(
            try box.run(["generate", "--length", "6", "--no-lowercase", "--no-uppercase", "--no-symbols"]))
        #expect(pin.count == 6 && pin.allSatisfy(Self.digits.contains), "\(pin)")
        for (args, mention) in [
            (["--no-lowercase", "--no-uppercase", "--no-digits", "--no-symbols"], "every character class"),
            (["--length", "0"], "length"), (["--length", "4097"], "length"),
            (["--length", "3"], "4 character classes"),
            (["--length", "many"], "--length"),
        ] {
            expectError(try box.run(["generate"] + args), 2, mentions: [mention])
        }
    }

    @Test("generate draws each character uniformly (libsodium's randombytes_uniform)")
    func generateIsUnbiased() throws {
        // 4096 digits: each digit's count is 409.6 on average, standard deviation 19.2; the
        // bounds are ±6 standard deviations. This catches a generator that draws some characters
        // rarely or never (an off-by-one alphabet index, a narrow range); the small modulo bias
        // of `random % n` is excluded by construction (randombytes_uniform), not by this test.
        let box = try Sandbox()
        let digits = Self.password(
            try box.run(["generate", "--length", "4096", "--no-lowercase", "--no-uppercase", "--no-symbols"]))
        #expect(digits.count == 4096)
        var counts: [Character: Int] = [:]
        for c in digits { counts[c, default: 0] += 1 }
        #expect(counts.count == 10)
        for (digit, count) in counts { #expect((295...525).contains(count), "\(digit) drawn \(count) times") }
    }

    @Test("add --generate stores a password and prints nothing; --print prints the stored one; -U rotates it")
    func addGenerate() throws {
        let box = try Sandbox()
        try box.initVault()
        let quiet = try box.run(["add-generic-password", "-s", "gen", "-a", "me", "--generate=32"] + box.unlock)
        expectSuccess(quiet)
        #expect(quiet.stdout.isEmpty && quiet.stderr.isEmpty, "\(quiet.stdoutString) \(quiet.stderr)")
        let (_, stored) = try box.findGenericSecret(service: "gen", account: "me")
        let first = String(decoding: try #require(stored), as: UTF8.self)
        box.registerSecret(Array(first.utf8))
        #expect(first.count == 32)

        let printed = try box.run(
            ["add-generic-password", "-s", "gen", "-a", "me", "-U", "--generate", "--print", "--no-symbols"]
                + box.unlock)
        expectSuccess(printed)
        let second = Self.password(printed)
        box.registerSecret(Array(second.utf8))
        #expect(second.count == 20 && second != first && second.allSatisfy { !Self.symbols.contains($0) })
        #expect(try box.findGenericSecret(service: "gen", account: "me").1 == Array(second.utf8))

        // Internet passwords too; the passphrase may then come on stdin, which carries no secret.
        let internet = try box.run(
            ["add-internet-password", "-s", "host.example", "-a", "me", "--generate", "--length", "12", "--print"]
                + ["--vault", box.vault, "--passphrase-fd", "0"], stdin: Array((box.passphrase + "\n").utf8))
        expectSuccess(internet)
        let third = Self.password(internet)
        box.registerSecret(Array(third.utf8))
        let found = try box.run(["find-internet-password", "-s", "host.example", "-w"] + box.unlock)
        #expect(found.stdout == Array((third + "\n").utf8) && third.count == 12)
    }

    @Test("add: --generate with -w, --print or a recipe without --generate, are usage errors; nothing is stored")
    func addGenerateUsage() throws {
        let box = try Sandbox()
        try box.initVault()
        for (extra, mention) in [
            (["--generate", "-w", "given-value"], "-w or --generate"), (["--print"], "add --generate"),
            (["--length", "30"], "add --generate"), (["--no-symbols"], "add --generate"),
            (["--generate=0"], "length"), (["--generate=x"], "--length"),
        ] {
            let r = try box.run(["add-generic-password", "-s", "never"] + extra + box.unlock, stdin: [])
            expectError(r, 2, mentions: [mention])
            #expect(!r.stderr.contains("given-value"))
        }
        expectError(try box.run(["find-generic-password", "-s", "never"] + box.unlock), 44)
    }
}
