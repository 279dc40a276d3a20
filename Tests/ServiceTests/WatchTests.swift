import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// Issue 30, point 4: `keychainfs watch` started as a process prints the changes other processes
// commit (through the keychain service, and from the vault directly), each within 2 s, in order,
// once; `--since` resumes without skipping; a change in an access group the watcher is not in is
// never shown; the vault's bytes hold no name in clear after the item is deleted. And point 1's
// premise for the daemon: a command that opens the vault itself while the service holds it
// (behind a locked service, with the passphrase) commits behind it, and the watch still hears it.
@Suite("keychainfs watch: the vault's changes as they commit", .serialized)
struct WatchTests {
    /// The JSON objects a spawned `watch --json` printed so far.
    static func objects(_ watch: Spawned) -> [[String: Any]] {
        watch.stdoutSoFar.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }

    static func start(_ box: TestSandbox, _ args: [String], passphrase: Bool = false) throws -> Spawned {
        let watch = try box.spawn(
            try requireBinary(),
            ["watch", "--json", "--vault", box.vault] + (passphrase ? ["--passphrase-file", box.passphraseFile] : [])
                + args,
            env: ["KEYCHAINFS_PASSPHRASE_FILE": nil, "CREDENTIALS_DIRECTORY": nil])
        try #require(
            waitUntil(15) { watch.stderrSoFar.contains("watching") || !watch.isRunning },
            "watch did not start: \(watch.stderrSoFar)")
        try #require(watch.isRunning, "watch ended: \(watch.stderrSoFar)")
        return watch
    }

    /// Waits up to 2 s for the watch's `count`th object and checks it.
    static func expectChange(
        _ watch: Spawned, _ count: Int, _ op: String, _ path: String, oldPath: String? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let arrived = waitUntil(2) { objects(watch).count >= count }
        #expect(arrived, "no \(op) of \(path) within 2 s: \(watch.stdoutSoFar)", sourceLocation: sourceLocation)
        guard arrived else { return }
        let object = objects(watch)[count - 1]
        #expect(
            object["op"] as? String == op && object["path"] as? String == path
                && object["oldPath"] as? String == oldPath && object["class"] as? String == "genp",
            "change \(count): \(object)", sourceLocation: sourceLocation)
    }

    /// Starts `keychainfs serve` for the sandbox's vault; its pid.
    static func serve(_ box: TestSandbox) throws -> pid_t {
        let serve = try box.cli(["serve", box.vault, "--passphrase-file", box.passphraseFile])
        try #require(serve.status == 0, "serve: \(serve.summary)")
        let words = serve.stderr.split(separator: " ")
        let pid = try #require(
            words.firstIndex(of: "pid").flatMap { Int32(words[$0 + 1].prefix { $0.isNumber }) }, "\(serve.stderr)")
        box.onTeardown { kill(pid, SIGKILL) }
        return pid
    }

    @Test(
        "through the service: an add, update, rename (mv in the mount) and delete by other processes, each within 2 s, in order, once; --since resumes"
    )
    func followsThroughTheService() throws {
        try withMount { box in
            let v = ["--vault", box.vault]
            let watch = try Self.start(box, [])
            let add = try box.cliWithoutPassphrase(
                ["add-generic-password", "-s", "watched", "-a", "alice", "-w", "one"] + v)
            #expect(add.status == 0, "add: \(add.summary)")
            Self.expectChange(watch, 1, "add", "genp/watched/alice")
            let update = try box.cliWithoutPassphrase(
                ["add-generic-password", "-U", "-s", "watched", "-a", "alice", "-w", "two"] + v)
            #expect(update.status == 0, "update: \(update.summary)")
            Self.expectChange(watch, 2, "update", "genp/watched/alice")
            let mv = try box.run("/bin/mv", [box.mnt + "/genp/watched/alice", box.mnt + "/genp/watched/bob"])
            #expect(mv.status == 0, "mv: \(mv.summary)")
            Self.expectChange(watch, 3, "rename", "genp/watched/bob", oldPath: "genp/watched/alice")
            let delete = try box.cliWithoutPassphrase(["delete-generic-password", "-s", "watched", "-a", "bob"] + v)
            #expect(delete.status == 0, "delete: \(delete.summary)")
            Self.expectChange(watch, 4, "delete", "genp/watched/bob")
            // Once each, numbered one after another, and nothing more.
            usleep(300_000)
            let seqs = Self.objects(watch).compactMap { $0["seq"] as? Int }
            #expect(seqs.count == 4 && zip(seqs, seqs.dropFirst()).allSatisfy { $1 == $0 + 1 }, "\(seqs)")
            // No secret: the secrets written are in no line.
            #expect(!watch.stdoutSoFar.contains("one") && !watch.stdoutSoFar.contains("two"))
            watch.kill(SIGTERM)

            // Resumed after the first: the other three, in order, then it exits (--once).
            guard let first = seqs.first else { return }
            let resumed = try box.cliWithoutPassphrase(["watch", "--json", "--once", "--since", "\(first)"] + v)
            #expect(resumed.status == 0, "\(resumed.summary)")
            #expect(resumed.lines.count == 3 && resumed.stdout.contains("\"op\":\"rename\""), "\(resumed.stdout)")
            // Human lines, filtered by class and prefix.
            let human = try box.cliWithoutPassphrase(
                ["watch", "--once", "--since", "\(first - 1)", "--class", "genp", "genp/watched/bob"] + v)
            #expect(
                human.lines == [
                    "\(first + 2) rename genp genp/watched/bob (was genp/watched/alice)",
                    "\(first + 3) delete genp genp/watched/bob",
                ], "\(human.stdout)")
            // A sequence number beyond the log: its own exit code (errSecDataNotAvailable), never a skip.
            let beyond = try box.cliWithoutPassphrase(["watch", "--once", "--since", "\(first + 100)"] + v)
            #expect(beyond.status == 28 && beyond.stderr.contains("change log ends at"), "\(beyond.summary)")
        }
    }

    @Test("a change in an access group the watcher is not in is never shown; the passphrase's holder sees it")
    func filteredByAccessGroup() throws {
        try withSandbox { box in
            let group = try box.cli(["access-group", "add"] + box.unlockArgs + ["team", "/usr/bin/cat"])
            try #require(group.status == 0, "\(group.summary)")
            _ = try Self.serve(box)
            let v = ["--vault", box.vault]
            let outsider = try Self.start(box, [])
            let holder = try Self.start(box, [], passphrase: true)
            let team = try box.cli(
                ["add-generic-password", "-s", "hidden-svc", "-a", "hidden-acct", "-w", "t", "--access-group", "team"]
                    + box.unlockArgs)
            #expect(team.status == 0, "\(team.summary)")
            let plain = try box.cliWithoutPassphrase(
                ["add-generic-password", "-s", "open-svc", "-a", "open", "-w", "p"] + v)
            #expect(plain.status == 0, "\(plain.summary)")
            Self.expectChange(outsider, 1, "add", "genp/open-svc/open")
            #expect(waitUntil(2) { Self.objects(holder).count == 2 }, "the holder: \(holder.stdoutSoFar)")
            #expect(
                holder.stdoutSoFar.contains("genp/hidden-svc/hidden-acct;accessGroup=team"), "\(holder.stdoutSoFar)")
            usleep(300_000)
            #expect(Self.objects(outsider).count == 1 && !outsider.stdoutSoFar.contains("hidden"))
            let replay = try box.cliWithoutPassphrase(["watch", "--json", "--once", "--since", "0"] + v)
            #expect(replay.lines.count == 1 && !replay.stdout.contains("hidden"), "\(replay.stdout)")
        }
    }

    @Test("behind a locked service a command commits to the vault itself: the service's watch hears it within 2 s")
    func commitBehindTheService() throws {
        try withSandbox { box in
            _ = try Self.serve(box)
            let v = ["--vault", box.vault]
            let watch = try Self.start(box, [])
            #expect(try box.cli(["lock"] + v).status == 0)
            // The passphrase's holder opens the vault itself while the service holds it, locked
            // (Options.openDoor): a commit the service did not make.
            let behind = try box.cli(
                ["add-generic-password", "-s", "behind", "-a", "carol", "-w", "x"] + box.unlockArgs)
            #expect(behind.status == 0, "\(behind.summary)")
            Self.expectChange(watch, 1, "add", "genp/behind/carol")
        }
    }

    @Test(
        "behind a locked service a command rewrites an item: the mount drops the kernel's cached size of it (cache=60) within 2 s"
    )
    func commitBehindTheServiceReachesTheMount() throws {
        // A kernel cache of a minute: only the service's follower of other processes' commits
        // (ForeignCommits.swift, through the mount's onCommit observer) can make the new size seen.
        try withMount(options: ["cache=60"]) { box in
            let v = ["--vault", box.vault]
            let add = try box.cliWithoutPassphrase(
                ["add-generic-password", "-s", "coh", "-a", "acct", "-w", "short"] + v)
            try #require(add.status == 0, "\(add.summary)")
            let file = box.mnt + "/genp/coh/acct"
            func size() -> Int? {
                (try? FileManager.default.attributesOfItem(atPath: file))?[.size] as? Int
            }
            #expect(size() == 5)
            #expect(try box.cli(["lock"] + v).status == 0)
            #expect(size() == 5, "the size cached by the kernel")
            let start = Date()
            let behind = try box.cli(
                ["add-generic-password", "-U", "-s", "coh", "-a", "acct", "-w", "a much longer one"] + box.unlockArgs)
            #expect(behind.status == 0, "\(behind.summary)")
            #expect(waitUntil(2) { size() == 17 }, "still \(size() ?? -1) after \(Date().timeIntervalSince(start)) s")
        }
    }

    @Test(
        "without a service: watch reads the vault itself and follows it; the vault holds no name in clear after a delete"
    )
    func directAndNoNameInClear() throws {
        try withSandbox { box in
            let account = "zq-acct-\(getpid())-4821", service = "zq-svc-\(getpid())-4821"
            let watch = try Self.start(box, [], passphrase: true)
            let add = try box.cli(["add-generic-password", "-s", service, "-a", account, "-w", "s"] + box.unlockArgs)
            #expect(add.status == 0, "\(add.summary)")
            Self.expectChange(watch, 1, "add", "genp/\(service)/\(account)")
            let delete = try box.cli(["delete-generic-password", "-s", service, "-a", account] + box.unlockArgs)
            #expect(delete.status == 0, "\(delete.summary)")
            Self.expectChange(watch, 2, "delete", "genp/\(service)/\(account)")
            watch.kill(SIGTERM)
            _ = watch.wait(timeout: 5)
            // The log has both (sealed): read back with the passphrase.
            let replay = try box.cli(["watch", "--once", "--since", "0"] + box.unlockArgs)
            #expect(replay.lines.count == 2 && replay.stdout.contains(account), "\(replay.summary)")
            for file in [box.vault, box.vault + "-wal"] {
                guard let bytes = FileManager.default.contents(atPath: file) else { continue }
                for name in [account, service] {
                    #expect(bytes.range(of: Data(name.utf8)) == nil, "\(name) in clear in \(file)")
                }
            }
        }
    }
}
