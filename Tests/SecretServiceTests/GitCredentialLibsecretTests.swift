import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// git's own Secret Service helper, built by the test from the contrib source Debian's git ships
/// (/usr/share/doc/git/contrib/credential/libsecret; libsecret-1-dev and a C compiler are in
/// `.ci/run`'s packages), against the provider on a private bus.
@Suite("git-credential-libsecret built from git's contrib source", .serialized)
struct GitCredentialLibsecretTests {
    static let source = "/usr/share/doc/git/contrib/credential/libsecret/git-credential-libsecret.c"

    /// Compiles the helper into the sandbox; the compiler's output on failure.
    static func build(_ box: TestSandbox) throws -> String {
        let helper = box.root + "/git-credential-libsecret"
        let r = try box.sh(
            "cc -O1 -o \(q(helper)) \(q(source)) $(pkg-config --cflags --libs glib-2.0 libsecret-1)", timeout: 120)
        try #require(r.status == 0, "git-credential-libsecret does not build: \(r.summary)")
        return helper
    }

    @Test(
        "approve stores an inet item (CLI and mount find it at once), fill reads it and a CLI-made item, reject erases it"
    )
    func approveFillReject() throws {
        try #require(FileManager.default.fileExists(atPath: Self.source), "git's contrib source is not installed")
        try withSecretService { box, bus in
            let helper = try Self.build(box)
            try box.mount()
            let environment = box.busEnvironment(bus.address).merging(["GIT_TERMINAL_PROMPT": "0"]) { $1 }
            func git(_ verb: String, _ input: String) throws -> RunResult {
                let config = ["-c", "credential.helper=", "-c", "credential.helper=\(helper)"]
                return try box.run(
                    "/usr/bin/git", config + ["credential", verb], stdin: Array(input.utf8), env: environment,
                    timeout: 30)
            }
            let approve = try git(
                "approve", "protocol=https\nhost=git.example.com\nusername=alice\npassword=lib-s3cret\n\n")
            #expect(approve.status == 0, "git credential approve: \(approve.summary)")
            // git's schema is a network password: an inet item, found by the CLI and the mount.
            let found = try box.cli(
                ["find-internet-password"] + box.unlockArgs + ["-s", "git.example.com", "-a", "alice", "-w"])
            #expect(found.status == 0 && found.stdout == "lib-s3cret\n", "CLI: \(found.summary)")
            let cat = try box.run("/usr/bin/cat", [box.mnt + "/inet/https:git.example.com/alice"], timeout: 15)
            #expect(cat.status == 0 && cat.stdout == "lib-s3cret", "cat through the mount: \(cat.summary)")

            let fill = try git("fill", "protocol=https\nhost=git.example.com\n\n")
            #expect(fill.status == 0, "git credential fill: \(fill.summary)")
            #expect(
                fill.stdout.contains("username=alice\n") && fill.stdout.contains("password=lib-s3cret\n"),
                "\(fill.stdout)")

            // An item the CLI made answers git's helper.
            let add = try box.cli(
                ["add-internet-password"] + box.unlockArgs + ["-s", "code.example.org", "-a", "bob", "-r", "htps"],
                stdin: Array("cli-made".utf8))
            #expect(add.status == 0, "\(add.summary)")
            let fillCLI = try git("fill", "protocol=https\nhost=code.example.org\n\n")
            #expect(
                fillCLI.stdout.contains("username=bob\n") && fillCLI.stdout.contains("password=cli-made\n"),
                "a CLI-made item through git-credential-libsecret: \(fillCLI.summary)")

            let reject = try git("reject", "protocol=https\nhost=git.example.com\nusername=alice\n\n")
            #expect(reject.status == 0, "git credential reject: \(reject.summary)")
            let gone = try box.cli(
                ["find-internet-password"] + box.unlockArgs + ["-s", "git.example.com", "-a", "alice", "-w"])
            #expect(gone.status == 44, "the rejected credential is still there: \(gone.summary)")
            let listing = try box.run("/bin/ls", [box.mnt + "/inet"], timeout: 15)
            #expect(!listing.stdout.contains("git.example.com"), "\(listing.summary)")
        }
    }
}
