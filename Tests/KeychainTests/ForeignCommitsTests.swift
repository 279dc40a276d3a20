import Foundation
import Synchronization
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
}
