import Foundation
import Keychain
import KeychainCrypto
import Testing

// passwd --rotate: a new master key and class keys, everything re-encrypted in one transaction.

@Suite("Master key rotation")
struct RotationTests {
    static let newPassphrase = "a new passphrase after rotation"

    @Test("rotating the fixture keeps every item, attribute and the policy; the old passphrase and header are gone")
    func rotatesFixture() throws {
        try withTempDir { dir throws in
            let (vault, deviceKey) = try FormatOneFixture.copy(into: dir)
            let kc = try Keychain.open(at: vault, deviceKeyPath: deviceKey).unlocked(FormatOneFixture.passphrase)
            try kc.add(.genericPassword, genp("before", "rotation"), data: bytes("x"))
            let old = try snapshotCopy(vault, dir + "/old.vault")
            let oldRows = try RawDB(old).query("SELECT id, attrs, item_key, data FROM items ORDER BY id")
            try kc.rotateMasterKey(old: try secure(FormatOneFixture.passphrase), new: try secure(Self.newPassphrase))

            let reopened = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
            expectError(.authFailed) { try reopened.unlock(passphrase: try secure(FormatOneFixture.passphrase)) }
            try reopened.unlock(passphrase: try secure(Self.newPassphrase))
            try FormatOneFixture.expectContents(reopened, ids: Array(1...11) + [13])
            #expect(try reopened.verify(passphrase: try secure(Self.newPassphrase)).isClean)
            // Every attribute box and item key is new; the data boxes are kept.
            let newRows = try RawDB(vault).query("SELECT id, attrs, item_key, data FROM items ORDER BY id")
            #expect(newRows.count == oldRows.count)
            for (before, after) in zip(oldRows, newRows) {
                #expect(before[0] == after[0] && before[3] == after[3])
                #expect(before[1] != after[1] && before[2] != after[2])
            }
            // The old header and class keys spliced back in (an attacker with the old
            // passphrase and an old copy) do not open the new file.
            let spliced = try snapshotCopy(vault, dir + "/spliced.vault")
            try RawDB(spliced).exec(
                """
                ATTACH '\(old)' AS old;
                UPDATE meta SET value = (SELECT value FROM old.meta WHERE name = 'master_key') WHERE name = 'master_key';
                UPDATE meta SET value = (SELECT value FROM old.meta WHERE name = 'kdf_salt') WHERE name = 'kdf_salt';
                DELETE FROM class_keys; INSERT INTO class_keys SELECT * FROM old.class_keys;
                """)
            let attacker = try Keychain.open(at: spliced, deviceKeyPath: deviceKey)
            expectError(.decode, containing: ["authentication tag does not verify"]) {
                try attacker.unlock(passphrase: try secure(FormatOneFixture.passphrase))
            }
        }
    }

    @Test("kill -9 at random points of passwd --rotate leaves either the old vault or the new one, whole")
    func killedRotation() throws {
        let binary = try requireBinary()
        try withTempDir { dir throws in
            let state = dir + "/state", vault = dir + "/big.vault"
            let kc = try Keychain.create(
                at: vault, passphrase: try secure(testPassphrase), parameters: .interactive,
                deviceKeyPath: state + "/keychainfs/device.key")
            for i in 0..<600 {
                try kc.add(.genericPassword, genp("svc\(i % 7)", "acct\(i)"), data: bytes("secret-\(i)"))
            }
            let expected = try snapshot(kc)
            try Data((testPassphrase + "\n").utf8).write(to: URL(fileURLWithPath: dir + "/old"))
            try Data((Self.newPassphrase + "\n").utf8).write(to: URL(fileURLWithPath: dir + "/new"))
            let env = childEnvironment(["XDG_STATE_HOME": state, "HOME": dir])
            var outcomes: [String] = []
            var passphrase = testPassphrase, other = Self.newPassphrase
            // One rotation left to finish, to time it.
            let started = Date()
            let timing = try spawnProcess(
                binary,
                [
                    "passwd", "--rotate", "--vault", vault, "--passphrase-file", dir + "/old",
                    "--new-passphrase-file", dir + "/new",
                ], env: env, ioDirectory: dir
            ).wait(timeout: 60)
            let duration = Date().timeIntervalSince(started)
            try #require(timing.status == 0, "rotation: \(timing.summary)")
            swap(&passphrase, &other)
            for round in 0..<8 {
                try RawDB(vault).exec("PRAGMA wal_checkpoint(TRUNCATE)")
                let rotation = try spawnProcess(
                    binary,
                    [
                        "passwd", "--rotate", "--vault", vault,
                        "--passphrase-file", dir + (passphrase == testPassphrase ? "/old" : "/new"),
                        "--new-passphrase-file", dir + (passphrase == testPassphrase ? "/new" : "/old"),
                    ], env: env, ioDirectory: dir)
                if round % 2 == 0 {
                    // Argon2id (INTERACTIVE) runs twice before the transaction, which comes
                    // last: these kills are spread over a run and just past its end.
                    usleep(useconds_t(duration * Double.random(in: 0.3...1.1) * 1_000_000))
                } else {
                    // These land while the transaction writes: as soon as the (emptied) WAL grows.
                    _ = waitUntil(10) { Self.size(vault + "-wal") > 0 || !rotation.isRunning }
                }
                rotation.kill(SIGKILL)
                let result = rotation.wait(timeout: 30)
                let rotated: Bool
                do {
                    let attempt = try Keychain.open(at: vault, deviceKeyPath: state + "/keychainfs/device.key")
                    try attempt.unlock(passphrase: try secure(other))
                    rotated = true
                } catch KeychainStatus.authFailed { rotated = false }
                if rotated { swap(&passphrase, &other) }
                outcomes.append(result.status == 0 ? "finished" : rotated ? "rotated-then-killed" : "old")
                let now = try Keychain.open(at: vault, deviceKeyPath: state + "/keychainfs/device.key")
                try now.unlock(passphrase: try secure(passphrase))
                #expect(try snapshot(now) == expected, "round \(round): contents changed")
                #expect(try now.verify(passphrase: try secure(passphrase)).isClean, "round \(round)")
                expectError(.authFailed) { try now.verify(passphrase: try secure(other)) }
            }
            // Shown with the test's output: which rounds the kill landed before or after the commit.
            print("kill -9 rounds (a rotation takes \(Int(duration * 1000)) ms): \(outcomes)")
        }
    }
}

extension RotationTests {
    static func size(_ path: String) -> Int64 {
        var st = stat()
        return stat(path, &st) == 0 ? Int64(st.st_size) : 0
    }
}

/// Checkpoints and copies a vault file (an honest copy of it as it is now).
func snapshotCopy(_ path: String, _ copy: String) throws -> String {
    try RawDB(path).exec("PRAGMA wal_checkpoint(TRUNCATE)")
    try FileManager.default.copyItem(atPath: path, toPath: copy)
    return copy
}
