import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// Issue 26: every face a client of the one keychain service. With the vault mounted, the CLI,
// both credential helpers and `kc://` answer through the service's API socket with nothing to
// unlock the vault with, whatever name the vault is given (a hard link, a symlink); a write is
// read back at once through the mount and survives a remount; each read is one audit line.
@Suite("one door: the faces through the keychain service", .serialized)
struct OneDoorTests {
    @Test("with the vault mounted, the CLI and both helpers answer without a passphrase; unmounted, they ask for one")
    func answersWithoutPassphrase() throws {
        try withSandbox { box in
            try box.addGeneric("github", "alice", "s3cret")
            // Unmounted: nothing can unlock the vault, so the CLI fails and says why.
            let before = try box.cliWithoutPassphrase([
                "find-generic-password", "--vault", box.vault, "-s", "github", "-w",
            ])
            #expect(before.status != 0, "no service, no passphrase: \(before.summary)")
            #expect(before.stderr.contains("passphrase"), "the reason: \(before.stderr)")

            try box.mount()
            let cli = try box.cliWithoutPassphrase([
                "find-generic-password", "--vault", box.vault, "-s", "github", "-w",
            ])
            #expect(cli.status == 0, "find through the service: \(cli.summary)")
            #expect(cli.stdout == "s3cret\n")

            let stored = try box.gitHelper(
                ["--vault", box.vault, "store"], "protocol=https\nhost=git.example.com\nusername=bob\npassword=tok1\n\n"
            )
            #expect(stored.status == 0, "git store through the service: \(stored.summary)")
            let got = try box.gitHelper(["--vault", box.vault, "get"], "protocol=https\nhost=git.example.com\n\n")
            #expect(got.status == 0 && got.stdout.contains("password=tok1\n"), "git get: \(got.summary)")
            // At once, through the mount.
            let cat = try box.run("/bin/cat", [box.mnt + "/inet/https:git.example.com/bob"])
            #expect(cat.stdout == "tok1", "the mount shows the helper's write: \(cat.summary)")

            let docker = try box.dockerHelper(
                ["--vault", box.vault, "store"], #"{"ServerURL":"registry.example.com","Username":"zed","Secret":"zt"}"#
            )
            #expect(docker.status == 0, "docker store through the service: \(docker.summary)")
            let dget = try box.dockerHelper(["--vault", box.vault, "get"], "registry.example.com\n")
            #expect(dget.stdout.contains(#""Secret":"zt""#), "docker get: \(dget.summary)")
        }
    }

    @Test(
        "CLI and helper writes through a hard link and a symlink to the mounted vault are read back at once through the mount and survive a remount"
    )
    func otherNamesOfTheVault() throws {
        try withMount { box in
            let hard = box.root + "/hard.vault", soft = box.root + "/soft.vault"
            #expect(link(box.vault, hard) == 0)
            #expect(symlink(box.vault, soft) == 0)
            for (n, name) in [hard, soft].enumerated() {
                let add = try box.cliWithoutPassphrase(
                    ["add-generic-password", "--vault", name, "-s", "linked", "-a", "acct\(n)"],
                    stdin: Array("v\(n)".utf8))
                #expect(add.status == 0, "add through \(name): \(add.summary)")
                let cat = try box.run("/bin/cat", [box.mnt + "/genp/linked/acct\(n)"])
                #expect(cat.stdout == "v\(n)", "the mount at once: \(cat.summary)")
                let update = try box.cliWithoutPassphrase(
                    ["add-generic-password", "--vault", name, "-s", "linked", "-a", "acct\(n)", "-U"],
                    stdin: Array("w\(n)".utf8))
                #expect(update.status == 0, "update through \(name): \(update.summary)")
                #expect(try box.run("/bin/cat", [box.mnt + "/genp/linked/acct\(n)"]).stdout == "w\(n)")
                let git = try box.gitHelper(
                    ["--vault", name, "store"], "protocol=https\nhost=h\(n).example\nusername=u\npassword=p\(n)\n\n")
                #expect(git.status == 0, "git store through \(name): \(git.summary)")
                #expect(try box.run("/bin/cat", [box.mnt + "/inet/https:h\(n).example/u"]).stdout == "p\(n)")
            }
            // The mount keeps writing after them: no write went behind its back.
            #expect(try box.sh("printf after > \(q(box.mnt))/genp/linked/after").status == 0)
            try box.unmount()
            // A link removed as docs/paths.md advises takes nothing with it.
            #expect(unlink(hard) == 0)
            try box.mount()
            for n in 0..<2 {
                #expect(try box.run("/bin/cat", [box.mnt + "/genp/linked/acct\(n)"]).stdout == "w\(n)")
                #expect(try box.run("/bin/cat", [box.mnt + "/inet/https:h\(n).example/u"]).stdout == "p\(n)")
            }
            #expect(try box.run("/bin/cat", [box.mnt + "/genp/linked/after"]).stdout == "after")
        }
    }

    @Test(
        "one item read through the mount, the CLI, git, docker and kc:// gives the same bytes, and each read is one audit line"
    )
    func sameBytesEveryFace() throws {
        try withMount { box in
            let secret = "pa ss=wörd"
            let docker = try box.dockerHelper(
                ["--vault", box.vault, "store"],
                #"{"ServerURL":"https://same.example.com","Username":"u","Secret":"\#(secret)"}"#)
            try #require(docker.status == 0, "docker store: \(docker.summary)")
            let auditBefore = box.audit.split(separator: "\n").count

            let mount = try box.run("/bin/cat", [box.mnt + "/inet/https:same.example.com/u"])
            let cli = try box.cliWithoutPassphrase(
                ["find-internet-password", "--vault", box.vault, "-s", "same.example.com", "-a", "u", "-w"])
            let git = try box.gitHelper(["--vault", box.vault, "get"], "protocol=https\nhost=same.example.com\n\n")
            let dget = try box.dockerHelper(["--vault", box.vault, "get"], "https://same.example.com\n")
            let kc = try box.cliWithoutPassphrase(
                ["inject", "--vault", box.vault], stdin: Array("{{ kc://inet/same.example.com/u }}".utf8))

            #expect(mount.stdout == secret, "mount: \(mount.summary)")
            #expect(cli.stdout == secret + "\n", "cli: \(cli.summary)")
            #expect(git.stdout.contains("password=\(secret)\n"), "git: \(git.summary)")
            #expect(dget.stdout.contains(#""Secret":"\#(secret)""#), "docker: \(dget.summary)")
            #expect(kc.stdout == secret, "kc://: \(kc.summary)")

            let lines = box.audit.split(separator: "\n").dropFirst(auditBefore)
            let reads = lines.filter { $0.contains(" op=read ") || $0.contains(" op=open-read ") }
            // mount, CLI, git, docker, kc://: five reads, one line each.
            #expect(reads.count == 5, "read lines:\n\(reads.joined(separator: "\n"))")
            #expect(reads.filter { $0.contains("via=api") }.count == 4)
            // The mount's read went through its door too: its line names the face and the vault.
            #expect(reads.filter { $0.contains(" op=open-read allow via=fuse vault=/") }.count == 1, "\(reads)")
            #expect(reads.allSatisfy { $0.contains(" vault=/") && !$0.contains(secret) })
        }
    }

    @Test(
        "git's extras are their own field: the password alone through the mount (its size too), the CLI, netrc and kc://; git gets them back, after an attribute change too; new data through the mount drops them"
    )
    func gitExtrasAreTheirOwnField() throws {
        try withMount { box in
            let future = Int(Date().timeIntervalSince1970) + 3600
            let store = try box.gitHelper(
                ["--vault", box.vault, "store"],
                "protocol=https\nhost=extras.example.com\nusername=tok\npassword=short-lived\npassword_expiry_utc=\(future)\noauth_refresh_token=refresh-me\n\n"
            )
            try #require(store.status == 0, "git store: \(store.summary)")
            let file = box.mnt + "/inet/https:extras.example.com/tok"
            let mount = try box.run("/bin/cat", [file])
            let size = try box.run("/usr/bin/stat", ["-c", "%s", file])
            let cli = try box.cliWithoutPassphrase(
                ["find-internet-password", "--vault", box.vault, "-s", "extras.example.com", "-a", "tok", "-w"])
            let kc = try box.cliWithoutPassphrase(
                ["inject", "--vault", box.vault], stdin: Array("{{ kc://inet/extras.example.com/tok }}".utf8))
            // Shown in /views/netrc (an attribute change, which keeps the extras).
            let described = try box.run(
                "/usr/bin/setfattr", ["-n", "user.keychain.description", "-v", "netrc", file])
            #expect(described.status == 0, "\(described.summary)")
            let netrc = try box.run("/bin/cat", [box.mnt + "/views/netrc"])
            let xattr = try box.run(
                "/usr/bin/getfattr", ["--only-values", "-n", "user.keychain.secretExtrasLength", file])
            #expect(mount.stdout == "short-lived", "mount: \(mount.summary)")
            #expect(size.stdout == "11\n", "the file's size is the password's: \(size.summary)")
            #expect(cli.stdout == "short-lived\n", "cli: \(cli.summary)")
            #expect(kc.stdout == "short-lived", "kc://: \(kc.summary)")
            #expect(
                netrc.stdout.contains("password short-lived") && !netrc.stdout.contains("refresh-me"),
                "netrc: \(netrc.summary)")
            #expect(xattr.stdout == "\("password_expiry_utc=\(future)\noauth_refresh_token=refresh-me\n".utf8.count)")
            for output in [mount.stdout, cli.stdout, kc.stdout, netrc.stdout, xattr.stdout] {
                #expect(!output.contains("refresh-me") && !output.contains("\u{0}"))
            }

            let get = try box.gitHelper(["--vault", box.vault, "get"], "protocol=https\nhost=extras.example.com\n\n")
            #expect(
                get.stdout.contains("password=short-lived\n") && get.stdout.contains("password_expiry_utc=\(future)\n")
                    && get.stdout.contains("oauth_refresh_token=refresh-me\n"), "git get: \(get.summary)")

            // A new password written through the mount: the old one's expiry and token go with it.
            let write = try box.run("/bin/sh", ["-c", "printf new-password > '\(file)'"])
            #expect(write.status == 0, "\(write.summary)")
            let after = try box.gitHelper(["--vault", box.vault, "get"], "protocol=https\nhost=extras.example.com\n\n")
            #expect(after.stdout.contains("password=new-password\n"), "git get: \(after.summary)")
            #expect(!after.stdout.contains("oauth_refresh_token") && !after.stdout.contains("password_expiry_utc"))
        }
    }
}
