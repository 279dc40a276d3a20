import Foundation
import Testing

@Suite("Concurrent writers")
struct ConcurrentWriterTests {

    /// Two writer loops, each spawning `add-generic-password` 1,000 times against one vault
    /// (services p0-0…p0-999 and p1-0…p1-999). Every add must succeed, the dump must list
    /// all 2,000, and a further find (which verifies the integrity manifest on unlock) must
    /// return the right secrets.
    // 2,000 processes each run Argon2id: about 10 minutes on a quiet 2-core machine, twice that
    // when the machine is shared. The limit is for a hung writer, not for a slow one.
    @Test(
        "two processes adding at once: 2 × 1,000 adds, all 2,000 items present",
        .timeLimit(.minutes(40)))
    func twoConcurrentWriters() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        let perWriter = Int(ProcessInfo.processInfo.environment["KEYCHAINFS_CLI_CONCURRENT_N"] ?? "") ?? 1000
        let tag = randomToken("")
        let secret: @Sendable (Int, Int) -> String = { w, i in "conc-\(tag)-p\(w)-\(i)" }
        for w in 0..<2 { for i in 0..<perWriter { box.registerSecret(Array(secret(w, i).utf8)) } }

        final class Failures: @unchecked Sendable {
            let lock = NSLock()
            var items: [String] = []
            func add(_ s: String) { lock.withLock { items.append(s) } }
        }
        let failures = Failures()
        let done = DispatchSemaphore(value: 0)
        let clock = ContinuousClock()
        let start = clock.now
        for w in 0..<2 {
            let thread = Thread {
                for i in 0..<perWriter {
                    let service = "p\(w)-\(i)"
                    do {
                        // Writer 0 passes the secret with -w, writer 1 on stdin.
                        let r: CLIResult
                        if w == 0 {
                            r = try box.run(
                                ["add-generic-password"] + box.unlock + [
                                    "-s", service, "-a", "conc", "-w", secret(w, i),
                                ])
                        } else {
                            r = try box.run(
                                ["add-generic-password"] + box.unlock + ["-s", service, "-a", "conc"],
                                stdin: Array(secret(w, i).utf8))
                        }
                        if r.status != 0 || !r.stdout.isEmpty || !r.stderr.isEmpty {
                            failures.add("\(service): exit \(r.status): \(r.stderr)")
                        }
                    } catch {
                        failures.add("\(service): \(error)")
                    }
                }
                done.signal()
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
        done.wait()
        done.wait()
        let elapsed = clock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let total = 2 * perWriter
        print(
            "CLITests: \(total) concurrent add-generic-password runs (2 writers) took "
                + String(format: "%.1f s (%.1f ms per add, wall)", seconds, seconds * 1000 / Double(total)))

        #expect(failures.items.isEmpty, "\(failures.items.count) adds failed, first: \(failures.items.prefix(5))")

        let dump = try box.run(["dump-keychain", "--json"] + box.unlock)
        expectSuccess(dump)
        let items = try parseDump(dump)
        #expect(items.count == total)
        let services = Set(items.compactMap { ($0["attributes"] as? [String: Any])?["service"] as? String })
        let expected = Set((0..<2).flatMap { w in (0..<perWriter).map { "p\(w)-\($0)" } })
        #expect(services == expected, "missing: \(expected.subtracting(services).sorted().prefix(10))")
        let ids = Set(items.compactMap { ($0["id"] as? NSNumber)?.int64Value })
        #expect(ids.count == total, "item ids are not unique")

        // Opening again verifies the manifest over all 2,000 rows; the secrets are right.
        for (w, i) in [(0, 0), (0, perWriter - 1), (1, 0), (1, perWriter / 2), (1, perWriter - 1)] {
            let (r, found) = try box.findGenericSecret(service: "p\(w)-\(i)", account: "conc")
            #expect(r.status == 0, "p\(w)-\(i): \(r.stderr)")
            #expect(found == Array(secret(w, i).utf8))
        }
        // And the vault is still writable and consistent after it.
        let last = Array(randomToken("after-").utf8)
        expectSuccess(try box.addGeneric(service: "after", secret: last))
        let d = try box.run(["dump-keychain", "--json", "-d"] + box.unlock)
        let all = try parseDump(d)
        #expect(all.count == total + 1)
        let data = Dictionary(
            uniqueKeysWithValues: all.compactMap { item -> (String, String)? in
                guard let s = (item["attributes"] as? [String: Any])?["service"] as? String,
                    let v = item["data"] as? String
                else { return nil }
                return (s, v)
            })
        let wrong = expected.filter { s in
            let parts = s.dropFirst().split(separator: "-")
            return data[s] != secret(Int(parts[0])!, Int(parts[1])!)
        }
        #expect(wrong.isEmpty, "\(wrong.count) items have the wrong secret")
    }
}
