import Foundation
import Testing

/// Issue 13, `export -f pkcs12`: one identity as a PKCS#12 file that openssl opens with the
/// passphrase given, and that `import` reads back into another vault.
@Suite("export -f pkcs12")
struct PKCS12ExportTests {
    @Test("an identity round-trips through a PKCS#12 file (0600) protected by the given passphrase")
    func roundTrip() throws {
        let box = try Sandbox()
        try box.initVault()
        try FileManager.default.createDirectory(atPath: box.w, withIntermediateDirectories: true)
        let made = try box.sh(
            """
            set -e
            openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout id.key -out id.pem -days 30 -subj "/CN=P12 Identity"
            openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout two.key -out two.pem -days 30 -subj "/CN=Second Identity"
            cat id.pem id.key > id.bundle; cat two.pem two.key > two.bundle
            openssl pkey -in id.key -pubout
            """, timeout: 60)
        try #require(made.status == 0, "openssl: \(made.summary)")
        let publicKey = made.stdout
        expectSuccess(try box.run(["import", box.w + "/id.bundle"] + box.unlock))

        let p12Pass = randomToken("p12-pass-")
        let passFile = try box.passphraseFile(named: "p12pass", p12Pass)
        let out = box.root + "/id.p12"
        let exported = try box.run(
            ["export", "-t", "identities", "-f", "pkcs12", "-o", out, "--p12-passphrase-file", passFile] + box.unlock)
        expectSuccess(exported)
        #expect(fileMode(out) == 0o600)
        #expect(!contains(fileBytes(out) ?? [], Array("PRIVATE KEY".utf8)), "the key is in the clear")

        // openssl opens it with the passphrase (and not without): the same certificate and key.
        let opened = try box.sh(
            "openssl pkcs12 -in '\(out)' -nodes -passin 'file:\(passFile)' | openssl pkey -pubout", timeout: 20)
        #expect(opened.status == 0 && opened.stdout == publicKey, "\(opened.summary)")
        let certificate = try box.sh("openssl pkcs12 -in '\(out)' -nokeys -passin 'file:\(passFile)'", timeout: 20)
        #expect(certificate.stdout.contains("subject=CN = P12 Identity"), "\(certificate.summary)")
        let refused = try box.sh("openssl pkcs12 -in '\(out)' -nodes -passin pass:wrong", timeout: 20)
        #expect(refused.status != 0)

        // `import` reads it back into another vault as an identity.
        let other = box.root + "/other.vault"
        expectSuccess(
            try box.run(["init", "--kdf", "interactive", "--vault", other, "--passphrase-file", box.passphraseFile]))
        let back = ["--vault", other, "--passphrase-file", box.passphraseFile]
        expectSuccess(try box.run(["import", out, "--p12-passphrase-file", passFile] + back))
        let identities = try box.run(["find-identity"] + back)
        #expect(
            identities.stdoutString.contains("\"P12 Identity\"")
                && identities.stdoutString.contains("1 identities found"))
    }

    @Test("-f pkcs12: usage errors, several identities, no passphrase source; nothing is written")
    func refusals() throws {
        let box = try Sandbox()
        try box.initVault()
        try FileManager.default.createDirectory(atPath: box.w, withIntermediateDirectories: true)
        let made = try box.sh(
            """
            set -e
            for n in one two; do
              openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $n.key -out $n.pem -days 30 -subj "/CN=Identity $n"
              cat $n.pem $n.key > $n.bundle
            done
            """, timeout: 60)
        try #require(made.status == 0, "openssl: \(made.summary)")
        let out = box.root + "/x.p12"
        let pass = try box.passphraseFile(named: "p12pass", randomToken("p12-"))
        let empty = try box.passphraseFile(named: "empty", "")
        expectError(
            try box.run(["export", "-f", "pkcs12", "-t", "certs", "-o", out] + box.unlock), 2,
            mentions: ["-t identities"])
        expectError(try box.run(["export", "-f", "pkcs12", "-o", out, "--p12-passphrase-file", pass] + box.unlock), 44)
        for file in ["one", "two"] { expectSuccess(try box.run(["import", box.w + "/\(file).bundle"] + box.unlock)) }
        expectError(
            try box.run(["export", "-f", "pkcs12", "-o", out, "--p12-passphrase-file", pass] + box.unlock), 1,
            mentions: ["2 identities match"])
        expectError(
            try box.run(["export", "-f", "pkcs12", "-l", "one", "-o", out] + box.unlock), 1,
            mentions: ["--p12-passphrase-file"])
        expectError(
            try box.run(
                ["export", "-f", "pkcs12", "-l", "one", "-o", out, "--p12-passphrase-file", empty] + box.unlock),
            1, mentions: ["empty"])
        #expect(!FileManager.default.fileExists(atPath: out))
        // With -l naming one: written, to stdout when redirected.
        let toStdout = try box.run(["export", "-f", "pkcs12", "-l", "two", "--p12-passphrase-file", pass] + box.unlock)
        expectSuccess(toStdout)
        #expect(toStdout.stdout.count > 100 && toStdout.stdout.first == 0x30, "not DER")
    }
}
