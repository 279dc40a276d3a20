import Foundation

/// Reads right after a mount (issue 29, item 6): what a user meets before the mount's background
/// integrity pass ends, which the other rows wait out. Each item of the 1,000-entry directory is
/// read once (open, read, close; its LOOKUP and, on keychainfs, its bucket's check included), at
/// once after the mount; the floor reads the same paths, their entries expired as well.
extension FSBench {
    /// One timed open+read+close of each of `count` items of `Layout.smallDirectory` under `root`.
    func readEachOnce(_ root: String, count: Int = 1_000) throws -> Samples {
        var s = Samples()
        var buf = [UInt8](repeating: 0, count: 4096)
        for i in 0..<count {
            let path = root + "/genp/\(Layout.smallDirectory)/\(Layout.account(i))"
            let t = Clock.now()
            let fd = open(path, O_RDONLY)
            guard fd >= 0 else { throw BenchError("open \(path): \(String(cString: strerror(errno)))") }
            let n = read(fd, &buf, buf.count)
            let c = close(fd)
            s.add(Clock.since(t))
            guard n == 12, c == 0 else { throw BenchError("read \(path): \(n) bytes, close \(c)") }
        }
        return s
    }
}
