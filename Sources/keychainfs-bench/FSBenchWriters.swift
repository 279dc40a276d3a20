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

    var oneRate: Double { Self.median(one) }
    var manyRate: Double { Self.median(many) }
    static func median(_ v: [Double]) -> Double { v.isEmpty ? .nan : v.sorted()[v.count / 2] }
}

extension FSBench {
    /// Measures `ConcurrentWriteFigures` on each of the mounts at `roots` (items 0..<250 of the
    /// layout; writer w uses its own 30), block by block, the mounts' order alternating.
    func measureConcurrentWrites(roots: [String], blocks: Int = 3) throws -> [ConcurrentWriteFigures] {
        var figures = [ConcurrentWriteFigures](repeating: ConcurrentWriteFigures(), count: roots.count)
        let n = ConcurrentWriteFigures.closesPerWriter
        for block in 0..<(2 * blocks) {
            let concurrent = block % 4 == 1 || block % 4 == 2  // one, many, many, one, one, many
            let count = concurrent ? ConcurrentWriteFigures.writers : 1
            let order = block % 2 == 0 ? Array(roots.indices) : roots.indices.reversed()
            for m in order {
                let started = Clock.now()
                try Self.runWriters(count, closes: concurrent ? n : n * 2, root: roots[m], tag: block)
                let rate = Double(concurrent ? count * n : n * 2) / Clock.since(started)
                if concurrent { figures[m].many.append(rate) } else { figures[m].one.append(rate) }
            }
        }
        return figures
    }

    private static func runWriters(_ count: Int, closes: Int, root: String, tag: Int) throws {
        let failures = Mutex<[String]>([])
        let finished = DispatchGroup()
        for w in 0..<count {
            finished.enter()
            // Threads of their own: the bench is pinned to one CPU, where a dispatch pool
            // would run one writer at a time.
            let thread = Thread {
                defer { finished.leave() }
                for k in 0..<closes {
                    let i = w * 30 + k % 30
                    let path = root + "/genp/\(Layout.service(i))/\(Layout.account(i))"
                    let data = Layout.secret(tag * 10_000 + k, tag: "cw\(w)")
                    let fd = open(path, O_WRONLY | O_TRUNC)
                    guard fd >= 0 else {
                        failures.withLock { $0.append("open \(path): \(String(cString: strerror(errno)))") }
                        return
                    }
                    let written = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                    if written != data.count || close(fd) != 0 {
                        failures.withLock { $0.append("write \(path): \(String(cString: strerror(errno)))") }
                        return
                    }
                }
            }
            thread.start()
        }
        finished.wait()
        if let first = failures.withLock({ $0.first }) { throw BenchError(first) }
    }
}
