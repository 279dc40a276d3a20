import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 14, items 7 and 9: one daemon per vault file whatever name reaches it
/// (Tests/FSTests/posix/second_mount.py), and the CLI's input rules (posix/cli_input.py).
@Suite("one daemon per vault, CLI input (issue 14)")
struct SecondMountTests {

    /// Checks that fail on the current code, each with what it does instead. Remove a name when its
    /// fix lands.
    static let knownFailing: [String: KnownFailure] = [:]

    @Test("second_mount.py: a hard link, a symlink or the same vault on a second mountpoint is refused")
    func secondMount() throws {
        let bin = try requireBinary()
        try withMount { box in
            let work = box.root + "/second"
            let m2 = work + "/m2"
            // Whatever the script leaves mounted (it unmounts its own), teardown takes it down first.
            box.onTeardown(beforeUnmount: "second-mount") {
                if MountInfo.isKeychainMount(m2) {
                    _ = try? runProcess("/usr/bin/fusermount3", ["-u", "-z", m2], env: childEnvironment(), timeout: 10)
                }
            }
            try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
            var args = [
                "--cli", bin, "--vault", box.vault, "--passphrase-file", box.passphraseFile, "--mounted", box.mnt,
                "--work", work,
            ]
            if let pid = box.daemonPid { args += ["--pid", String(pid)] }
            let run = try box.runPosixScript("second_mount.py", args, timeout: 120)
            expectChecks(run, knownFailing: Self.knownFailing.filter { $0.key.hasPrefix("second-mount/") })
            #expect(!MountInfo.isKeychainMount(m2), "the script left \(m2) mounted")
        }
    }

    @Test("cli_input.py: -s is required; invalid UTF-8 is refused naming the byte offset")
    func cliInput() throws {
        let bin = try requireBinary()
        try withSandbox { box in
            let run = try box.runPosixScript(
                "cli_input.py", ["--cli", bin, "--vault", box.vault, "--passphrase-file", box.passphraseFile],
                timeout: 120)
            expectChecks(run, knownFailing: Self.knownFailing.filter { $0.key.hasPrefix("cli/") })
        }
    }
}
