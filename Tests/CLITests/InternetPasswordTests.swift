import Foundation
import Testing

/// add- / find- / delete-internet-password.
@Suite("Internet passwords")
struct InternetPasswordTests {

    @Test("-r https -P 443 and -r htps name the same item")
    func protocolNameAndCodeAreEquivalent() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        let secret = Array(randomToken("inet-").utf8)
        box.registerSecret(secret)
        let add = try box.run(
            ["add-internet-password"] + box.unlock
                + ["-s", "www.example.com", "-a", "bob", "-r", "https", "-P", "443", "-p", "/login"],
            stdin: secret)
        expectSuccess(add)

        for proto in ["https", "htps"] {
            let r = try box.run(
                ["find-internet-password"] + box.unlock
                    + ["-s", "www.example.com", "-r", proto, "-P", "443", "-w"])
            #expect(r.status == 0, "-r \(proto): \(r.stderr)")
            #expect(r.stdout == secret + [10], "-r \(proto)")
        }
        // Fully specified, too.
        let full = try box.run(
            ["find-internet-password"] + box.unlock
                + ["-s", "www.example.com", "-a", "bob", "-r", "htps", "-P", "443", "-p", "/login", "-w"])
        #expect(full.stdout == secret + [10])

        // The attribute print shows the protocol, port and path.
        let text = try box.run(["find-internet-password"] + box.unlock + ["-s", "www.example.com"])
        expectSuccess(text)
        #expect(text.stdoutString.contains("class: \"inet\""))
        #expect(text.stdoutString.contains("\"srvr\"<blob>=\"www.example.com\""))
        #expect(text.stdoutString.contains("\"port\"<sint64>=\"443\""))
        #expect(text.stdoutString.contains("\"path\"<blob>=\"/login\""))
        #expect(
            text.stdoutString.contains("\"ptcl\"<blob>=\"https\"")
                || text.stdoutString.contains("\"ptcl\"<blob>=\"htps\""))

        // Adding it again under the code is a duplicate.
        let again = Array(randomToken("inet-again-").utf8)
        box.registerSecret(again)
        let dup = try box.run(
            ["add-internet-password"] + box.unlock
                + ["-s", "www.example.com", "-a", "bob", "-r", "htps", "-P", "443", "-p", "/login"],
            stdin: again)
        expectError(dup, 45, mentions: ["www.example.com", "bob", "already exists"])

        // Another port or protocol is another item / not found.
        expectError(try box.run(["find-internet-password"] + box.unlock + ["-s", "www.example.com", "-P", "8443"]), 44)
        expectError(try box.run(["find-internet-password"] + box.unlock + ["-s", "www.example.com", "-r", "ftp"]), 44)
        let other = Array(randomToken("inet-8443-").utf8)
        box.registerSecret(other)
        expectSuccess(
            try box.run(
                ["add-internet-password"] + box.unlock
                    + ["-s", "www.example.com", "-a", "bob", "-r", "https", "-P", "8443", "-p", "/login"],
                stdin: other))
        let r8443 = try box.run(
            ["find-internet-password"] + box.unlock + ["-s", "www.example.com", "-P", "8443", "-w"])
        #expect(r8443.stdout == other + [10])
    }

    @Test("internet passwords: -w, -U, delete then 44, and they are separate from generic ones")
    func internetLifecycle() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        let v1 = randomToken("iv1-"), v2 = randomToken("iv2-")
        box.registerSecret(Array(v1.utf8)); box.registerSecret(Array(v2.utf8))
        let key = ["-s", "mail.example.org", "-a", "carol", "-r", "imaps", "-P", "993"]
        expectSuccess(try box.run(["add-internet-password"] + box.unlock + key + ["-w", v1]))
        expectSuccess(try box.run(["add-internet-password"] + box.unlock + key + ["-w", v2, "-U"]))
        #expect(try box.run(["find-internet-password"] + box.unlock + key + ["-w"]).stdout == Array((v2 + "\n").utf8))

        // A generic password with the same "service" text is a different class.
        expectError(try box.run(["find-generic-password"] + box.unlock + ["-s", "mail.example.org"]), 44)

        let d = try box.run(["delete-internet-password"] + box.unlock + ["-s", "mail.example.org", "-r", "imps"])
        #expect(d.status == 0, "\(d.stderr)")
        #expect(d.stdoutString.hasSuffix("password has been deleted.\n"))
        expectError(try box.run(["find-internet-password"] + box.unlock + key), 44, mentions: ["mail.example.org"])
        expectError(try box.run(["delete-internet-password"] + box.unlock + key), 44)
    }
}
