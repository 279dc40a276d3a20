import Foundation
import Testing
import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 30, point 3: a watcher of the mount (inotifywait, as editors, `entr` and file managers
/// watch) hears a change made by another process through the service as it would on a local
/// directory, within 2 s, and the very next read through the mount shows the new state. The
/// daemon replays the change through its own mountpoint (ReplayPlan.swift); its own requests
/// make no audit line.
@Suite("inotify watchers of the mount hear changes made elsewhere (issue 30)")
struct WatcherTests {
    @Test(
        "a CLI add, data update and delete through the service: IN_CREATE, IN_MODIFY and IN_CLOSE_WRITE, IN_DELETE, each followed at once by the new state"
    )
    func cliChangesReachWatchers() throws {
        try withMount(setup: { try $0.addGeneric("w", "first", "one") }) { box in
            let genp = box.mnt + "/genp"
            _ = try box.run("/bin/ls", ["-R", genp])
            let watcher = try InotifyWatch.start(box, genp)
            defer { kill(watcher.pid, SIGTERM); _ = try? watcher.wait(timeout: 5) }
            let file = genp + "/w/alice"

            let add = try box.cli(["add-generic-password"] + box.unlockArgs + ["-s", "w", "-a", "alice", "-w", "s1"])
            try #require(add.status == 0, "add: \(add.summary)")
            var seen = InotifyWatch.expectEvent(watcher, ["CREATE"], file)
            #expect(try box.run("/bin/cat", [file]).stdout == "s1", "cat right after the add")

            let update = try box.cli(
                ["add-generic-password", "-U"] + box.unlockArgs + ["-s", "w", "-a", "alice", "-w", "second"])
            try #require(update.status == 0, "update: \(update.summary)")
            seen = InotifyWatch.expectEvent(watcher, ["MODIFY"], file, after: seen)
            InotifyWatch.expectEvent(watcher, ["CLOSE_WRITE"], file, after: seen)
            #expect(try box.run("/bin/cat", [file]).stdout == "second", "cat right after the update")
            var st = stat()
            #expect(stat(file, &st) == 0 && st.st_size == 6, "stat right after the update")

            // A new service: its directory is created first, then the item in it. (inotifywait
            // -r adds its watch on a new directory after hearing of it, so it may miss what is
            // made in it at once, as on any filesystem; it lists the directory then.)
            let fresh = try box.cli(
                ["add-generic-password"] + box.unlockArgs + ["-s", "fresh", "-a", "bob", "-w", "b"])
            try #require(fresh.status == 0, "add: \(fresh.summary)")
            seen = InotifyWatch.expectEvent(watcher, ["CREATE", "ISDIR"], genp + "/fresh", after: seen)
            #expect(try box.run("/bin/ls", [genp + "/fresh"]).stdout == "bob\n")

            let delete = try box.cli(["delete-generic-password"] + box.unlockArgs + ["-s", "w", "-a", "alice"])
            try #require(delete.status == 0, "delete: \(delete.summary)")
            InotifyWatch.expectEvent(watcher, ["DELETE"], file, after: seen)
            #expect(stat(file, &st) != 0 && errno == ENOENT, "stat right after the delete")
            #expect(try box.run("/bin/ls", [genp + "/w"]).stdout == "first\n", "ls right after the delete")

            // The last item of a service gone: its directory goes too.
            let last = try box.cli(["delete-generic-password"] + box.unlockArgs + ["-s", "fresh", "-a", "bob"])
            try #require(last.status == 0, "delete: \(last.summary)")
            InotifyWatch.expectEvent(watcher, ["DELETE", "ISDIR"], genp + "/fresh", after: seen)
            #expect(try box.run("/bin/ls", [genp]).stdout == "w\n", "ls of /genp right after")

            // The CLI's operations are audited once, through the API; the replays make no line.
            let lines = box.audit.split(separator: "\n")
            #expect(lines.filter { $0.contains("via=api") && $0.contains(" op=create") }.count == 2)
            #expect(lines.filter { $0.contains("via=api") && $0.contains(" op=delete") }.count == 2)
            #expect(
                !lines.contains {
                    $0.contains("via=fuse")
                        && ($0.contains(" op=create") || $0.contains(" op=delete") || $0.contains(" op=write"))
                },
                "a replay was audited: \(lines.joined(separator: "\n"))")
        }
    }

    @Test(
        "a commit another process made (the CLI, given the passphrase, opens the vault itself while the service is locked) reaches the watcher too"
    )
    func otherProcessCommitReachesWatchers() throws {
        try withMount(setup: { try $0.addGeneric("w", "first", "one") }) { box in
            let genp = box.mnt + "/genp"
            _ = try box.run("/bin/ls", ["-R", genp])
            let watcher = try InotifyWatch.start(box, genp)
            defer {
                kill(watcher.pid, SIGTERM)
                _ = watcher.wait(timeout: 5)
            }
            let lock = try box.cli(["lock", box.mnt])
            try #require(lock.status == 0, "lock: \(lock.summary)")
            let add = try box.cli(["add-generic-password"] + box.unlockArgs + ["-s", "w", "-a", "behind", "-w", "b"])
            try #require(add.status == 0, "add behind the locked service: \(add.summary)")
            InotifyWatch.expectEvent(watcher, ["CREATE"], genp + "/w/behind")
            #expect(try box.run("/bin/ls", [genp + "/w"]).stdout == "behind\nfirst\n")
        }
    }

    @Test("keys made and deleted by the CLI through the service: CREATE and DELETE in /keys, listed and gone at once")
    func keysReachWatchers() throws {
        try withMount { box in
            let keys = box.mnt + "/keys"
            let watcher = try InotifyWatch.start(box, keys)
            defer {
                kill(watcher.pid, SIGTERM)
                _ = watcher.wait(timeout: 5)
            }
            // A key pair: its private and public halves share the label, so /keys shows one name.
            let made = try box.cli(["create-keypair", "--vault", box.vault, "-a", "ed25519", "-l", "wkey"])
            try #require(made.status == 0, "create-keypair: \(made.summary)")
            let seen = InotifyWatch.expectEvent(watcher, ["CREATE"], keys + "/wkey")
            #expect(try box.run("/bin/ls", [keys]).stdout == "wkey\n", "ls right after create-keypair")
            let deleted = try box.cli(["delete-key", "--vault", box.vault, "-l", "wkey"])
            try #require(deleted.status == 0, "delete-key: \(deleted.summary)")
            InotifyWatch.expectEvent(watcher, ["DELETE"], keys + "/wkey", after: seen)
            #expect(try box.run("/bin/ls", [keys]).stdout == "", "ls right after delete-key")
            let creates = watcher.stdoutSoFar.split(separator: "\n").filter { $0 == "CREATE " + keys + "/wkey" }
            #expect(creates.count == 1, "the shared name was made once: \(watcher.stdoutSoFar)")
        }
    }
}
