import Foundation
import Synchronization
import KeychainStore
import Testing

@_spi(CallerRule) @testable import Keychain

/// The commits of other processes (issue 30, point 2; ForeignCommits.swift): once a keychain
/// follows them, a commit made through another opening of the vault reaches its `onCommit`
/// observers within 2 s, once, with its log sequence number; its own commits reach them once.
@Suite("other processes' commits reach the observers")
struct ForeignCommitsTests {
    @Test("a commit through another opening of the vault is handed to the observers once, within 2 s; an own one once")
    func foreignCommitsAreObserved() throws {
        try withVault { v throws in
            let kc = v.keychain
            let seen = Mutex<[ItemChange]>([])
            kc.onCommit { changes in seen.withLock { $0 += changes } }
            try kc.followOtherProcesses()
            try kc.followOtherProcesses()  // idempotent: one follower
            let other = try v.openUnlocked()
            _ = try other.add(.genericPassword, genp("svc", "elsewhere"), data: bytes("x"))
            #expect(waitUntil(2) { seen.withLock { $0.count } == 1 }, "\(seen.withLock { $0 })")
            let first = try #require(seen.withLock { $0.first })
            #expect(first.kind == .added && first.seq == 1 && first.origin == "" && first.itemClass == .genericPassword)
            // No rows for it: its names are the log's (what the mount replays and signals use).
            let names = kc.names(of: first)
            #expect(names.before == nil && names.after?[Schema.account] == .string("elsewhere"))
            #expect(names.after?.groupingValue == .string("svc") && names.after?.accessGroup == "default")

            _ = try kc.add(.genericPassword, genp("svc", "here"), data: bytes("y"))
            _ = try other.delete(Query(.genericPassword, genp("svc", "elsewhere")))
            #expect(waitUntil(2) { seen.withLock { $0.count } >= 3 })
            usleep(300_000)
            let all = seen.withLock { $0 }
            #expect(all.map(\.seq) == [1, 2, 3], "each change once, in order: \(all.map(\.seq))")
            #expect(all.map(\.kind) == [.added, .added, .removed])
        }
    }

    /// The mount's integrity pass reads through a connection of its own and closes it when done;
    /// SQLite opens the vault and its WAL read-write even to read, so that close was an
    /// IN_CLOSE_WRITE and woke the vault watch into 200 polls of the change stamp (10-13 ms of
    /// the daemon's CPU right after every mount). A close wakes nothing; a commit still does,
    /// at once (the events are queued before the call that caused them returns).
    @Test("the vault watch: a reading connection's close wakes nothing, another opening's commit does")
    func closeWakesNothing() throws {
        try withVault { v throws in
            _ = v.keychain  // the test process's own opening, as a daemon holds one
            let watch = try VaultWatch(vault: v.path)
            do {
                let reader = try VaultStore.open(at: v.path)
                _ = try reader.read { try $0.highestStoredID() }
            }
            #expect(!watch.drain(), "a read-only connection's open, read and close woke the watch")
            let other = try v.openUnlocked()
            #expect(!watch.drain(), "an unlock (reads only) woke the watch")
            _ = try other.add(.genericPassword, genp("svc", "elsewhere"), data: bytes("x"))
            #expect(watch.drain(), "a commit through another opening did not wake the watch")
            #expect(!watch.drain(), "the events were not all read")
        }
    }
}
