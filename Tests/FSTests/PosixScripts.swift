import Foundation
import Testing

// Issue 14, item 10: the POSIX catalog, the tool matrix, the stress run, the second mount and the
// CLI input checks are python scripts in Tests/FSTests/posix (stdlib only), so that they run
// against any build without a Swift rebuild:
//
//     python3 Tests/FSTests/posix/catalog.py MOUNTPOINT [--cli BIN --vault V --passphrase-file P]
//
// Each prints ONE JSON object {"check-name": "ok" | "FAIL: detail", "_extra": …}. The wrappers
// here run a script in a sandbox and turn every named check into an expectation. Checks that fail
// on the current code are listed once per wrapper (`knownFailing`, name → reason) and asserted
// inside `withKnownIssue`: remove a name when its fix lands (a known issue that stops failing is
// reported, so a fixed check cannot stay listed; `.flaky` ones are races that sometimes pass).

/// Why a check is expected to fail today.
struct KnownFailure: ExpressibleByStringLiteral, Sendable {
    let reason: String
    /// A race that may pass on some runs: a pass is not reported.
    let intermittent: Bool

    init(stringLiteral reason: String) {
        self.reason = reason
        intermittent = false
    }

    init(reason: String, intermittent: Bool) {
        self.reason = reason
        self.intermittent = intermittent
    }

    static func flaky(_ reason: String) -> KnownFailure { KnownFailure(reason: reason, intermittent: true) }
}

/// One run of a check script: the named results, the other keys (`_summary`, `_seconds`), the time.
struct PosixRun {
    let results: [String: String]
    let extras: [String: Any]
    let seconds: Double
    let raw: RunResult
}

enum PosixScripts {
    /// Tests/FSTests/posix, beside this file.
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("posix").path

    static func path(_ script: String) -> String { directory + "/" + script }
}

extension TestSandbox {
    /// Runs `python3 posix/<script> args` (cwd: the work directory) and parses its JSON object.
    func runPosixScript(
        _ script: String, _ args: [String], timeout: Double,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> PosixRun {
        let started = Date()
        let r = try run("/usr/bin/python3", [PosixScripts.path(script)] + args, cwd: w, timeout: timeout)
        let seconds = Date().timeIntervalSince(started)
        // The object is the last stdout line; the per-check progress lines go to stderr.
        let line = r.lines.last ?? ""
        let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        let parsed = try #require(
            object, "\(script) printed no JSON object (\(r.timedOut ? "timed out" : "exit \(r.status)")): \(r.summary)",
            sourceLocation: sourceLocation)
        #expect(!r.timedOut, "\(script) timed out after \(timeout) s", sourceLocation: sourceLocation)
        var results: [String: String] = [:]
        var extras: [String: Any] = [:]
        for (key, value) in parsed {
            if key.hasPrefix("_") {
                extras[key] = value
            } else {
                results[key] = value as? String ?? "FAIL: not a string: \(value)"
            }
        }
        return PosixRun(results: results, extras: extras, seconds: seconds, raw: r)
    }
}

/// Every named check must be "ok"; those in `knownFailing` are known issues until fixed. A name in
/// `knownFailing` that the script did not report is a failure (renamed or dropped check).
func expectChecks(
    _ run: PosixRun, knownFailing: [String: KnownFailure], expected: Set<String> = [],
    sourceLocation: SourceLocation = #_sourceLocation
) {
    #expect(!run.results.isEmpty, "no checks reported: \(run.raw.summary)", sourceLocation: sourceLocation)
    for name in knownFailing.keys.sorted() where run.results[name] == nil {
        Issue.record("knownFailing lists \(name), which the script did not report", sourceLocation: sourceLocation)
    }
    for name in expected.subtracting(run.results.keys).sorted() {
        Issue.record("check \(name) was not reported (did the script stop early?)", sourceLocation: sourceLocation)
    }
    for (name, result) in run.results.sorted(by: { $0.key < $1.key }) {
        if let known = knownFailing[name] {
            if result == "ok" && !known.intermittent {
                print(
                    "\(name) passes now: remove it from knownFailing (Swift Testing reports the unrecorded known issue)"
                )
            }
            withKnownIssue("\(name): \(known.reason)", isIntermittent: known.intermittent) {
                #expect(result == "ok", "\(name): \(result)", sourceLocation: sourceLocation)
            }
        } else {
            #expect(result == "ok", "\(name): \(result)", sourceLocation: sourceLocation)
        }
    }
}
