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
            (["dump-keychain"], result(out: Array(secret.prefix(25)))),  // a piece of it
            (["dump-keychain", "--json"], result(out: Array(Data(secret).base64EncodedString().utf8))),
            (["find-generic-password", "-w"], result(out: pass)),  // passphrases: never
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

/// The shared runner and mount-table parser (TestSupport) that every test target relies on.
@Suite("TestSupport")
struct TestSupportSelfTests {
    @Test("runner: argv, stdin bytes, environment, working directory, extra descriptor, exit status")
    func runner() throws {
        try withTempDirectory { dir in
            let script =
                #"printf '%s|' "$0" "$1"; cat; printf '|%s|%s|' "$KCFS_X" "$(pwd)"; cat <&3; echo err >&2; exit 7"#
            let r = try runProcess(
                "/bin/sh", ["-c", script, "a b", "ü"], stdin: [0, 1, 2], extraDescriptors: [3: Array("fd3".utf8)],
                env: childEnvironment(["KCFS_X": "x=y"]), cwd: dir, ioDirectory: dir)
            #expect(r.status == 7 && !r.timedOut, "\(r.summary)")
            #expect(r.stdoutBytes == Array("a b|ü|".utf8) + [0, 1, 2] + Array("|x=y|\(dir)|fd3".utf8), "\(r.summary)")
            #expect(r.stderr == "err\n")
            // Nothing of the run is left in the io directory.
            #expect((try FileManager.default.contentsOfDirectory(atPath: dir)).isEmpty)
        }
    }

    @Test("runner: no controlling terminal, no inherited descriptors, signals reported as 128+n")
    func isolation() throws {
        let r = try runProcess(
            "/bin/sh", ["-c", "ls /proc/self/fd; (: </dev/tty) 2>/dev/null && echo tty || echo notty; kill -TERM $$"],
            env: childEnvironment())
        #expect(r.status == 128 + SIGTERM, "\(r.summary)")
        #expect(r.lines.last == "notty", "the child has a controlling terminal: \(r.summary)")
        let fds = r.lines.filter { Int($0) != nil }.compactMap(Int.init)
        #expect(fds.allSatisfy { $0 <= 3 }, "descriptors leaked into the child: \(fds)")  // 3: ls's own directory
    }

    @Test("runner: a deadline ends the child's whole process group with status 124")
    func deadline() throws {
        let started = Date()
        let r = try runProcess("/bin/sh", ["-c", "sleep 30 & sleep 30"], env: childEnvironment(), timeout: 0.5)
        #expect(r.timedOut && r.status == 124, "\(r.summary)")
        #expect(Date().timeIntervalSince(started) < 10)
    }

    @Test("mountinfo: fields after the separator, octal escapes in paths")
    func mountInfo() {
        let text = """
            36 35 98:0 /mnt1 /mnt/with\\040space rw,noatime master:1 - fuse.keychainfs /tmp/v\\040x.vault rw,user_id=0
            37 35 98:0 / /proc rw shared:2 - proc proc rw
            garbage
            """
        let entries = MountInfo.parse(text)
        #expect(entries.count == 2)
        #expect(entries.first?.mountpoint == "/mnt/with space" && entries.first?.fstype == "fuse.keychainfs")
        #expect(entries.first?.source == "/tmp/v x.vault" && entries.first?.options == "rw,user_id=0")
        #expect(entries.last?.mountpoint == "/proc" && entries.last?.fstype == "proc")
        #expect(MountInfo.entries().contains { $0.mountpoint == "/" }, "the live table has a root")
    }
}
