import CFuse
import Dispatch
import Foundation
import Synchronization

/// Concurrent durable writers through the mount (issue 9, item 3: group commit). One writer,
/// then `writers` threads at once, in alternating blocks, each doing open O_WRONLY|O_TRUNC,
/// write, close on items of its own (every close is durable when it returns). The figure is
/// closes per second of wall time; the target is 8 writers ≥ 3× one writer.
struct ConcurrentWriteFigures {
    static let writers = 8
    static let closesPerWriter = 40
    var one: [Double] = []  // closes/s, one writer, per block
    var many: [Double] = []  // closes/s, `writers` writers together, per block
    /// Closes per durable commit in each `many` block (the durable floor counts its commits).
    var closesPerCommit: [Double] = []

    var oneRate: Double { Self.median(one) }
    var manyRate: Double { Self.median(many) }
    static func median(_ v: [Double]) -> Double { v.isEmpty ? .nan : v.sorted()[v.count / 2] }
}

/// The concurrent section: keychainfs and the durable floor block by block, and the raw update
/// beside the one-writer blocks.
struct ConcurrentRun {
    var keychainfs = ConcurrentWriteFigures()
    var durableFloor = ConcurrentWriteFigures()
    var rawOne = Samples()
}

extension FSBench {
    /// Measures `ConcurrentWriteFigures` on the keychainfs mount and on the durable floor (items
    /// 0..<250 of the layout; writer w uses its own 30). Blocks go one, many, many, one, one,
    /// many, many, one (`blocksPerKind` of each); in every block both mounts, the first of them
    /// taking turns within each kind of block; after each one-writer pair, as many raw updates.
    func measureConcurrentWrites(
        keychainfs: String, durableFloor: String, raw: RawSQLite, rng: inout SeededRandom, blocksPerKind: Int = 4
    ) throws -> ConcurrentRun {
        var run = ConcurrentRun()
        let n = ConcurrentWriteFigures.closesPerWriter
        var blocksOfKind: [Bool: Int] = [false: 0, true: 0]
        for block in 0..<(2 * blocksPerKind) {
            let concurrent = block % 4 == 1 || block % 4 == 2
            let count = concurrent ? ConcurrentWriteFigures.writers : 1
            let closes = concurrent ? n : n * 2
            let turn = blocksOfKind[concurrent, default: 0]
            blocksOfKind[concurrent] = turn + 1
            for onFloor in (turn % 2 == 0 ? [false, true] : [true, false]) {
                let root = onFloor ? durableFloor : keychainfs
                let figures: WritableKeyPath<ConcurrentRun, ConcurrentWriteFigures> =
                    onFloor ? \.durableFloor : \.keychainfs
                let before = onFloor ? try Self.floorCommits(root) : nil
                let started = Clock.now()
                try Self.runWriters(count, closes: closes, root: root, tag: block)
                let rate = Double(count * closes) / Clock.since(started)
                if concurrent {
                    run[keyPath: figures].many.append(rate)
                } else {
                    run[keyPath: figures].one.append(rate)
                }
                if concurrent, let before {
                    let after = try Self.floorCommits(root)
                    run[keyPath: figures].closesPerCommit.append(
                        Double(after.closes - before.closes) / Double(max(1, after.commits - before.commits)))
                }
            }
            if !concurrent { run.rawOne.add(try raw.timedUpdates(closes, rng: &rng)) }
        }
        return run
    }

    /// The durable floor's commits and the closes they held so far (`FloorFS.commitsXattrName`).
    static func floorCommits(_ root: String) throws -> (commits: Int, closes: Int) {
        var buf = [UInt8](repeating: 0, count: 64)
        let n = lgetxattr(root, FloorFS.commitsXattrName, &buf, buf.count)
        let fields =
            n > 0 ? String(decoding: buf[0..<n], as: UTF8.self).split(separator: " ").compactMap { Int($0) } : []
        guard fields.count == 2 else { throw BenchError("\(root): no commit count from the durable floor") }
        return (fields[0], fields[1])
    }

    private static func runWriters(_ count: Int, closes: Int, root: String, tag: Int) throws {
        try onWriterThreads(count) { w in
            for k in 0..<closes {
                let i = w * 30 + k % 30
                let path = root + "/genp/\(Layout.service(i))/\(Layout.account(i))"
                let data = Layout.secret(tag * 10_000 + k, tag: "cw\(w)")
                let fd = open(path, O_WRONLY | O_TRUNC)
                guard fd >= 0 else { return "open \(path): \(String(cString: strerror(errno)))" }
                let written = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                if written != data.count || close(fd) != 0 {
                    return "write \(path): \(String(cString: strerror(errno)))"
                }
            }
            return nil
        }
    }

    /// Runs `body(w)` for w in 0..<count on threads of their own, all at once (the bench is
    /// pinned to one CPU, where a dispatch pool would run one writer at a time), and throws the
    /// first failure any of them returned.
    static func onWriterThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> String?) throws {
        let failures = Mutex<[String]>([])
        let finished = DispatchGroup()
        for w in 0..<count {
            finished.enter()
            let thread = Thread {
                defer { finished.leave() }
                if let failure = body(w) { failures.withLock { $0.append(failure) } }
            }
            thread.start()
        }
        finished.wait()
        if let first = failures.withLock({ $0.first }) { throw BenchError(first) }
    }
}
