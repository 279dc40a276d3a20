import Foundation
import Testing

/// Issue 14, item 10: the catalog of named POSIX checks (Tests/FSTests/posix/catalog.py), through
/// the mount, at once and from a second process; its persist/… half remounts the vault.
@Suite("POSIX catalog (issue 14)")
struct PosixCatalogTests {

    /// Checks that fail on the current code, each with what it does instead. Remove a name when its
    /// fix lands.
    static let knownFailing: [String: KnownFailure] = [:]

    @Test("catalog.py: open, lseek, ftruncate, write, unlink, rename, errno, races, names, hidden names")
    func catalog() throws {
        let bin = try requireBinary()
        try withMount { box in
            let run = try box.runPosixScript(
                "catalog.py",
                [
                    box.mnt, "--loops", "50", "--cli", bin, "--vault", box.vault, "--passphrase-file",
                    box.passphraseFile,
                ],
                timeout: 150)
            expectChecks(run, knownFailing: Self.knownFailing)
        }
    }
}
