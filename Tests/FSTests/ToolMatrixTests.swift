import Foundation
import Testing

/// Issue 14, item 10: ordinary tools edit items through the mount and the result is there at once
/// (Tests/FSTests/posix/tools.py): sed -i, perl -pi, python atomic writes, mv, touch + echo,
/// install, cp -a, rsync -aX, tar, truncate, dd conv=notrunc, vim, ex.
@Suite("tool matrix (issue 14)")
struct ToolMatrixTests {

    /// Checks that fail on the current code, each with what it does instead. Remove a name when its
    /// fix lands.
    static let knownFailing: [String: KnownFailure] = [:]

    @Test("tools.py: every tool's edit is read back at once, listing exact")
    func tools() throws {
        try withMount { box in
            let run = try box.runPosixScript("tools.py", [box.mnt, "--loops", "10"], timeout: 120)
            expectChecks(run, knownFailing: Self.knownFailing)
        }
    }
}
