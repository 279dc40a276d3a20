import Foundation
import Testing

/// The leak check is what makes "no secret in any output" hold for the whole suite, so it
/// must itself be shown to fire.
@Suite("Harness")
struct HarnessSelfTests {

    @Test("the leak check flags secrets and passphrases where they must not appear")
    func leakCheckFires() throws {
        let box = try Sandbox()
        // Not UTF-8 (so the JSON dump would carry it as base64), with a NUL inside.
        let secret: [UInt8] = Array(randomToken("self-").utf8) + [0, 0xff] + Array(randomToken("test-").utf8)
        box.registerSecret(secret)
        let pass = Array(box.passphrase.utf8)
        func result(out: [UInt8] = [], err: [UInt8] = []) -> CLIResult {
            CLIResult(status: 0, stdout: Array("x".utf8) + out + [10], stderrBytes: err)
        }
        // Allowed: the secret on find -w stdout, find -g stderr, dump -d stdout.
        #expect(box.leaks(["find-generic-password", "-w"], result(out: secret)).isEmpty)
        #expect(box.leaks(["find-internet-password", "-g"], result(err: secret)).isEmpty)
        #expect(box.leaks(["dump-keychain", "-d"], result(out: secret)).isEmpty)
        // Flagged: everything else.
        let flagged: [([String], CLIResult)] = [
            (["add-generic-password"], result(err: secret)),
            (["find-generic-password"], result(out: secret)),
            (["find-generic-password", "-w"], result(err: secret)),
            (["find-generic-password", "-g"], result(out: secret)),
            (["dump-keychain"], result(out: Array(secret.prefix(25)))),          // a piece of it
            (["dump-keychain", "--json"], result(out: Array(Data(secret).base64EncodedString().utf8))),
            (["find-generic-password", "-w"], result(out: pass)),                 // passphrases: never
            (["dump-keychain", "-d"], result(err: pass)),
        ]
        for (args, r) in flagged {
            #expect(box.leaks(args, r).count == 1, "expected one leak report for \(args)")
        }
    }

    @Test("byte search")
    func byteSearch() {
        #expect(contains([1, 2, 3, 0, 4, 5], [0, 4]))
        #expect(contains([1, 2, 3], [1, 2, 3]))
        #expect(!contains([1, 2, 3], [2, 3, 4]))
        #expect(!contains([1, 2], [1, 2, 3]))
        #expect(contains([9, 9, 9, 1, 9, 1, 2], [1, 2]))
    }
}
