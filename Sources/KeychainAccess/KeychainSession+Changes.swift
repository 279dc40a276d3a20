import FoundationEssentials
import Glibc
import Keychain

/// The change log (vault format 7, ChangeLog.swift) read for one caller: what a change feed of a
/// face shows (the mount's `/views/changes`). Only the changes to items of the caller's access
/// groups, a rename across groups shown as an add or a delete to a caller that sees one side
/// (`LoggedChange.visible`); never a secret. A read of names, not a decision: not audited.
extension KeychainSession {
    /// The log's last sequence number: where a feed from now on starts.
    public func lastChange() throws -> Int64 { try keychain.lastLoggedChange() }

    /// The changes after `seq` this caller may see (at most `limit` read), and the sequence the
    /// read went up to (`seq` when there was none). A `seq` the log no longer holds is
    /// errSecDataNotAvailable.
    public func changes(after seq: Int64, limit: Int = 500) throws -> (changes: [LoggedChange], through: Int64) {
        let page = try keychain.changeLog(after: seq, limit: limit)
        let shown = page.changes.compactMap { $0.visible(to: caller.canSee(accessGroup:)) }
        return (shown, page.changes.last?.seq ?? seq)
    }
}
