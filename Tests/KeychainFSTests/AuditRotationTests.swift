import Foundation
@_spi(CallerRule) import Keychain
import KeychainAccess
import Testing
import TestSupport

// The audit log rotates by size without losing a line, also with two writers (two mounts)
// sharing one file.

@Suite("audit log rotation")
struct AuditRotationTests {
    static func lines(_ path: String, keep: Int) -> [String] {
        AuditLog.files(of: path, keep: keep).flatMap { file in
            ((try? String(contentsOfFile: file, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        }
    }

    @Test("two writers on one file, many rotations: every line once, whole, in files no larger than the limit")
    func noLineLost() throws {
        let dir = try makeTempDirectory("kcfs-audit-rotation")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/audit.log"
        // Two objects with their own descriptors stand for two daemons sharing the default path.
        let logs = [
            try AuditLog(path: path, maxBytes: 4096, keep: 200), try AuditLog(path: path, maxBytes: 4096, keep: 200),
        ]
        let group = DispatchGroup()
        for writer in 0..<4 {
            group.enter()
            Thread {
                for i in 0..<500 {
                    logs[writer % 2].record(
                        Caller(processDescription: "pid \(writer) /bin/test"), item: Int64(i), .openRead, allowed: true)
                }
                group.leave()
            }.start()
        }
        group.wait()
        let all = Self.lines(path, keep: 200)
        #expect(all.count == 2000)
        var seen = Set<String>()
        for line in all {
            guard let pid = line.firstMatch(of: /pid (\d) \/bin\/test item=(\d+) op=open-read allow$/) else {
                Issue.record("torn or foreign line: \(line)")
                continue
            }
            seen.insert("\(pid.output.1)-\(pid.output.2)")
        }
        #expect(seen.count == 2000)
        let files = AuditLog.files(of: path, keep: 200)
        #expect(files.count > 10, "expected many rotations, got \(files.count) files")
        for file in files {
            let size = (try FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? 0
            // Soft across writers: the other writer may append one line between a size check
            // and the write it guards.
            #expect(size <= 4096 + 120, "\(file) is \(size) bytes")
            #expect((try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? Int) == 0o600)
        }
    }

    @Test("only `keep` rotated files are kept: the oldest lines go, the newest stay")
    func keepsBoundedHistory() throws {
        let dir = try makeTempDirectory("kcfs-audit-rotation")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/audit.log"
        let log = try AuditLog(path: path, maxBytes: 2048, keep: 3)
        for i in 0..<400 {
            log.record(Caller(processDescription: "pid 1 /bin/t"), item: Int64(i), .write, allowed: true)
        }
        let names = try FileManager.default.contentsOfDirectory(atPath: dir).filter { !$0.hasSuffix(".lock") }.sorted()
        #expect(names == ["audit.log", "audit.log.1", "audit.log.2", "audit.log.3"])
        let all = Self.lines(path, keep: 3)
        #expect(all.last?.contains("item=399 ") == true)
        // Contiguous: the newest lines, none missing in between.
        let items = all.compactMap { $0.firstMatch(of: #/item=(\d+) /#).flatMap { Int($0.output.1) } }
        #expect(items == Array((items.first ?? 0)...399))
    }

    @Test("buffered: two writers, many rotations, every line once and whole after flush; nothing written before it")
    func bufferedNoLineLost() throws {
        let dir = try makeTempDirectory("kcfs-audit-buffered")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/audit.log"
        let logs = [
            try AuditLog(path: path, maxBytes: 16384, keep: 400, buffered: true),
            try AuditLog(path: path, maxBytes: 16384, keep: 400, buffered: true),
        ]
        // One line, well under the 64 KiB that forces a write: still only in memory.
        logs[0].record(Caller(processDescription: "pid 9 /bin/first"), item: 1, .openRead, allowed: true)
        #expect(Self.lines(path, keep: 400).isEmpty, "a buffered line was written at once")
        logs[0].flush()
        #expect(Self.lines(path, keep: 400).count == 1)
        let group = DispatchGroup()
        for writer in 0..<4 {
            group.enter()
            Thread {
                for i in 0..<3000 {
                    logs[writer % 2].record(
                        Caller(processDescription: "pid \(writer) /bin/test"), item: Int64(i), .openRead, allowed: true)
                }
                group.leave()
            }.start()
        }
        group.wait()
        for log in logs { log.flush() }
        let all = Self.lines(path, keep: 400).filter { !$0.contains("/bin/first") }
        #expect(all.count == 12000)
        var seen = Set<String>()
        for line in all {
            guard let m = line.firstMatch(of: /pid (\d) \/bin\/test item=(\d+) op=open-read allow$/) else {
                Issue.record("torn or foreign line: \(line)")
                continue
            }
            seen.insert("\(m.output.1)-\(m.output.2)")
        }
        #expect(seen.count == 12000)
        #expect(AuditLog.files(of: path, keep: 400).count > 10)
    }
}
