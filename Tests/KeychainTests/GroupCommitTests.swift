import Dispatch
import Foundation
import KeychainCrypto
import Synchronization
import Testing

@testable import Keychain

/// Group commit (CommitQueue.swift): write transactions that arrive while another commits are
/// committed together, each under its own savepoint, with one manifest update.
@Suite("group commit of concurrent write transactions")
struct GroupCommitTests {
    @Test("writers queued behind a commit share one transaction; a failing one is rolled back alone")
    func queuedWritersShareOneCommit() throws {
        try withVault { v throws in
            let kc = v.keychain
            _ = try kc.add(.genericPassword, genp("svc", "taken"), data: bytes("first"))
            let startCounter = kc.highestCounterSeen()
            // A leader whose transaction is held open until the others have queued behind it.
            let leaderInside = DispatchSemaphore(value: 0)
            let releaseLeader = DispatchSemaphore(value: 0)
            let keys = try kc.callContext(nil).unlockedKeys().manifest
            let outcomes = Mutex<[String: String]>([:])
            let group = DispatchGroup()
            onOwnThread(group) {
                do {
                    try kc.writeTransaction(keys: keys) { _ in
                        leaderInside.signal()
                        releaseLeader.wait()
                    }
                    outcomes.withLock { $0["leader"] = "ok" }
                } catch { outcomes.withLock { $0["leader"] = "\(error)" } }
            }
            leaderInside.wait()
            let writers: [(String, String)] = [("w1", "one"), ("dup", "taken"), ("w2", "two"), ("w3", "three")]
            for (name, account) in writers {
                onOwnThread(group) {
                    do {
                        _ = try kc.add(.genericPassword, genp("svc", account), data: bytes("data-\(name)"))
                        outcomes.withLock { $0[name] = "ok" }
                    } catch let e as KeychainError {
                        outcomes.withLock { $0[name] = e.status.name }
                    } catch { outcomes.withLock { $0[name] = "\(error)" } }
                }
            }
            // All four are queued behind the leader before it commits.
            #expect(waitFor { kc.commitQueue.waiting == 4 }, "the writers did not queue")
            releaseLeader.signal()
            group.wait()
            let results = outcomes.withLock { $0 }
            for name in ["leader", "w1", "w2", "w3"] { #expect(results[name] == "ok", "\(name): \(results)") }
            #expect(results["dup"] == KeychainStatus.duplicateItem.name, "\(results)")
            // Two commits: the leader's, then one for the four queued writers.
            let counter = kc.highestCounterSeen()
            #expect(counter == startCounter + 2, "counter \(counter) from \(startCounter)")
            // Everything committed reads back, from a fresh opening (manifest verified at unlock).
            let reopened = try v.openUnlocked()
            for (name, account) in writers where name != "dup" {
                let item = try reopened.copyMatching(
                    Query(.genericPassword, genp("svc", account), matchLimit: .one, returnData: true))
                #expect(item.first?.data == bytes("data-\(name)"))
            }
            let taken = try reopened.copyMatching(
                Query(.genericPassword, genp("svc", "taken"), matchLimit: .one, returnData: true))
            #expect(taken.first?.data == bytes("first"), "the refused duplicate changed the item")
        }
    }

    @Test("a create queued first commits in one batch with the durable writers behind it, and takes no fsync")
    func createJoinsDurableBatch() throws {
        try withVault { v throws in
            let kc = v.keychain
            let startCounter = kc.highestCounterSeen()
            let leaderInside = DispatchSemaphore(value: 0)
            let releaseLeader = DispatchSemaphore(value: 0)
            let keys = try kc.callContext(nil).unlockedKeys().manifest
            let outcomes = Mutex<[String: String]>([:])
            let group = DispatchGroup()
            onOwnThread(group) {
                do {
                    try kc.writeTransaction(keys: keys) { _ in
                        leaderInside.signal()
                        releaseLeader.wait()
                    }
                    outcomes.withLock { $0["leader"] = "ok" }
                } catch { outcomes.withLock { $0["leader"] = "\(error)" } }
            }
            leaderInside.wait()
            let before = kc.commitQueue.ledger.withLock { $0.committed }
            // The create (the mount's: no fsync) first in the queue, two durable writers after it.
            let writers: [(String, Bool)] = [("create", false), ("w1", true), ("w2", true)]
            for (index, (name, durable)) in writers.enumerated() {
                onOwnThread(group) {
                    do {
                        _ = try kc.add(.genericPassword, genp("mixed", name), data: bytes(name), durable: durable)
                        outcomes.withLock { $0[name] = "ok" }
                    } catch { outcomes.withLock { $0[name] = "\(error)" } }
                }
                #expect(waitFor { kc.commitQueue.waiting == index + 1 }, "\(name) did not queue")
            }
            releaseLeader.signal()
            group.wait()
            let results = outcomes.withLock { $0 }
            for name in ["leader", "create", "w1", "w2"] { #expect(results[name] == "ok", "\(name): \(results)") }
            // Two batches: the leader's, then the create with the two durable writers (it used
            // to lead a batch of its own, the durable ones a third); each took the counter up.
            let ledger = kc.commitQueue.ledger.withLock { $0 }
            #expect(ledger.committed == before + 2, "\(ledger.committed - before) batches after the leader's")
            #expect(
                kc.highestCounterSeen() == startCounter + 2, "counter \(kc.highestCounterSeen()) from \(startCounter)")
            // Both durable batches are covered by a finished fsync, and nothing is owed.
            #expect(ledger.synced == ledger.committed)
            #expect(!kc.lastCommitUndurable)
            let reopened = try v.openUnlocked()
            for (name, _) in writers {
                let item = try reopened.copyMatching(
                    Query(.genericPassword, genp("mixed", name), matchLimit: .one, returnData: true))
                #expect(item.first?.data == bytes(name), "\(name) did not read back")
            }
        }
    }

    @Test("a create alone leaves the counter, and makeCommitsDurable takes it up with one durable commit")
    func createAloneThenDurable() throws {
        try withVault { v throws in
            let kc = v.keychain
            let startCounter = kc.highestCounterSeen()
            _ = try kc.add(.genericPassword, genp("alone", "new"), data: [], durable: false)
            #expect(kc.lastCommitUndurable)
            #expect(kc.highestCounterSeen() == startCounter, "a create's commit raised the mark")
            try kc.makeCommitsDurable()
            #expect(!kc.lastCommitUndurable)
            #expect(kc.highestCounterSeen() == startCounter + 1)
            // Nothing owed now: a second call commits nothing.
            let committed = kc.commitQueue.ledger.withLock { $0.committed }
            try kc.makeCommitsDurable()
            #expect(kc.commitQueue.ledger.withLock { $0.committed } == committed)
        }
    }

    @Test("400 concurrent adds from 8 threads: every item is there and the manifest verifies")
    func manyConcurrentWriters() throws {
        try withVault { v throws in
            let kc = v.keychain
            let failures = Mutex<[String]>([])
            DispatchQueue.concurrentPerform(iterations: 8) { t in
                for i in 0..<50 {
                    do {
                        _ = try kc.add(.genericPassword, genp("conc", "t\(t)-\(i)"), data: bytes("s\(t)-\(i)"))
                    } catch { failures.withLock { $0.append("\(t)-\(i): \(error)") } }
                }
            }
            #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 }.prefix(3))")
            let reopened = try v.openUnlocked()
            let all = try reopened.copyMatching(
                Query(.genericPassword, [Schema.service: .string("conc")], matchLimit: .all, returnAttributes: true))
            #expect(all.count == 400)
        }
    }
}

/// Runs `body` on a thread of its own, inside `group`: libdispatch on Linux gives the global
/// queue about one thread per CPU and cannot see a blocked one, so with the leader held and other
/// suites' work on the pool the queued writers sometimes never started (a CI run on 2 CPUs).
private func onOwnThread(_ group: DispatchGroup, _ body: @escaping @Sendable () -> Void) {
    group.enter()
    Thread.detachNewThread {
        body()
        group.leave()
    }
}

/// Polls `condition` for up to 10 s (a state another thread reaches; not a timing).
private func waitFor(_ condition: () -> Bool) -> Bool {
    for _ in 0..<1000 {
        if condition() { return true }
        usleep(10_000)
    }
    return condition()
}
