import Foundation
@_spi(CallerRule) import Keychain
import KeychainAccess
import Testing
import TestSupport

// What one audit line says about when it was written.

@Suite("audit line")
struct AuditLineTests {
    /// The line's leading `2026-11-23T09:13:02.123Z`, as a Date.
    static func time(of line: Substring) -> Date? {
        let stamp = #/^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{3})Z /#
        guard let m = line.firstMatch(of: stamp) else { return nil }
        var c = DateComponents()
        c.timeZone = TimeZone(identifier: "UTC")
        (c.year, c.month, c.day) = (Int(m.output.1), Int(m.output.2), Int(m.output.3))
        (c.hour, c.minute, c.second) = (Int(m.output.4), Int(m.output.5), Int(m.output.6))
        c.nanosecond = Int(m.output.7)! * 1_000_000
        return Calendar(identifier: .gregorian).date(from: c)
    }

    @Test("each line carries the UTC time it was recorded at, to the millisecond, across second boundaries")
    func lineTimes() throws {
        let dir = try makeTempDirectory("kcfs-audit-time")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/audit.log"
        let log = try AuditLog(path: path)
        var windows: [(Date, Date)] = []
        // Lines over about 2.5 seconds: some seconds hold several lines, and every second
        // boundary comes between two of them.
        for i in 0..<25 {
            let before = Date()
            log.record(Caller(processDescription: "pid 7 /bin/test"), item: Int64(i), .openRead, allowed: true)
            windows.append((before, Date()))
            Thread.sleep(forTimeInterval: 0.1)
        }
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 25)
        var seconds = Set<Int>()
        for (line, (before, after)) in zip(lines, windows) {
            guard let at = Self.time(of: line) else {
                Issue.record("no time at the start of: \(line)")
                continue
            }
            // Milliseconds are truncated: a line may read up to 1 ms before `before`.
            #expect(at >= before.addingTimeInterval(-0.001) && at <= after, "\(line) not within \(before)–\(after)")
            seconds.insert(Int(at.timeIntervalSince1970))
        }
        #expect(seconds.count >= 2, "all 25 lines in one second: \(seconds)")
    }
}
