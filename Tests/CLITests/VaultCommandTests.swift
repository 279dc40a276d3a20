import Foundation
import Testing

/// init, passwd, opening and locating vaults, passphrase sources.
@Suite("Vault commands")
struct VaultCommandTests {

    @Test("init creates a 0600 vault and its device key, and says so on stderr only")
    func initCreatesVault() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        let r = try box.run(["init", "--kdf", "interactive"] + box.unlock)
        expectSuccess(r)
        #expect(r.stdout.isEmpty)
        #expect(r.stderr.contains(box.vault))
        #expect(FileManager.default.fileExists(atPath: box.vault))
        #expect(fileMode(box.vault) == 0o600)
        #expect(fileMode(box.stateHome + "/keychainfs/device.key") == 0o600)

        // The new vault is empty and opens with the passphrase.
        let dump = try box.run(["dump-keychain", "--json"] + box.unlock)
        expectSuccess(dump)
        #expect(try parseDump(dump).isEmpty)
    }

    @Test("init refuses to overwrite an existing file and leaves it unchanged")
    func initRefusesToOverwrite() throws {
        _ = try requireBinary()
        let box = try Sandbox()

        // An arbitrary file.
        let original = Array("precious data, not a vault\n".utf8)
        try box.writeFile(box.vault, original)
        let r1 = try box.run(["init", "--kdf", "interactive"] + box.unlock)
        #expect(r1.status != 0)
        #expect(fileBytes(box.vault) == original)
        expectError(r1, 48, mentions: ["already exists"])  // errSecDuplicateKeychain −25296

        // An existing vault with an item in it: still there, still the same bytes.
        let box2 = try Sandbox()
        try box2.initVault()
        let secret = Array(randomToken("keep-").utf8)
        expectSuccess(try box2.addGeneric(service: "kept", secret: secret))
        let before = fileBytes(box2.vault)
        let other = try box2.passphraseFile(named: "other", randomToken("other-"))
        let r2 = try box2.run(["init", "--kdf", "interactive", "--vault", box2.vault, "--passphrase-file", other])
        #expect(r2.status != 0)
        #expect(r2.stderr.hasPrefix("keychainfs: error: "))
        #expect(fileBytes(box2.vault) == before)
        #expect(try box2.findGenericSecret(service: "kept").1 == secret)
    }

    @Test("wrong passphrase: exit 51 (errSecAuthFailed, as `security`), one line that mentions the passphrase")
    func wrongPassphrase() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        let secret = Array(randomToken("s-").utf8)
        expectSuccess(try box.addGeneric(service: "svc", secret: secret))
        let wrong = try box.passphraseFile(named: "wrong", randomToken("wrong-"))
        for args in [
            ["find-generic-password", "-s", "svc", "-w"], ["find-generic-password", "-s", "svc"],
            ["dump-keychain", "-d"], ["delete-generic-password", "-s", "svc"],
        ] {
            let r = try box.run([args[0], "--vault", box.vault, "--passphrase-file", wrong] + args.dropFirst())
            expectError(r, 51, mentions: ["passphrase"])
        }
        // add with the wrong passphrase stores nothing (and must not echo the secret).
        let other = Array(randomToken("never-stored-").utf8)
        box.registerSecret(other)
        let r = try box.run(
            ["add-generic-password", "--vault", box.vault, "--passphrase-file", wrong, "-s", "new"], stdin: other)
        expectError(r, 51, mentions: ["passphrase"])
        expectError(try box.run(["find-generic-password"] + box.unlock + ["-s", "new"]), 44)
        // Nothing was harmed.
        #expect(try box.findGenericSecret(service: "svc").1 == secret)
    }

    @Test("a missing vault: exit 50 (errSecNoSuchKeychain), 'no vault at <path>', and no file is created")
    func missingVault() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        for args in [
            ["find-generic-password", "-s", "x"], ["add-generic-password", "-s", "x", "-w", "value-not-secret"],
            ["delete-generic-password", "-s", "x"], ["dump-keychain"],
            ["passwd", "--new-passphrase-file", box.passphraseFile],
        ] {
            let r = try box.run([args[0]] + box.unlock + args.dropFirst())
            expectError(r, 50, mentions: ["no vault at", box.vault])
        }
        #expect(!FileManager.default.fileExists(atPath: box.vault))
    }

    @Test("a file that is not a vault: exit 93 (errSecDecode), 'not a keychainfs vault', file untouched")
    func notAVault() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        let cases: [(String, [UInt8])] = [
            ("text", Array(String(repeating: "hello, this is a text file\n", count: 200).utf8)),
            ("empty", []),
            ("random", (0..<8192).map { _ in UInt8.random(in: 0...255) }),
        ]
        for (name, contents) in cases {
            let path = box.root + "/\(name).vault"
            try box.writeFile(path, contents)
            for args in [["find-generic-password", "-s", "x"], ["dump-keychain"]] {
                let r = try box.run(
                    [args[0], "--vault", path, "--passphrase-file", box.passphraseFile] + args.dropFirst())
                expectError(r, 93, mentions: ["not a keychainfs vault"])
            }
            #expect(fileBytes(path) == contents, "\(name) file was modified")
        }
        // A directory is not a vault either.
        let dir = box.root + "/dir.vault"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: false)
        expectError(
            try box.run(["dump-keychain", "--vault", dir, "--passphrase-file", box.passphraseFile]), 93,
            mentions: ["not a keychainfs vault"])
    }

    @Test("passwd: the old passphrase stops working, the new one works, items are intact")
    func passwdChangesPassphrase() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        let s1 = Array(randomToken("one-").utf8), s2: [UInt8] = Array(randomToken("two-").utf8) + [0, 1, 2, 10]
        expectSuccess(try box.addGeneric(service: "svc1", account: "alice", secret: s1))
        expectSuccess(try box.addGeneric(service: "svc2", secret: s2))

        let newPass = randomToken("new-pass-")
        let newFile = try box.passphraseFile(named: "new-passphrase", newPass)
        let r = try box.run(["passwd", "--kdf", "interactive"] + box.unlock + ["--new-passphrase-file", newFile])
        expectSuccess(r)
        #expect(r.stdout.isEmpty)

        // Old passphrase: refused.
        expectError(
            try box.run(["find-generic-password", "-s", "svc1", "-w"] + box.unlock), 51, mentions: ["passphrase"])
        // And passwd with a wrong current passphrase is refused too.
        let third = try box.passphraseFile(named: "third", randomToken("third-"))
        expectError(
            try box.run(["passwd"] + box.unlock + ["--new-passphrase-file", third]), 51, mentions: ["passphrase"])

        // New passphrase: every item and its exact bytes.
        let withNew = ["--vault", box.vault, "--passphrase-file", newFile]
        let f1 = try box.run(["find-generic-password"] + withNew + ["-s", "svc1", "-a", "alice", "-w"])
        #expect(f1.status == 0)
        #expect(f1.stdout == s1 + [10])
        let f2 = try box.run(["find-generic-password"] + withNew + ["-s", "svc2", "-w"])
        #expect(f2.stdout == s2 + [10])
        let dump = try box.run(["dump-keychain", "--json"] + withNew)
        #expect(try parseDump(dump).count == 2)
        // Still writable.
        let s3 = Array(randomToken("three-").utf8)
        box.registerSecret(s3)
        expectSuccess(try box.run(["add-generic-password"] + withNew + ["-s", "svc3"], stdin: s3))
    }

    @Test("--passphrase-fd 0: the passphrase on stdin, the secret given with -w")
    func passphraseOnStdin() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        let stdinPass = Array((box.passphrase + "\n").utf8)
        let r0 = try box.run(
            ["init", "--kdf", "interactive", "--vault", box.vault, "--passphrase-fd", "0"], stdin: stdinPass)
        expectSuccess(r0)
        let secret = randomToken("fd0-secret-")
        box.registerSecret(Array(secret.utf8))
        expectSuccess(
            try box.run(
                ["add-generic-password", "--vault", box.vault, "--passphrase-fd", "0", "-s", "svc", "-w", secret],
                stdin: stdinPass))
        // Without a trailing newline works the same (one trailing newline is dropped, not required).
        let r = try box.run(
            ["find-generic-password", "--vault", box.vault, "--passphrase-fd", "0", "-s", "svc", "-w"],
            stdin: Array(box.passphrase.utf8))
        #expect(r.status == 0)
        #expect(r.stdout == Array((secret + "\n").utf8))
        // The file-based passphrase (same text) opens the same vault.
        #expect(try box.findGenericSecret(service: "svc").1 == Array(secret.utf8))
        // A wrong one on the descriptor fails like a wrong file.
        expectError(
            try box.run(
                ["find-generic-password", "--vault", box.vault, "--passphrase-fd", "0", "-s", "svc"],
                stdin: Array("not-the-passphrase\n".utf8)), 51, mentions: ["passphrase"])
        // An empty descriptor is an empty passphrase.
        expectError(
            try box.run(
                ["find-generic-password", "--vault", box.vault, "--passphrase-fd", "0", "-s", "svc"],
                stdin: []), 1, mentions: ["passphrase"])
    }

    @Test("--passphrase-fd 3: passphrase on an extra descriptor while the secret comes on stdin")
    func passphraseOnExtraDescriptor() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        let pass = Array((box.passphrase + "\n").utf8)
        let secret: [UInt8] = Array(randomToken("fd3-secret-").utf8) + [0, 255, 10]
        box.registerSecret(secret)
        let add = try box.runSpawned(
            ["add-generic-password", "--vault", box.vault, "--passphrase-fd", "3", "-s", "fd3"],
            stdin: secret, extraFD: pass, as: 3)
        expectSuccess(add)
        let find = try box.runSpawned(
            ["find-generic-password", "--vault", box.vault, "--passphrase-fd", "3", "-s", "fd3", "-w"],
            extraFD: pass, as: 3)
        #expect(find.status == 0, "\(find.stderr)")
        #expect(find.stdout == secret + [10])
        // A descriptor that is not open: exit 1, one line.
        let closed = try box.runSpawned(
            ["find-generic-password", "--vault", box.vault, "--passphrase-fd", "7", "-s", "fd3"],
            extraFD: pass, as: 3)
        expectError(closed, 1, mentions: ["descriptor 7"])
        // Both sources at once is a usage error.
        expectError(
            try box.run([
                "find-generic-password", "--vault", box.vault, "--passphrase-fd", "3",
                "--passphrase-file", box.passphraseFile, "-s", "fd3",
            ]), 2)
    }

    @Test("no passphrase source and no terminal: exit 1 with a hint")
    func noPassphraseSource() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        // Spawned in a new session, so there is no /dev/tty to prompt on even when the
        // suite itself runs in a terminal.
        expectError(try box.runSpawned(["dump-keychain", "--vault", box.vault]), 1, mentions: ["--passphrase-file"])
        expectError(
            try box.runSpawned(["init", "--vault", box.root + "/new.vault"]), 1, mentions: ["--passphrase-file"])
        #expect(!FileManager.default.fileExists(atPath: box.root + "/new.vault"))
    }

    @Test("KEYCHAINFS_VAULT selects the vault when --vault is absent; --vault wins over it")
    func vaultFromEnvironment() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        let envVault = box.root + "/from-env.vault"
        let env: [String: String?] = ["KEYCHAINFS_VAULT": envVault]
        let pp = ["--passphrase-file", box.passphraseFile]
        expectSuccess(try box.run(["init", "--kdf", "interactive"] + pp, env: env))
        #expect(FileManager.default.fileExists(atPath: envVault))
        #expect(!FileManager.default.fileExists(atPath: box.dataHome + "/keychainfs/default.vault"))

        let secret = Array(randomToken("env-").utf8)
        box.registerSecret(secret)
        expectSuccess(try box.run(["add-generic-password"] + pp + ["-s", "env-svc"], stdin: secret, env: env))
        let found = try box.run(["find-generic-password"] + pp + ["-s", "env-svc", "-w"], env: env)
        #expect(found.stdout == secret + [10])

        // --vault overrides the variable.
        expectSuccess(try box.run(["init", "--kdf", "interactive"] + box.unlock, env: env))
        expectError(try box.run(["find-generic-password"] + box.unlock + ["-s", "env-svc"], env: env), 44)
        // Without the variable the default (XDG) vault is used, and it does not exist.
        expectError(
            try box.run(["find-generic-password"] + pp + ["-s", "env-svc"]), 50,
            mentions: ["no vault at", box.dataHome + "/keychainfs/default.vault"])
    }

    @Test("default vault: $XDG_DATA_HOME/keychainfs/default.vault, else ~/.local/share/…")
    func defaultVaultPath() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        let pp = ["--passphrase-file", box.passphraseFile]
        let xdgVault = box.dataHome + "/keychainfs/default.vault"
        expectSuccess(try box.run(["init", "--kdf", "interactive"] + pp))
        #expect(fileMode(xdgVault) == 0o600)
        #expect(fileMode(box.dataHome + "/keychainfs") == 0o700)
        let secret = Array(randomToken("default-").utf8)
        box.registerSecret(secret)
        expectSuccess(try box.run(["add-generic-password"] + pp + ["-s", "d"], stdin: secret))
        #expect(try box.run(["find-generic-password"] + pp + ["-s", "d", "-w"]).stdout == secret + [10])
        #expect(
            try box.run(["find-generic-password", "--vault", xdgVault] + pp + ["-s", "d", "-w"]).stdout == secret + [10]
        )

        // XDG_DATA_HOME unset, or relative (ignored per the XDG spec): $HOME/.local/share.
        let homeVault = box.home + "/.local/share/keychainfs/default.vault"
        expectSuccess(try box.run(["init", "--kdf", "interactive"] + pp, env: ["XDG_DATA_HOME": nil]))
        #expect(fileMode(homeVault) == 0o600)
        expectError(
            try box.run(["find-generic-password"] + pp + ["-s", "d"], env: ["XDG_DATA_HOME": "relative/dir"]), 44)
    }
}
