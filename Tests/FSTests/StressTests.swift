import Foundation
import Testing

/// Issue 14, item 10: 8 processes for 15 s of random create / overwrite / append / ftruncate /
/// rename / unlink / setxattr / read, compared with a model of acknowledged operations
/// (Tests/FSTests/posix/stress.py and stress_worker.py).
@Suite("stress run (issue 14)")
struct StressTests {

    /// Checks that fail on the current code, each with what it does instead. Remove a name when its
    /// fix lands. The stress run is random: most failures are races (`.flaky`).
    static let knownFailing: [String: KnownFailure] = [:]

    static let checks: Set<String> = [
        "stress/workers-finish", "stress/private-no-unexpected-errno", "stress/shared-no-unexpected-errno",
        "stress/private-reads-match-model", "stress/shared-reads-acknowledged-values", "stress/final-state-at-once",
        "stress/final-state-1.5s-later",
    ]

    @Test("stress.py: 8 processes, 15 s, zero unexpected errno, zero mismatches")
    func stress() throws {
        try withMount { box in
            let run = try box.runPosixScript(
                "stress.py", [box.mnt, "--procs", "8", "--seconds", "15"], timeout: 90)
            expectChecks(run, knownFailing: Self.knownFailing, expected: Self.checks)
            if let summary = run.extras["_summary"] {
                let text = (try? JSONSerialization.data(withJSONObject: summary, options: [.sortedKeys]))
                    .map { String(decoding: $0, as: UTF8.self) }
                print("stress summary: \(text ?? "\(summary)")")
            }
            #expect(((run.extras["_summary"] as? [String: Any])?["total_ops"] as? Int ?? 0) > 100, "too few operations")
        }
    }
}
