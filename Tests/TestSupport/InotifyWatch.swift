import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A real inotify watcher of a directory tree (`inotifywait -m -r`, Debian's inotify-tools), for
/// the tests of issue 30: what a watcher of the mount hears of a change made elsewhere.
public enum InotifyWatch {
    /// `inotifywait -m -r` on `directory`, one `EVENTS PATH` line per event; returns once its
    /// watches are established.
    public static func start(_ box: TestSandbox, _ directory: String) throws -> Spawned {
        try established(try box.spawn("/usr/bin/inotifywait", arguments(directory)))
    }

    /// The same outside a sandbox: the caller ends it (`kill(watcher.pid, SIGTERM)`).
    public static func start(_ directory: String) throws -> Spawned {
        try established(
            try spawnProcess("/usr/bin/inotifywait", arguments(directory), env: ProcessInfo.processInfo.environment))
    }

    static func arguments(_ directory: String) -> [String] { ["-m", "-r", "--format", "%e %w%f", directory] }

    static func established(_ watcher: Spawned) throws -> Spawned {
        let deadline = Date().addingTimeInterval(10)
        while !watcher.stderrSoFar.contains("Watches established") {
            guard Date() < deadline, watcher.isRunning else {
                throw HarnessError("inotifywait did not start: \(watcher.stderrSoFar)")
            }
            usleep(10_000)
        }
        return watcher
    }

    /// Waits up to 2 s for an event line `EVENTS PATH` naming every event of `events` on `path`,
    /// after the first `skip` lines; returns the index after it.
    @discardableResult
    public static func expectEvent(
        _ watcher: Spawned, _ events: [String], _ path: String, after skip: Int = 0,
        sourceLocation: SourceLocation = #_sourceLocation
    ) -> Int {
        let deadline = Date().addingTimeInterval(2)
        while true {
            let lines = watcher.stdoutSoFar.split(separator: "\n").map(String.init)
            for (index, line) in lines.enumerated().dropFirst(skip) {
                guard let space = line.firstIndex(of: " ") else { continue }
                let names = Set(line[..<space].split(separator: ",").map(String.init))
                if String(line[line.index(after: space)...]) == path && Set(events).isSubset(of: names) {
                    return index + 1
                }
            }
            if Date() >= deadline {
                Issue.record(
                    "no \(events) on \(path) within 2 s; heard:\n\(lines.joined(separator: "\n"))",
                    sourceLocation: sourceLocation)
                return skip
            }
            usleep(5_000)
        }
    }
}
