import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 30, point 6: a storm of changes from the CLI while `ls -R` and an inotify watcher run.
/// No deadlock; the very next listing after the import returned is complete; every change is
/// heard once, in commit order; unmounting while replays are pending returns at once.
@Suite("a storm of changes reaches watchers once, in order, with nothing stale (issue 30)", .serialized)
struct WatcherStormTests {
    static func csv(_ box: TestSandbox, _ service: String, count: Int) throws -> String {
        var text = "Title,Username,Password\n"
        for i in 0..<count { text += "\(service),u\(i),p\(i)\n" }
        let file = box.w + "/\(service).csv"
        try Data(text.utf8).write(to: URL(fileURLWithPath: file))
        return file
    }

    static let columns = ["--columns", "title=Title,account=Username,password=Password"]

    @Test(
        "10,000 items imported by the CLI while ls -R loops and inotifywait watches: 10,000 CREATE, once each, in order"
    )
    func stormOfImports() throws {
        // The directory exists before the watcher starts, so its watch is in place for every add.
        try withMount(setup: { try $0.addGeneric("storm", "seed", "x") }) { box in
            let genp = box.mnt + "/genp"
            let watcher = try InotifyWatch.start(box, genp)
            let lister = try box.spawn("/bin/sh", ["-c", "while :; do ls -R '\(genp)' > /dev/null 2>&1; done"])
            defer {
                kill(lister.pid, SIGKILL)
                _ = lister.wait(timeout: 5)
            }
            let file = try Self.csv(box, "storm", count: 10_000)
            let imported = try box.cli(
                ["import-csv", "generic", file] + Self.columns + box.unlockArgs, timeout: 120)
            try #require(imported.status == 0, "import: \(imported.summary)")
            // The very next listing, here and in another process, holds every item.
            let names = try FileManager.default.contentsOfDirectory(atPath: genp + "/storm")
            #expect(names.count == 10_001, "ls right after the import: \(names.count) names")
            #expect(try box.run("/bin/ls", [genp + "/storm"]).stdout.split(separator: "\n").count == 10_001)

            // Every add heard once, in the order the import committed them.
            let prefix = "CREATE " + genp + "/storm/u"
            var heard: [Int] = []
            let deadline = Date().addingTimeInterval(60)
            repeat {
                heard = watcher.stdoutSoFar.split(separator: "\n").compactMap {
                    $0.hasPrefix(prefix) ? Int($0.dropFirst(prefix.count)) : nil
                }
                if heard.count >= 10_000 || watcher.stdoutSoFar.contains("Q_OVERFLOW") { break }
                usleep(50_000)
            } while Date() < deadline
            #expect(!watcher.stdoutSoFar.contains("Q_OVERFLOW"), "the watcher fell behind")
            #expect(heard.count == 10_000, "heard \(heard.count) of 10,000 adds")
            #expect(heard == Array(0..<heard.count), "adds heard out of order or twice")
        }
    }

    @Test("unmount while 10,000 replays are pending returns at once, and the mount is gone")
    func unmountWithReplaysPending() throws {
        try withMount(setup: { try $0.addGeneric("pending", "seed", "x") }) { box in
            let watcher = try InotifyWatch.start(box, box.mnt + "/genp")
            _ = watcher
            let file = try Self.csv(box, "pending", count: 10_000)
            let imported = try box.cli(["import-csv", "generic", file] + Self.columns + box.unlockArgs, timeout: 120)
            try #require(imported.status == 0, "import: \(imported.summary)")
            let start = Date()
            let unmount = try box.cli(["unmount", box.mnt], timeout: 30)
            let seconds = Date().timeIntervalSince(start)
            #expect(unmount.status == 0, "unmount: \(unmount.summary)")
            #expect(seconds < 5, "unmount took \(seconds) s")
            #expect(!MountInfo.isKeychainMount(box.mnt), "still mounted")
        }
    }
}
