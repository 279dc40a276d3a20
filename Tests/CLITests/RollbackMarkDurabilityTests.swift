import Foundation
import Testing

/// Issue 28, point 10: the device's rollback mark survives a power loss. A filesystem that drops
/// every byte not yet fsynced left it an empty file, which reads as no mark: an older copy of
/// the vault then opened without "rolled back". Seen here through the system calls themselves
/// (strace): the mark is fsynced, with its directory, when it is made, and again at each unlock.
@Suite("the rollback mark is durable")
struct RollbackMarkDurabilityTests {
    /// `keychainfs args` under strace; the trace's lines.
    func traced(_ box: Sandbox, _ args: [String]) throws -> [Substring] {
        let trace = box.root + "/trace-\(UInt32.random(in: 0...UInt32.max))"
        let r = try box.run(
            "/usr/bin/strace", ["-f", "-o", trace, "-e", "trace=openat,fsync,fdatasync", try requireBinary()] + args,
            timeout: 60)
        #expect(r.status == 0 || r.status == 44, "\(r.summary)")
        return ((try? String(contentsOfFile: trace, encoding: .utf8)) ?? "").split(separator: "\n")
    }

    /// The descriptor an `openat` of a path ending in `suffix` returned (with `flag` among its flags).
    func descriptor(_ lines: [Substring], opening suffix: String, flag: String) -> (line: Int, fd: String)? {
        for (i, line) in lines.enumerated() where line.contains("openat(") && line.contains(suffix + "\"") {
            guard line.contains(flag), let result = line.split(separator: "=").last else { continue }
            let fd = result.trimmingCharacters(in: .whitespaces)
            if Int(fd) != nil { return (i, fd) }
        }
        return nil
    }

    @Test("made with an fsync of the file and of its directory; fdatasync'ed at every unlock")
    func durable() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/strace") else { return }
        let box = try Sandbox()
        let made = try traced(box, ["init", "--kdf", "interactive"] + box.unlock)
        let mark = try #require(
            made.enumerated().first {
                $0.element.contains("/rollback/") && !$0.element.contains(".kdf") && $0.element.contains("O_CREAT")
                    && !$0.element.contains("= -1")
            }, "no rollback mark was created:\n\(made.joined(separator: "\n"))")
        let fd = String(mark.element.split(separator: "=").last!).trimmingCharacters(in: .whitespaces)
        let after = made[(mark.offset + 1)...]
        #expect(after.contains { $0.contains("fsync(\(fd))") }, "the new mark was not fsynced")
        let directory = try #require(descriptor(Array(after), opening: "/rollback", flag: "O_DIRECTORY"))
        #expect(
            after.contains { $0.contains("fsync(\(directory.fd))") }, "the mark's directory entry was not fsynced")

        let unlocked = try traced(box, ["find-generic-password", "-s", "nothing-here"] + box.unlock)
        let kept = try #require(
            unlocked.enumerated().first {
                $0.element.contains("/rollback/") && !$0.element.contains(".kdf") && !$0.element.contains("= -1")
            },
            "the unlock did not open the mark")
        let keptFD = String(kept.element.split(separator: "=").last!).trimmingCharacters(in: .whitespaces)
        #expect(
            unlocked[(kept.offset + 1)...].contains { $0.contains("fdatasync(\(keptFD))") },
            "the unlock did not make the mark durable")
    }
}
