import Foundation
import KeychainStore
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// SerialWorker (Sources/KeychainStore/SerialWorker.swift): the daemon's one replacement for
/// serial DispatchQueues and `asyncAfter`, whose first use on Linux starts libdispatch's 1 Hz
/// workqueue monitor for good (issue 30: an idle daemon must not wake).
@Suite("SerialWorker: ordered jobs on one thread, delayed jobs, no wake-ups while idle")
struct SerialWorkerTests {
    /// A name no other worker of the process has (Linux keeps 15 bytes of a thread's name).
    static func uniqueName() -> String {
        let n = counter.add(1, ordering: .relaxed).newValue
        return "kcfs-t\(getpid() % 1000)-\(n)"
    }
    static let counter = Atomic<Int>(0)

    /// The thread ids of this process's threads called `name`.
    static func threads(named name: String) -> [String] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.filter {
            let comm = (try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8)) ?? ""
            return comm.trimmingCharacters(in: .whitespacesAndNewlines) == name
        }
    }

    /// A thread's voluntary and involuntary context switches so far.
    static func switches(_ tid: String) -> Int {
        let text = (try? String(contentsOfFile: "/proc/self/task/\(tid)/status", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").filter { $0.contains("ctxt_switches") }
            .compactMap { Int($0.split(separator: ":").last?.trimmingCharacters(in: .whitespaces) ?? "") }
            .reduce(0, +)
    }

    static func seconds() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }

    @Test("jobs run one at a time in the order given, on the worker's thread, and sync waits for them")
    func ordering() {
        let worker = SerialWorker(name: Self.uniqueName())
        defer { worker.stop() }
        let seen = Mutex<[Int]>([])
        let onWorker = Atomic<Bool>(true)
        let running = Atomic<Int>(0)
        for i in 0..<2000 {
            worker.async {
                if running.add(1, ordering: .relaxed).newValue != 1 { onWorker.store(false, ordering: .relaxed) }
                if !worker.isCurrent { onWorker.store(false, ordering: .relaxed) }
                seen.withLock { $0.append(i) }
                running.subtract(1, ordering: .relaxed)
            }
        }
        worker.sync()
        #expect(seen.withLock { $0 } == Array(0..<2000))
        let alwaysAlone = onWorker.load(ordering: .relaxed)
        #expect(alwaysAlone, "a job ran off the worker's thread, or two at once")
        #expect(!worker.isCurrent)
    }

    @Test("sync runs its body after every job queued before it, then returns")
    func syncDrains() {
        let worker = SerialWorker(name: Self.uniqueName())
        defer { worker.stop() }
        let done = Atomic<Int>(0)
        for _ in 0..<3 {
            worker.async {
                usleep(30_000)
                done.add(1, ordering: .relaxed)
            }
        }
        let seenBySync = Atomic<Int>(-1)
        worker.sync { seenBySync.store(done.load(ordering: .relaxed), ordering: .relaxed) }
        #expect(seenBySync.load(ordering: .relaxed) == 3)
        #expect(done.load(ordering: .relaxed) == 3)
    }

    @Test("after: not before its deadline, promptly at it; delayed jobs by deadline, then as given")
    func delayed() {
        let worker = SerialWorker(name: Self.uniqueName())
        defer { worker.stop() }
        let start = Self.seconds()
        let seen = Mutex<[(String, Double)]>([])
        func note(_ label: String) -> @Sendable () -> Void {
            { seen.withLock { $0.append((label, Self.seconds() - start)) } }
        }
        worker.after(seconds: 0.3, note("a"))
        worker.after(seconds: 0.1, note("b"))
        worker.after(seconds: 0.1, note("c"))
        worker.async(note("d"))
        usleep(500_000)
        worker.sync()
        let got = seen.withLock { $0 }
        #expect(got.map(\.0) == ["d", "b", "c", "a"], "\(got)")
        let at = Dictionary(got, uniquingKeysWith: { a, _ in a })
        #expect((at["b"] ?? 0) >= 0.1 && (at["b"] ?? 9) < 0.25, "\(got)")
        #expect((at["a"] ?? 0) >= 0.3 && (at["a"] ?? 9) < 0.45, "\(got)")
    }

    @Test("a job queued while a delayed one waits runs at once; the delayed one still runs at its deadline")
    func asyncDuringDelay() {
        let worker = SerialWorker(name: Self.uniqueName())
        defer { worker.stop() }
        let start = Self.seconds()
        let ranAt = Mutex<[String: Double]>([:])
        worker.after(seconds: 0.2) { ranAt.withLock { $0["late"] = Self.seconds() - start } }
        usleep(20_000)
        worker.sync { ranAt.withLock { $0["now"] = Self.seconds() - start } }
        #expect((ranAt.withLock { $0["now"] } ?? 9) < 0.15)
        usleep(400_000)
        let late = ranAt.withLock { $0["late"] } ?? 0
        #expect(late >= 0.2 && late < 0.35, "the delayed job ran at \(late) s")
    }

    @Test("the thread starts at the first job, and an idle worker never wakes, with or without a delayed job")
    func idleDoesNotWake() throws {
        let name = Self.uniqueName()
        let worker = SerialWorker(name: name)
        defer { worker.stop() }
        #expect(Self.threads(named: name).isEmpty, "a thread before any job")
        #expect(!worker.isRunning)
        worker.sync()
        let tid = try #require(Self.threads(named: name).first, "no thread named \(name)")
        // Nothing queued: blocked without a timeout (once it is back in its wait after the
        // sync's job: the switch into that wait is not a wake-up).
        usleep(100_000)
        var before = Self.switches(tid)
        usleep(1_500_000)
        #expect(Self.switches(tid) == before, "the idle worker woke")
        // A job delayed far: asleep until its deadline, not polling meanwhile.
        let ran = Atomic<Bool>(false)
        worker.after(seconds: 60) { ran.store(true, ordering: .relaxed) }
        usleep(100_000)
        before = Self.switches(tid)
        usleep(1_500_000)
        #expect(Self.switches(tid) == before, "the worker woke while its only job waits for its deadline")
        let early = ran.load(ordering: .relaxed)
        #expect(!early)
    }

    @Test("stop: queued jobs run, delayed ones are dropped, the thread ends, later jobs are dropped")
    func stopping() {
        let name = Self.uniqueName()
        let worker = SerialWorker(name: name)
        let ran = Mutex<[String]>([])
        worker.async {
            usleep(50_000)
            ran.withLock { $0.append("queued") }
        }
        worker.after(seconds: 0.2) { ran.withLock { $0.append("delayed") } }
        worker.stop()
        worker.async { ran.withLock { $0.append("after stop") } }
        worker.sync { ran.withLock { $0.append("sync after stop") } }
        var ended = false
        for _ in 0..<100 where !ended {
            usleep(10_000)
            ended = Self.threads(named: name).isEmpty
        }
        #expect(ended, "the worker's thread did not end")
        usleep(300_000)
        #expect(ran.withLock { $0 } == ["queued"])
    }

    @Test("a worker released without ever being used starts no thread")
    func unusedCostsNothing() {
        let name = Self.uniqueName()
        do {
            let worker = SerialWorker(name: name)
            worker.stop()
        }
        #expect(Self.threads(named: name).isEmpty)
    }
}
