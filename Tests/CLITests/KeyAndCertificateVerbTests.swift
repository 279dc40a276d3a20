import Foundation
import Testing

/// Issue 13, the missing verbs: find-key, delete-key, delete-certificate, `find-certificate -a -Z`
/// with labels, and four-character codes for type and creator — run through the real binary.
@Suite("key and certificate verbs, four-character codes")
struct KeyAndCertificateVerbTests {
    /// Two EC keys, and two self-signed certificates whose labels both contain "Alpha".
    static func makeFiles(_ box: Sandbox) throws {
        try FileManager.default.createDirectory(atPath: box.w, withIntermediateDirectories: true)
        let script = """
            set -e
            for k in a b c; do openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out $k.key; done
            openssl req -x509 -key a.key -out one.pem -days 30 -subj "/CN=Alpha Cert"
            openssl req -x509 -key b.key -out two.pem -days 30 -subj "/CN=Alpha Two"
            """
        let r = try box.sh(script, timeout: 60)
        try #require(r.status == 0, "openssl: \(r.summary)")
    }

    /// The value of `"code"<…>="value"` lines in `security`-style output, in order.
    static func values(_ code: String, in output: String) -> [String] {
        output.split(separator: "\n").compactMap { line in
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            guard trimmed.hasPrefix("\"\(code)\"<"), let eq = trimmed.firstIndex(of: "=") else { return nil }
            return String(trimmed[trimmed.index(after: eq)...].dropFirst().dropLast())
        }
    }

    @Test("find-key selects by label, key class and application label; delete-key deletes exactly one")
    func findAndDeleteKeys() throws {
        let box = try Sandbox()
        try box.initVault()
        try Self.makeFiles(box)
        for (file, label) in [("a.key", "alpha"), ("b.key", "beta"), ("c.key", "alpha")] {
            expectSuccess(try box.run(["import", box.w + "/" + file, "-l", label] + box.unlock))
        }
        let alpha = try box.run(["find-key", "-l", "alpha"] + box.unlock)
        expectSuccess(alpha)
        #expect(Self.values("labl", in: alpha.stdoutString) == ["alpha", "alpha"], "\(alpha.stdoutString)")
        #expect(!alpha.stdoutString.contains("PRIVATE KEY"), "find-key printed key material")
        let hashes = Self.values("klbl", in: alpha.stdoutString)
        #expect(hashes.count == 2 && hashes[0] != hashes[1], "\(hashes)")

        let privates = try box.run(["find-key", "-t", "private"] + box.unlock)
        #expect(Self.values("labl", in: privates.stdoutString).sorted() == ["alpha", "alpha", "beta"])
        expectError(try box.run(["find-key", "-t", "public"] + box.unlock), 44)
        expectError(try box.run(["find-key", "-t", "secret"] + box.unlock), 2, mentions: ["-t"])
        expectError(try box.run(["find-key", "-a", "xyz"] + box.unlock), 2, mentions: ["hexadecimal"])

        // Two keys labelled alpha: deleting by label deletes neither.
        expectError(try box.run(["delete-key"] + box.unlock), 2, mentions: ["-l label or -a hash"])
        expectError(
            try box.run(["delete-key", "-l", "alpha"] + box.unlock), 1, mentions: ["2 keys match; nothing deleted"])
        #expect(Self.values("labl", in: try box.run(["find-key", "-l", "alpha"] + box.unlock).stdoutString).count == 2)

        // By application label (upper case with colons, as people paste hashes): that one only.
        let pasted = stride(from: 0, to: hashes[0].count, by: 2).map { i -> String in
            let start = hashes[0].index(hashes[0].startIndex, offsetBy: i)
            return String(hashes[0][start..<hashes[0].index(start, offsetBy: 2)]).uppercased()
        }.joined(separator: ":")
        let deleted = try box.run(["delete-key", "-a", pasted] + box.unlock)
        expectSuccess(deleted)
        #expect(deleted.stdout.isEmpty)
        let left = try box.run(["find-key", "-l", "alpha"] + box.unlock)
        #expect(Self.values("klbl", in: left.stdoutString) == [hashes[1]], "\(left.stdoutString)")
        expectError(try box.run(["delete-key", "-a", hashes[0]] + box.unlock), 44)

        expectSuccess(try box.run(["delete-key", "-l", "beta", "-t", "private"] + box.unlock))
        expectError(try box.run(["find-key", "-l", "beta"] + box.unlock), 44)
    }

    @Test("find-certificate -a -Z prints each hash with its certificate's label; delete-certificate by -c or -Z")
    func certificateHashesAndDelete() throws {
        let box = try Sandbox()
        try box.initVault()
        try Self.makeFiles(box)
        expectSuccess(try box.run(["add-certificates", box.w + "/one.pem", box.w + "/two.pem"] + box.unlock))
        let fingerprint = { (file: String) throws -> String in
            let r = try box.sh("openssl x509 -in \(file) -noout -fingerprint -sha1", timeout: 10)
            return String(r.stdout.drop { $0 != "=" }.dropFirst()).trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let one = try fingerprint("one.pem"), two = try fingerprint("two.pem")

        // Each "SHA-1 hash:" line is followed by the attributes of that certificate.
        let listed = try box.run(["find-certificate", "-a", "-Z"] + box.unlock)
        expectSuccess(listed)
        let blocks = listed.stdoutString.components(separatedBy: "SHA-1 hash: ").dropFirst()
        var labelByHash: [String: [String]] = [:]
        for block in blocks {
            let hash = String(block.prefix { $0 != "\n" })
            labelByHash[hash] = Self.values("labl", in: block)
        }
        let plain = { (hash: String) in hash.replacingOccurrences(of: ":", with: "") }
        #expect(labelByHash == [plain(one): ["Alpha Cert"], plain(two): ["Alpha Two"]], "\(listed.stdoutString)")

        // Usage errors before the vault is touched; an ambiguous name deletes nothing.
        expectError(try box.run(["delete-certificate"] + box.unlock), 2, mentions: ["-c name or -Z hash"])
        expectError(try box.run(["delete-certificate", "-Z", "abcd"] + box.unlock), 2, mentions: ["40 hexadecimal"])
        expectError(
            try box.run(["delete-certificate", "-c", "alpha"] + box.unlock), 1,
            mentions: ["2 certificates match; nothing deleted"])
        #expect(try box.run(["find-certificate", "-a", "-Z"] + box.unlock).stdoutString.contains(plain(two)))

        // By hash as openssl prints it (colons): that certificate only.
        let byHash = try box.run(["delete-certificate", "-Z", two] + box.unlock)
        expectSuccess(byHash)
        #expect(byHash.stdout.isEmpty)
        expectError(try box.run(["find-certificate", "-c", "Alpha Two"] + box.unlock), 44)
        expectSuccess(try box.run(["find-certificate", "-c", "Alpha Cert"] + box.unlock))
        // -t (trust settings) is accepted; now -c names one certificate.
        expectSuccess(try box.run(["delete-certificate", "-c", "alpha", "-t"] + box.unlock))
        expectError(try box.run(["delete-certificate", "-c", "alpha"] + box.unlock), 44, mentions: ["-c \"alpha\""])
    }

    @Test("type and creator take four-character codes, print them back, and match either spelling")
    func fourCharacterCodes() throws {
        let box = try Sandbox()
        try box.initVault()
        expectSuccess(
            try box.addGeneric(
                service: "fourcc", secret: Array(randomToken("4cc-").utf8), extra: ["-C", "abcd", "-c", "ftp "]))
        let found = try box.run(["find-generic-password", "-s", "fourcc"] + box.unlock)
        expectSuccess(found)
        #expect(Self.values("type", in: found.stdoutString) == ["abcd"], "\(found.stdoutString)")
        #expect(Self.values("crtr", in: found.stdoutString) == ["ftp "], "\(found.stdoutString)")
        // 'abcd' is 0x61626364: the decimal spelling names the same value.
        expectSuccess(try box.run(["find-generic-password", "-s", "fourcc", "-C", "1633837924"] + box.unlock))
        expectError(try box.run(["find-generic-password", "-s", "fourcc", "-C", "abce"] + box.unlock), 44)
        // A number that is not four printable characters prints as a number.
        expectSuccess(
            try box.addGeneric(service: "numbered", secret: Array(randomToken("n-").utf8), extra: ["-C", "42"]))
        let numbered = try box.run(["find-generic-password", "-s", "numbered"] + box.unlock)
        #expect(Self.values("type", in: numbered.stdoutString) == ["42"])
        let json = try parseDump(try box.run(["dump-keychain", "--json"] + box.unlock))
        let types = json.compactMap { ($0["attributes"] as? [String: Any])?["type"] }
        #expect(types.count == 2, "\(json)")
        for bad in ["abc", "abcde", "ab\u{e9}"] {
            expectError(
                try box.run(["add-generic-password", "-s", "bad", "-C", bad, "-w", "x"] + box.unlock), 2,
                mentions: ["-C: invalid value for 'type'", "four-character code"])
        }
    }
}
