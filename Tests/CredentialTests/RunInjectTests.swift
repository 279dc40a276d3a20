import Foundation
import KeychainCredentials
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `keychainfs run` and `keychainfs inject` through the CLI, with real vaults and real children.
@Suite("run and inject")
struct RunInjectTests {
    func seed(_ box: TestSandbox) throws {
        try box.addGeneric("db", "app", "s3cr3t-db-value")
        try box.addGeneric("db", "admin", "admin-value-77")
        try box.addInternet(["-s", "api.example.com", "-r", "https", "-a", "bot"], "api-token-9x")
        try box.addInternet(["-s", "api.example.com", "-r", "http", "-a", "bot"], "plain-http-token")
    }

    @Test func runHandsSecretsToTheChildOnlyAndMasksThem() throws {
        try withSandbox(#function) { box in
            try seed(box)
            let bin = try requireBinary()
            let seen = box.root + "/seen"
            // The child saves what it got (so the test knows the real value arrived), prints it on
            // both streams, once split across two writes with a pause, and exits 3.
            let child = """
                import os, sys, time
                v = os.environ['DB']
                open(sys.argv[1], 'w').write(v + '|' + os.environ['API'] + '|' + os.environ['PLAIN'])
                print('db=' + v, flush=True)
                sys.stdout.write(os.environ['API'][:5]); sys.stdout.flush(); time.sleep(0.3)
                sys.stdout.write(os.environ['API'][5:] + '\\n'); sys.stdout.flush()
                print('err ' + v, file=sys.stderr, flush=True)
                time.sleep(float(sys.argv[2]))
                sys.exit(3)
                """
            let envFile = box.root + "/app.env"
            try Data("# the api\nAPI=\"kc://inet/api.example.com/bot?protocol=https\"\n".utf8)
                .write(to: URL(fileURLWithPath: envFile))
            let running = try box.spawn(
                bin,
                ["run"] + box.unlockArgs + ["--env-file", envFile, "--", "/usr/bin/python3", "-c", child, seen, "1"],
                env: ["DB": "kc://genp/db/app", "PLAIN": "not a reference"])
            // While the child runs: the secrets are in no one's argv or environment but the child's.
            #expect(waitUntil(10) { FileManager.default.fileExists(atPath: seen) })
            let ownEnvironment = FileManager.default.contents(atPath: "/proc/\(running.pid)/environ") ?? Data()
            let ownArgv = FileManager.default.contents(atPath: "/proc/\(running.pid)/cmdline") ?? Data()
            for secret in ["s3cr3t-db-value", "api-token-9x"] {
                #expect(ownEnvironment.range(of: Data(secret.utf8)) == nil, "run's own environment holds a secret")
                #expect(ownArgv.range(of: Data(secret.utf8)) == nil)
            }
            #expect(ownEnvironment.range(of: Data("kc://genp/db/app".utf8)) != nil)
            let r = running.wait(timeout: 30)
            #expect(r.status == 3, "the child's status is run's: \(r.summary)")
            #expect(try String(contentsOfFile: seen, encoding: .utf8) == "s3cr3t-db-value|api-token-9x|not a reference")
            #expect(r.stdout == "db=<concealed by keychainfs>\n<concealed by keychainfs>\n", "\(r.summary)")
            #expect(r.stderr == "err <concealed by keychainfs>\n", "\(r.summary)")

            let unmasked = try box.run(
                bin, ["run"] + box.unlockArgs + ["--no-masking", "--", "/bin/sh", "-c", "echo \"$DB\""],
                env: ["DB": "kc://genp/db/app"])
            #expect(unmasked.status == 0 && unmasked.stdout == "s3cr3t-db-value\n", "\(unmasked.summary)")
        }
    }

    @Test func runRefusesWhatItCannotResolve() throws {
        try withSandbox(#function) { box in
            try seed(box)
            let bin = try requireBinary()
            let marker = box.root + "/ran"
            func run(_ value: String, _ command: [String] = []) throws -> RunResult {
                try box.run(
                    bin, ["run"] + box.unlockArgs + ["--"] + (command.isEmpty ? ["/usr/bin/touch", marker] : command),
                    env: ["X": value])
            }
            let missing = try run("kc://genp/db/nobody")
            #expect(missing.status == 44 && missing.stderr.contains("kc://genp/db/nobody: no such item"))
            let ambiguous = try run("kc://genp/db")
            #expect(ambiguous.status == 206 && ambiguous.stderr.contains("matches 2 items"), "\(ambiguous.summary)")
            let ambiguousInet = try run("kc://inet/api.example.com/bot")
            #expect(ambiguousInet.status == 206, "\(ambiguousInet.summary)")
            let malformed = try run("kc://keys/x")
            #expect(malformed.status == 206 && malformed.stderr.contains("bad reference"), "\(malformed.summary)")
            #expect(!FileManager.default.fileExists(atPath: marker), "the command ran despite a failed reference")
            let notFound = try run("plain", ["no-such-command-here"])
            #expect(notFound.status == 127, "\(notFound.summary)")
            let noCommand = try box.run(bin, ["run"] + box.unlockArgs)
            #expect(noCommand.status == 2, "\(noCommand.summary)")
            // No reference at all: the vault is not even opened (no passphrase needed).
            let plain = try box.run(bin, ["run", "--vault", box.vault, "--", "/bin/sh", "-c", "exit 7"])
            #expect(plain.status == 7, "\(plain.summary)")
        }
    }

    @Test func endingRunEndsTheCommand() throws {
        try withSandbox(#function) { box in
            let bin = try requireBinary()
            for masking in [true, false] {
                let run = try box.spawn(
                    bin,
                    ["run", "--vault", box.vault] + (masking ? [] : ["--no-masking"]) + ["--", "/bin/sleep", "30"])
                var child: pid_t?
                waitUntil(10) {
                    let pids = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap {
                        pid_t($0)
                    }
                    child = pids.first { TestSandbox.parent(of: $0) == run.pid }
                    return child != nil
                }
                let sleeper = try #require(child, "run started no child")
                #expect(kill(run.pid, SIGTERM) == 0)
                let r = run.wait(timeout: 10)
                #expect(!r.timedOut && r.status == 128 + SIGTERM, "masking \(masking): \(r.summary)")
                #expect(waitUntil(5) { !TestSandbox.isAlive(sleeper) }, "the command outlived run")
            }
        }
    }

    @Test func injectWritesAPrivateFileAndNeverOverwritesUnasked() throws {
        try withSandbox(#function) { box in
            try seed(box)
            let template = box.root + "/config.tpl", out = box.w + "/config.ini"
            try Data(
                "db = {{ kc://genp/db/app }}\napi={{kc://inet/api.example.com/bot?protocol=https}}\nkeep={{ name }}\n"
                    .utf8
            ).write(to: URL(fileURLWithPath: template))
            let first = try box.cli(["inject"] + box.unlockArgs + ["-i", template, "-o", out])
            #expect(first.status == 0 && first.stdout.isEmpty, "\(first.summary)")
            #expect(
                try String(contentsOfFile: out, encoding: .utf8)
                    == "db = s3cr3t-db-value\napi=api-token-9x\nkeep={{ name }}\n")
            var info = stat()
            #expect(stat(out, &info) == 0 && info.st_mode & 0o777 == 0o600 && info.st_uid == getuid())

            try Data("mine\n".utf8).write(to: URL(fileURLWithPath: out))
            let refused = try box.cli(["inject"] + box.unlockArgs + ["-i", template, "-o", out])
            #expect(refused.status == 1 && refused.stderr.contains("--force"), "\(refused.summary)")
            #expect(try String(contentsOfFile: out, encoding: .utf8) == "mine\n")
            chmod(out, 0o644)
            let forced = try box.cli(["inject"] + box.unlockArgs + ["-i", template, "-o", out, "--force"])
            #expect(forced.status == 0, "\(forced.summary)")
            #expect(try String(contentsOfFile: out, encoding: .utf8).hasPrefix("db = s3cr3t-db-value\n"))
            #expect(stat(out, &info) == 0 && info.st_mode & 0o777 == 0o600)

            // A reference that resolves to nothing: exit 44, no file, no temporary left behind.
            let bad = box.w + "/bad.ini"
            let missing = try box.cli(
                ["inject"] + box.unlockArgs + ["-o", bad], stdin: Array("x={{ kc://genp/db/ghost }}\n".utf8))
            #expect(missing.status == 44, "\(missing.summary)")
            #expect(!FileManager.default.fileExists(atPath: bad))
            #expect(try FileManager.default.contentsOfDirectory(atPath: box.w).sorted() == ["config.ini"])
            // To stdout when no -o is given.
            let toStdout = try box.cli(["inject"] + box.unlockArgs, stdin: Array("{{ kc://genp/db/admin }}".utf8))
            #expect(toStdout.status == 0 && toStdout.stdout == "admin-value-77", "\(toStdout.summary)")
        }
    }

    @Test func maskerMasksSecretsAcrossEveryChunkBoundary() {
        let secrets = [Array("abcdef".utf8), Array("abc".utf8), Array("zz".utf8)]
        let text = Array("x abcdef y abc zabcdezz abcabcdef".utf8)
        let expected = "x <c> y <c> z<c>de<c> <c><c>".replacingOccurrences(
            of: "<c>", with: String(decoding: SecretMasker.placeholder, as: UTF8.self))
        for cut in 0...text.count {
            var masker = SecretMasker(secrets: secrets)
            let out = masker.feed(Array(text[..<cut])) + masker.feed(Array(text[cut...])) + masker.finish()
            #expect(String(decoding: out, as: UTF8.self) == expected, "cut at \(cut)")
        }
        // Bytes that cannot start a secret are not held back.
        var masker = SecretMasker(secrets: secrets)
        #expect(masker.feed(Array("hello a".utf8)) == Array("hello ".utf8))
    }
}
