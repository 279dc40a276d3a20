import Foundation
import Testing
@_exported import TestSupport

/// Issue 11, point 1: key pairs made in the vault; a non-extractable key reads as its public
/// key through the mount and is refused by `export`.
@Suite("create-keypair")
struct KeyPairTests {
    static let algorithms: [(name: String, sshType: String)] = [
        ("ed25519", "ssh-ed25519"), ("p256", "ecdsa-sha2-nistp256"), ("p384", "ecdsa-sha2-nistp384"),
        ("rsa3072", "ssh-rsa"),
    ]

    @Test("each algorithm: the printed public key is what /keys/<label> reads, and ssh-keygen accepts it")
    func publicKeyThroughTheMount() throws {
        try withMount { box in
            for (alg, sshType) in Self.algorithms {
                let made = try box.cli(["create-keypair", "-a", alg, "-l", "k-\(alg)"] + box.unlockArgs)
                try #require(made.status == 0, "\(alg): \(made.summary)")
                let line = made.stdout.trimmingCharacters(in: .newlines)
                #expect(line.hasPrefix(sshType + " AAAA") && line.hasSuffix(" k-\(alg)"), "\(alg): \(line)")
                let file = box.mnt + "/keys/k-\(alg)"
                let cat = try box.sh("cat \(q(file))")
                #expect(cat.status == 0 && cat.stdout == line + "\n", "\(alg): \(cat.summary)")
                #expect(!cat.stdout.contains("PRIVATE"), "\(alg): the private key was readable")
                // Its size is the public line's, so tools that trust st_size read it whole.
                let size = try box.sh("stat -c %s \(q(file))").stdout
                #expect(size == "\(line.utf8.count + 1)\n", "\(alg): size \(size) for \(line.utf8.count + 1) bytes")
                // ssh-keygen takes the file as a public key: its fingerprint works.
                let fp = try box.sh("ssh-keygen -l -f \(q(file))")
                #expect(fp.status == 0 && fp.stdout.contains("SHA256:"), "\(alg): \(fp.summary)")
                // Its stored public half (the agent's) is the line's blob, in hex, and read-only.
                let half = try box.sh("getfattr --only-values -n user.keychain.sshPublicKey \(q(file))")
                let blob = Data(base64Encoded: String(line.split(separator: " ")[1])) ?? Data()
                #expect(half.stdout == blob.map { String(format: "%02x", $0) }.joined(), "\(alg): \(half.summary)")
                let set = try box.sh("setfattr -n user.keychain.sshPublicKey -v 00 \(q(file))")
                #expect(set.status != 0 && set.stderr.contains("not permitted"), "\(alg): \(set.summary)")
            }
        }
    }

    @Test("a non-extractable key: export refuses it, writes through the mount are refused, the key stays")
    func notExtractable() throws {
        try withMount { box in
            let made = try box.cli(["create-keypair", "-l", "locked"] + box.unlockArgs)
            try #require(made.status == 0, "\(made.summary)")
            let export = try box.cli(["export", "-t", "privKeys", "-l", "locked"] + box.unlockArgs)
            #expect(export.status == 28, "\(export.summary)")
            #expect(export.stdout.isEmpty)
            #expect(export.stderr.contains("not extractable") && export.stderr.contains("errSec") == false)
            let all = try box.cli(["export"] + box.unlockArgs)
            #expect(all.status == 28 && !all.stdout.contains("PRIVATE"), "\(all.summary)")
            // Overwriting it through the mount would replace the private key with whatever
            // is written: refused (EPERM, at the close that commits), and the key stays.
            let file = box.mnt + "/keys/locked"
            let write = try box.pyResults(
                "t('write', wfd, sys.argv[1], os.O_WRONLY | os.O_TRUNC, b'junk')", [file])
            #expect(write["write"] == "EPERM", "\(write)")
            #expect(try box.sh("cat \(q(file))").stdout == made.stdout)
            // Renamed over another key, the key moves whole: still not extractable.
            #expect(try box.sh("ssh-keygen -q -t ed25519 -N '' -f \(q(box.root + "/other"))").status == 0)
            #expect(try box.sh("cp \(q(box.root + "/other")) \(q(box.mnt + "/keys/other"))").status == 0)
            let mv = try box.sh("mv \(q(file)) \(q(box.mnt + "/keys/other"))")
            #expect(mv.status == 0, "\(mv.summary)")
            let moved = try box.sh("cat \(q(box.mnt + "/keys/other"))").stdout
            #expect(moved.hasPrefix("ssh-ed25519 ") && !moved.contains("PRIVATE"), "\(moved)")
        }
    }

    @Test("--extractable keys read and export as their private key, as imported keys do")
    func extractable() throws {
        try withMount { box in
            let made = try box.cli(["create-keypair", "-a", "p256", "-l", "open", "--extractable"] + box.unlockArgs)
            try #require(made.status == 0, "\(made.summary)")
            let file = box.mnt + "/keys/open"
            let cat = try box.sh("cat \(q(file))")
            #expect(cat.stdout.hasPrefix("-----BEGIN PRIVATE KEY-----"), "\(cat.summary)")
            let y = try box.sh("ssh-keygen -y -f \(q(file))")
            #expect(y.status == 0 && made.stdout.hasPrefix(y.stdout.trimmingCharacters(in: .newlines)), "\(y.summary)")
            let export = try box.cli(["export", "-t", "privKeys", "-l", "open"] + box.unlockArgs)
            #expect(export.status == 0 && export.stdout == cat.stdout, "\(export.summary)")
        }
    }

    @Test("usage: an unknown algorithm is exit 2; access group and protection class are stored")
    func options() throws {
        try withSandbox { box in
            let bad = try box.cli(["create-keypair", "-a", "dsa", "-l", "x"] + box.unlockArgs)
            #expect(bad.status == 2, "\(bad.summary)")
            let made = try box.cli(
                ["create-keypair", "-a", "ed25519", "-l", "grouped", "--accessible", "afterFirstUnlock"]
                    + box.unlockArgs)
            try #require(made.status == 0, "\(made.summary)")
            let dump = try box.cli(["dump-keychain"] + box.unlockArgs)
            #expect(dump.stdout.contains(#""extr"<bool>="false""#), "\(dump.stdout)")
            #expect(dump.stdout.contains(#""pdmn"<blob>="afterFirstUnlock""#), "\(dump.stdout)")
            // -d shows the data a read gets: the public key, never the private one.
            let data = try box.cli(["dump-keychain", "-d"] + box.unlockArgs)
            #expect(data.status == 0 && data.stdout.contains(made.stdout.trimmingCharacters(in: .newlines)))
            #expect(!data.stdout.contains("PRIVATE KEY"), "\(data.stdout)")
        }
    }
}
