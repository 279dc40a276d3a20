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
