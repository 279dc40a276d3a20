import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// Issue 26, point 2: "`keychainfs mount` starts it (or joins the running one)". With a service
// already holding the vault (`keychainfs serve`), `mount` asks it to mount the vault itself: no
// passphrase, one keychain, the mount one more face of the same service.
@Suite("mount joins a running service", .serialized)
struct JoinMountTests {
    @Test(
        "mount with serve running: no passphrase, the mount and the CLI see each other's writes at once, one lock state; unmount leaves the service; service-only options refused; SIGTERM unmounts"
    )
    func mountJoinsServe() throws {
        try withSandbox { box in
            box.onTeardown { _ = try? box.run("/usr/bin/fusermount3", ["-u", "-z", box.mnt]) }
            try box.addGeneric("before", "acct", "from before")
            let serve = try box.cli(["serve", box.vault, "--passphrase-file", box.passphraseFile])
            try #require(serve.status == 0, "serve: \(serve.summary)")
            let words = serve.stderr.split(separator: " ")
            let pid = try #require(
                words.firstIndex(of: "pid").flatMap { Int32(words[$0 + 1].prefix { $0.isNumber }) },
                "the daemon's pid in: \(serve.stderr)")
            box.onTeardown { kill(pid, SIGKILL) }

            // A service option is the running service's: refused by name, nothing mounted.
            let refused = try box.cliWithoutPassphrase(["mount", box.vault, box.mnt, "-o", "lock_after=60"])
            #expect(refused.status == 2 && refused.stderr.contains("-o lock_after"), "\(refused.summary)")
            #expect(!isMounted(box.mnt))

            let mount = try box.cliWithoutPassphrase(["mount", box.vault, box.mnt, "-o", "cache=0.5"])
            try #require(mount.status == 0, "mount joining serve: \(mount.summary)")
            #expect(mount.stderr.contains("joined the keychain service, pid \(pid)"), "\(mount.stderr)")
            #expect(isMounted(box.mnt))

            // Writes through either face are read back through the other at once.
            #expect(try box.run("/bin/cat", [box.mnt + "/genp/before/acct"]).stdout == "from before")
            let add = try box.cliWithoutPassphrase(
                ["add-generic-password", "--vault", box.vault, "-s", "joined", "-a", "cli", "-w", "via api"])
            #expect(add.status == 0, "\(add.summary)")
            #expect(try box.run("/bin/cat", [box.mnt + "/genp/joined/cli"]).stdout == "via api")
            let write = try box.run("/bin/sh", ["-c", "printf 'via mount' > '\(box.mnt)/genp/joined/fs'"])
            #expect(write.status == 0, "\(write.summary)")
            let find = try box.cliWithoutPassphrase(
                ["find-generic-password", "--vault", box.vault, "-s", "joined", "-a", "fs", "-w"])
            #expect(find.stdout == "via mount\n", "\(find.summary)")

            // One lock state: locked through the mount, the CLI through the API is refused too.
            #expect(try box.cli(["lock", box.mnt]).status == 0)
            let locked = try box.cliWithoutPassphrase([
                "find-generic-password", "--vault", box.vault, "-s", "joined", "-w",
            ])
            #expect(locked.status == 36, "locked through the mount, the API must answer locked: \(locked.summary)")
            #expect(try box.run("/bin/cat", [box.mnt + "/genp/joined/cli"]).status != 0)
            #expect(try box.cli(["unlock", box.mnt, "--passphrase-file", box.passphraseFile]).status == 0)
            #expect(try box.run("/bin/cat", [box.mnt + "/genp/joined/cli"]).stdout == "via api")

            // Unmounted, the service goes on; mounted again, it joins again.
            #expect(try box.cli(["unmount", box.mnt]).status == 0)
            #expect(waitUntil(5) { !isMounted(box.mnt) })
            #expect(box.isAlive(pid))
            let after = try box.cliWithoutPassphrase(
                ["find-generic-password", "--vault", box.vault, "-s", "joined", "-a", "cli", "-w"])
            #expect(after.stdout == "via api\n", "\(after.summary)")
            let again = try box.cliWithoutPassphrase(["mount", box.vault, box.mnt])
            #expect(again.status == 0, "\(again.summary)")
            // A second mount of the same service elsewhere is refused, naming the first.
            let elsewhere = box.root + "/second"
            try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
            let second = try box.cliWithoutPassphrase(["mount", box.vault, elsewhere])
            #expect(second.status != 0 && second.stderr.contains(box.mnt), "\(second.summary)")
            #expect(!isMounted(elsewhere))

            // The service stopping unmounts what it mounted.
            kill(pid, SIGTERM)
            #expect(waitUntil(10) { !box.isAlive(pid) }, "serve did not stop on SIGTERM")
            #expect(!isMounted(box.mnt), "the joined mount outlived its service")
        }
    }

    func isMounted(_ path: String) -> Bool {
        ((try? String(contentsOfFile: "/proc/self/mounts", encoding: .utf8)) ?? "").split(separator: "\n").contains {
            $0.split(separator: " ").dropFirst().first.map(String.init) == path
        }
    }
}
