import Foundation
import Keychain
import KeychainCrypto
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 9, item 4: a mount stretches the passphrase once (the CLI hands its daemon the master
/// key over a private pipe); the daemon checks the manifest's tag and bucket table before the
/// mount goes live and each bucket's rows at their first read (and in a background pass): a
/// tampered bucket never serves a byte, and once one has failed no read of the vault succeeds.
@Suite("mount: one Argon2id, one integrity check")
struct MountUnlockTests {
    /// errSecDecode's exit code (its OSStatus' low byte): what every command exits with on a
    /// vault that fails its integrity check.
    static let decodeExit: Int32 = 93

    @Test("the daemon is started with the master key on fd 3; its argv names no passphrase and no passphrase source")
    func daemonGetsTheKey() throws {
        try withMount(setup: { try $0.addGeneric("svc", "alice", "s3cret") }) { box in
            #expect(try box.sh("cat '\(box.mnt)/genp/svc/alice'").stdout == "s3cret")
            let pid = try #require(box.daemonPid, "no daemon holds the vault")
            let argv = (FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") ?? Data()).split(separator: 0).map
            {
                String(decoding: $0, as: UTF8.self)
            }
            #expect(argv.contains("--master-key-fd"), "daemon argv: \(argv)")
            #expect(!argv.contains("--passphrase-fd") && !argv.contains(box.passphrase), "daemon argv: \(argv)")
        }
    }

    @Test("a wrong passphrase fails at the CLI: exit 51, 'wrong passphrase', no daemon started")
    func wrongPassphrase() throws {
        try withSandbox { box in
            let wrong = box.root + "/wrong"
            try Data("not-the-passphrase\n".utf8).write(to: URL(fileURLWithPath: wrong))
            let r = try box.cli(["mount", box.vault, box.mnt, "--passphrase-file", wrong], timeout: 10)
            #expect(r.status == 51, "\(r.summary)")
            #expect(r.stderr.contains("wrong passphrase"), "\(r.summary)")
            #expect(!box.isMounted)
            #expect(box.ownDaemons().isEmpty, "a daemon was started for a wrong passphrase")
            #expect(!box.daemonLog.contains("mounted"), "log: \(box.daemonLog)")
        }
    }

    @Test("a daemon started by hand with a short or wrong master key refuses, and nothing is mounted")
    func handStartedDaemonRefusesBadKeys() throws {
        try withSandbox { box in
            let bin = try #require(keychainfsBinary)
            let short = box.root + "/short"
            try Data(repeating: 7, count: 10).write(to: URL(fileURLWithPath: short))
            let r = try box.sh(
                "exec \(q(bin)) mount \(q(box.vault)) \(q(box.mnt)) -f --master-key-fd 3 3<\(q(short))", timeout: 10)
            #expect(r.status != 0 && r.stderr.contains("incomplete"), "\(r.summary)")
            #expect(!box.isMounted)
            let wrong = box.root + "/wrong-key"
            try Data(repeating: 7, count: 32).write(to: URL(fileURLWithPath: wrong))
            let w = try box.sh(
                "exec \(q(bin)) mount \(q(box.vault)) \(q(box.mnt)) -f --master-key-fd 3 3<\(q(wrong))", timeout: 10)
            #expect(w.status == Self.decodeExit, "\(w.summary)")
            #expect(!box.isMounted)
        }
    }

    @Test("a rolled-back vault: mount is refused naming --accept-rollback; with it the daemon accepts it and serves")
    func rollbackThroughMount() throws {
        try withSandbox { box in
            try box.addGeneric("svc", "a", "old")
            // The file as it is now, with its WAL (a copy of the main file alone is an older state).
            let older = box.root + "/older.vault"
            for suffix in ["", "-wal"] where FileManager.default.fileExists(atPath: box.vault + suffix) {
                try FileManager.default.copyItem(atPath: box.vault + suffix, toPath: older + suffix)
            }
            try box.addGeneric("svc", "b", "newer")
            for suffix in ["", "-wal", "-shm"] { unlink(box.vault + suffix) }
            for suffix in ["", "-wal"] where FileManager.default.fileExists(atPath: older + suffix) {
                try FileManager.default.copyItem(atPath: older + suffix, toPath: box.vault + suffix)
            }

            let refused = try box.cli(
                ["mount", box.vault, box.mnt, "--passphrase-file", box.passphraseFile], timeout: 20)
            #expect(refused.status == Self.decodeExit, "\(refused.summary)")
            #expect(refused.stderr.contains("rolled back") && refused.stderr.contains("--accept-rollback"))
            #expect(!box.isMounted)
            #expect(waitUntil(5) { box.ownDaemons().isEmpty }, "a daemon outlived the refusal")

            try box.mount(extra: ["--accept-rollback"])
            let a = try box.sh("cat '\(box.mnt)/genp/svc/a'")
            #expect(a.stdout == "old", "\(a.summary)\nlog: \(box.daemonLog.suffix(600))")
            #expect(try box.sh("cat '\(box.mnt)/genp/svc/b'").status != 0, "the rolled-back vault has no item b")
        }
    }

    /// Fills the sandbox vault to `count` items through the core's batch add (1,000 per
    /// transaction), as `keychainfs-bench` does: `/genp/s<k>/acct<i>` holding `secret-<i>`.
    static func populate(_ box: TestSandbox, count: Int) throws {
        let keychain = try Keychain.open(at: box.vault, deviceKeyPath: box.stateHome + "/keychainfs/device.key")
        try keychain.unlock(passphrase: try SecureBytes(copying: Array(box.passphrase.utf8)))
        for start in stride(from: 0, to: count, by: 1_000) {
            try keychain.addBatch(
                (start..<min(count, start + 1_000)).map { i in
                    NewItem(
                        .genericPassword,
                        [Schema.service: .string("s\(i / 1_000)"), Schema.account: .string("acct\(i)")],
                        data: Array("secret-\(i)".utf8))
                })
        }
    }

    @Test(
        "a clean 100,000-item vault mounts and serves; tampered, it mounts, the tampered bucket's reads fail EIO, then every read"
    )
    func hundredThousandItems() throws {
        try withSandbox { box in
            try Self.populate(box, count: 100_000)
            let clean = box.root + "/clean.vault"
            try FileManager.default.copyItem(atPath: box.vault, toPath: clean)

            try box.mount()
            #expect(try box.sh("cat '\(box.mnt)/genp/s99/acct99999'").stdout == "secret-99999")
            #expect(try box.sh("cat '\(box.mnt)/genp/s0/acct0'").stdout == "secret-0")
            #expect(try box.sh("ls '\(box.mnt)/genp' | wc -l").stdout == "100\n", "a listing waits for every bucket")
            try box.unmount()

            func restoreClean() throws {
                for suffix in ["", "-wal", "-shm"] { unlink(box.vault + suffix) }
                try FileManager.default.copyItem(atPath: clean, toPath: box.vault)
            }
            func tamper(_ sql: String) throws {
                let r = try box.run("/usr/bin/sqlite3", [box.vault, sql])
                try #require(r.status == 0, "sqlite3: \(r.summary)")
            }
            /// Mounted (the tag and the bucket table are intact), `tampered` (an item of the tampered
            /// bucket) fails EIO, then an item of a clean bucket and the class listing fail EIO too;
            /// the log names the bucket's id range and what differs.
            func expectTampered(_ what: String, _ sql: String, tampered: String, bucket: String, mentions: String)
                throws
            {
                try restoreClean()
                try tamper(sql)
                defer { try? box.unmount() }
                try box.mount()
                let bad = try box.sh("cat '\(box.mnt)/genp/\(tampered)'")
                #expect(bad.status != 0 && bad.stderr.contains("Input/output error"), "\(what): \(bad.summary)")
                #expect(bad.stdout.isEmpty, "\(what): a byte of the tampered bucket was served")
                let other = try box.sh("cat '\(box.mnt)/genp/s1/acct1500'")
                #expect(other.status != 0 && other.stderr.contains("Input/output error"), "\(what): \(other.summary)")
                let listing = try box.sh("ls '\(box.mnt)/genp'")
                #expect(
                    listing.status != 0 && listing.stderr.contains("Input/output error"), "\(what): \(listing.summary)")
                let log = box.daemonLog
                #expect(log.contains("vault integrity check failed"), "\(what): log: \(log.suffix(800))")
                #expect(log.contains(bucket) && log.contains(mentions), "\(what): log: \(log.suffix(800))")
                #expect(log.contains("every read of this vault now fails"), "\(what): log: \(log.suffix(800))")
            }

            // ids are i + 1 for acct<i>: id 50000 is acct49999, in bucket 97 (ids 49664–50175).
            try expectTampered(
                "a row deleted", "DELETE FROM items WHERE id = 50000", tampered: "s49/acct49990",
                bucket: "items 49664–50175", mentions: "rows were deleted")
            try expectTampered(
                "a row's attributes flipped", "UPDATE items SET attrs = x'00' || substr(attrs, 2) WHERE id = 777",
                tampered: "s0/acct776", bucket: "items 512–1023", mentions: "777 (genp)")
            try expectTampered(
                "an attribute-index row deleted",
                "DELETE FROM attr_index WHERE item_id = 30000 AND tag = (SELECT tag FROM attr_index WHERE item_id = 30000 LIMIT 1)",
                tampered: "s29/acct29999", bucket: "items 29696–30207",
                mentions: "attribute-index entries")

            // The clean copy still mounts and serves: the failures changed nothing.
            try restoreClean()
            try box.mount()
            #expect(try box.sh("cat '\(box.mnt)/genp/s0/acct776'").stdout == "secret-776")
        }
    }
}
