import Foundation
import Synchronization
import KeychainAccess
import Testing
import TestSupport

// Issue 9: the caller is identified once per thread and re-validated on each request. An entry
// must not outlive its process (a reused pid would inherit it) nor survive an execve (the new
// executable may be in other access groups). Real child processes, real /proc.

@Suite("identity cache")
struct IdentityCacheTests {
    static func waitUntil(_ seconds: Double, _ condition: () -> Bool) -> Bool {
        let end = Date().addingTimeInterval(seconds)
        while Date() < end {
            if condition() { return true }
            usleep(20_000)
        }
        return condition()
    }

    static func executable(of pid: pid_t) -> String? {
        try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")
    }

    @Test("a live process is identified once and served from the cache; once it has exited its pid is not served")
    func exitedProcessIsDropped() throws {
        let cache = IdentityCache()
        let child = try spawnProcess("/usr/bin/sleep", ["30"], env: childEnvironment())
        defer { child.kill(SIGKILL) }
        #expect(Self.waitUntil(5) { Self.executable(of: child.pid) == "/usr/bin/sleep" })
        let first = try #require(cache.process(tid: child.pid))
        #expect(first.pid == child.pid && first.executable == "/usr/bin/sleep", "first: \(first.description)")
        #expect(cache.count == 1)
        let again = try #require(cache.process(tid: child.pid))
        #expect(again.key == first.key && again.executable == first.executable)
        #expect(cache.count == 1, "a second request from the same thread made another entry")

        child.kill(SIGKILL)
        _ = child.wait(timeout: 10)  // reaped: the pid is free for reuse now
        #expect(cache.process(tid: child.pid) == nil, "the cache served a process that has exited")
        #expect(cache.count == 0, "the exited process's entry (and its pidfd) is still held")
    }

    @Test("a process that execs a different binary after its first request is identified again")
    func execveIsCaught() throws {
        let dir = try makeTempDirectory("kcfs-identity-exec")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let flag = dir + "/go"
        let child = try spawnProcess(
            "/bin/sh", ["-c", "while [ ! -e \"$1\" ]; do sleep 0.02; done; exec /usr/bin/sleep 30", "sh", flag],
            env: childEnvironment())
        defer { child.kill(SIGKILL) }
        let shell = try #require(Self.executable(of: child.pid))
        let cache = IdentityCache()
        let before = try #require(cache.process(tid: child.pid))
        #expect(before.executable == shell, "before exec: \(before.description)")

        _ = FileManager.default.createFile(atPath: flag, contents: Data())
        #expect(Self.waitUntil(10) { Self.executable(of: child.pid) == "/usr/bin/sleep" }, "the child did not exec")
        let after = try #require(cache.process(tid: child.pid))
        #expect(after.pid == before.pid)
        #expect(
            after.executable == "/usr/bin/sleep",
            "after execve the cache still names \(after.executable ?? "?") for pid \(child.pid)")
        #expect(cache.count == 1)
    }

    @Test("the threads of one process each map to that process")
    func threadsMapToTheirProcess() throws {
        let cache = IdentityCache()
        let me = try #require(cache.process(tid: getpid()))
        #expect(me.pid == getpid())
        let tid = Mutex<pid_t>(0)
        let done = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        Thread {
            // /proc/thread-self names "<pid>/task/<tid>".
            let link = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self")) ?? ""
            tid.withLock { $0 = pid_t(link.split(separator: "/").last.flatMap { Int32($0) } ?? 0) }
            done.signal()
            release.wait()
        }.start()
        done.wait()
        defer { release.signal() }
        let threadID = tid.withLock { $0 }
        #expect(threadID != getpid())
        let viaThread = try #require(cache.process(tid: threadID))
        #expect(viaThread.pid == getpid() && viaThread.executable == me.executable)
        #expect(cache.process(tid: threadID)?.key == viaThread.key)
    }

    @Test("a process whose name holds spaces and parentheses is identified with its own start time")
    func awkwardCommandName() throws {
        // The start time is field 22 of /proc/<pid>/stat, counted after the name's last `)`.
        let script = """
            import ctypes, sys, time
            ctypes.CDLL(None).prctl(15, b'a) 1 2 (b) 3', 0, 0, 0)
            stat = open('/proc/self/stat').read()
            print(stat.rsplit(')', 1)[1].split()[19], flush=True)
            time.sleep(30)
            """
        let dir = try makeTempDirectory("kcfs-identity-name")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let child = try spawnProcess("/usr/bin/python3", ["-c", script], env: childEnvironment(), ioDirectory: dir)
        defer { child.kill(SIGKILL) }
        var printed = ""
        #expect(
            Self.waitUntil(10) {
                printed = child.stdoutSoFar
                    .trimmingCharacters(in: .whitespacesAndNewlines)
                return !printed.isEmpty
            })
        let cache = IdentityCache()
        let found = try #require(cache.process(tid: child.pid))
        #expect(found.pid == child.pid)
        // Read from /proc/<pid>/stat (the cache tells a leader apart by its pidfs inode where
        // the kernel has pidfs, and reads the start time through its directory otherwise).
        let fromStat = try #require(ProcessIdentity.of(tid: child.pid)?.startTime)
        #expect(String(fromStat) == printed, "start time \(fromStat), /proc says \(printed)")
        if let cached = found.startTime { #expect(cached == fromStat) }
    }

    @Test("a thread of a process whose main thread execs is gone from the cache; the process is identified anew")
    func execByAnotherThreadEndsTheThread() throws {
        let script = """
            import os, sys, threading, time
            ready = threading.Event()
            tid = []
            def worker():
                tid.append(threading.get_native_id())
                ready.set()
                time.sleep(60)
            threading.Thread(target=worker, daemon=True).start()
            ready.wait()
            print(tid[0], flush=True)
            while not os.path.exists(sys.argv[1]):
                time.sleep(0.02)
            os.execv('/usr/bin/sleep', ['sleep', '30'])
            """
        let dir = try makeTempDirectory("kcfs-identity-thread-exec")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let flag = dir + "/go"
        let child = try spawnProcess(
            "/usr/bin/python3", ["-c", script, flag], env: childEnvironment(), ioDirectory: dir)
        defer { child.kill(SIGKILL) }
        var printed = ""
        #expect(
            Self.waitUntil(10) {
                printed = child.stdoutSoFar.trimmingCharacters(in: .whitespacesAndNewlines)
                return !printed.isEmpty
            })
        let threadID = try #require(pid_t(printed))
        #expect(threadID != child.pid)
        let cache = IdentityCache()
        let before = try #require(cache.process(tid: threadID))
        #expect(before.pid == child.pid && before.executable == Self.executable(of: child.pid))
        #expect(cache.process(tid: threadID)?.key == before.key, "not served from the cache")

        _ = FileManager.default.createFile(atPath: flag, contents: Data())
        #expect(Self.waitUntil(10) { Self.executable(of: child.pid) == "/usr/bin/sleep" }, "the child did not exec")
        #expect(cache.process(tid: threadID) == nil, "the cache still serves a thread that the execve ended")
        #expect(cache.process(tid: child.pid)?.executable == "/usr/bin/sleep")
    }

    @Test("a process's key names its pid and is no other live process's; asked again, it is the same")
    func keyOutlivesPidReuse() throws {
        let cache = IdentityCache()
        let child = try spawnProcess("/usr/bin/sleep", ["30"], env: childEnvironment())
        defer { child.kill(SIGKILL) }
        #expect(Self.waitUntil(5) { Self.executable(of: child.pid) == "/usr/bin/sleep" })
        let found = try #require(cache.process(tid: child.pid))
        #expect(found.key.hasPrefix("\(child.pid):"), "key \(found.key)")
        // Another live process never shares it, and asking again gives the same key.
        let me = try #require(cache.process(tid: getpid()))
        #expect(me.key != found.key)
        #expect(cache.process(tid: child.pid)?.key == found.key)
        let uncached = try #require(ProcessIdentity.of(tid: child.pid))
        #expect(uncached.key.hasPrefix("\(child.pid):") && uncached.startTime != nil)
    }

    @Test("a full cache is emptied whole; a live process dropped with it is identified again, with the same key")
    func fullCacheIsEmptied() throws {
        let cache = IdentityCache(capacity: 4)
        let live = try spawnProcess("/usr/bin/sleep", ["30"], env: childEnvironment())
        defer { live.kill(SIGKILL) }
        #expect(Self.waitUntil(5) { Self.executable(of: live.pid) == "/usr/bin/sleep" })
        let found = try #require(cache.process(tid: live.pid))
        for _ in 0..<3 {
            let child = try spawnProcess("/usr/bin/sleep", ["30"], env: childEnvironment())
            #expect(Self.waitUntil(5) { Self.executable(of: child.pid) == "/usr/bin/sleep" })
            #expect(cache.process(tid: child.pid) != nil)
            child.kill(SIGKILL)
            _ = child.wait(timeout: 10)
        }
        #expect(cache.count == 4)
        let next = try spawnProcess("/usr/bin/sleep", ["30"], env: childEnvironment())
        defer { next.kill(SIGKILL) }
        #expect(Self.waitUntil(5) { Self.executable(of: next.pid) == "/usr/bin/sleep" })
        #expect(cache.process(tid: next.pid)?.pid == next.pid)
        #expect(cache.count == 1, "the full table was not emptied: \(cache.count)")
        // The live process dropped with the rest is identified afresh, as the same process.
        let again = try #require(cache.process(tid: live.pid))
        #expect(again.key == found.key && again.executable == "/usr/bin/sleep")
        #expect(cache.count == 2)
    }
}
