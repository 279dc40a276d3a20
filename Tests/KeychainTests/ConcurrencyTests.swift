import Foundation
import Keychain
import Synchronization
import Testing

private let A = Schema.self

@Suite("Concurrency")
struct ConcurrencyTests {
    @Test("two Keychain instances (two connections) adding 500 items each at once: all 1000 present, manifest intact")
    func twoConnections() throws {
        try withVault { v throws in
            let first = v.keychain
            let second = try v.openUnlocked()
            let errors = ErrorBox()
            let perWriter = 500
            let writers: [(String, Keychain)] = [("one", first), ("two", second)]
            runOnThreads(
                writers.map { name, kc in
                    { @Sendable in
                        for i in 0..<perWriter {
                            do {
                                try kc.add(
                                    .genericPassword, genp("svc-\(name)", "acct-\(i)"), data: bytes("\(name)-\(i)"))
                            } catch {
                                errors.add(error, "\(name) #\(i)")
                            }
                        }
                    }
                })
            #expect(errors.all.isEmpty, "\(errors.all.prefix(5))")
            #expect(try first.itemCount() == 2 * perWriter)

            let fresh = try v.openUnlocked()
            try fresh.verifyIntegrity()
            for name in ["one", "two"] {
                let items = try fresh.copyMatching(
                    Query(.genericPassword, genp("svc-\(name)"), matchLimit: .all, returnData: true))
                #expect(items.count == perWriter)
                #expect(Set(items.compactMap { $0.string(A.account) }).count == perWriter)
                #expect(items.allSatisfy { $0.data == bytes("\(name)-" + $0.string(A.account)!.dropFirst(5)) })
            }
            #expect(
                Set(try fresh.copyMatching(Query(.genericPassword, matchLimit: .all)).map(\.id)).count == 2 * perWriter)
        }
    }

    @Test("one Keychain used from many threads: adds, reads, updates and deletes interleave safely")
    func oneInstanceManyThreads() throws {
        try withVault { v throws in
            let kc = v.keychain
            let other = try v.openUnlocked()
            try kc.add(.genericPassword, genp("shared", "counter"), data: bytes("0"))
            let errors = ErrorBox()
            let threads = 4, perThread = 60
            var bodies: [@Sendable () -> Void] = []
            for t in 0..<threads {
                bodies.append { @Sendable in
                    let target = t % 2 == 0 ? kc : other
                    for i in 0..<perThread {
                        do {
                            try target.add(.genericPassword, genp("t\(t)", "a\(i)"), data: bytes("\(t)/\(i)"))
                            guard try secret(target, "t\(t)", "a\(i)") == bytes("\(t)/\(i)") else {
                                errors.add(KeychainError(.decode, "read back wrong data"), "t\(t) #\(i)"); continue
                            }
                            try target.update(
                                Query(.genericPassword, genp("shared", "counter")),
                                attributes: [A.label: .string("t\(t) i\(i)")])
                            if i % 3 == 0 { try target.delete(Query(.genericPassword, genp("t\(t)", "a\(i)"))) }
                            _ = try target.copyMatching(
                                Query(.genericPassword, genp("t\((t + 1) % threads)"), matchLimit: .all))
                        } catch KeychainStatus.itemNotFound {
                            // The neighbour may not have added anything yet.
                        } catch {
                            errors.add(error, "t\(t) #\(i)")
                        }
                    }
                }
            }
            runOnThreads(bodies)
            #expect(errors.all.isEmpty, "\(errors.all.prefix(5))")
            let survivors = perThread - (perThread + 2) / 3
            #expect(try kc.itemCount() == 1 + threads * survivors)
            try kc.verifyIntegrity()
            try v.openUnlocked().verifyIntegrity()
        }
    }

    @Test("concurrent adds of the same item from two connections: exactly one wins, the other is a duplicate")
    func racingDuplicates() throws {
        try withVault { v throws in
            let one = v.keychain, two = try v.openUnlocked()
            let wins = ErrorBox(), losses = ErrorBox(), errors = ErrorBox()
            let rounds = 50
            runOnThreads(
                [one, two].enumerated().map { n, kc in
                    { @Sendable in
                        for i in 0..<rounds {
                            do {
                                try kc.add(.genericPassword, genp("race", "r\(i)"), data: bytes("writer \(n)"))
                                wins.add(KeychainError(.success, ""), "r\(i)")
                            } catch KeychainStatus.duplicateItem {
                                losses.add(KeychainError(.duplicateItem, ""), "r\(i)")
                            } catch {
                                errors.add(error, "writer \(n) r\(i)")
                            }
                        }
                    }
                })
            #expect(errors.all.isEmpty, "\(errors.all.prefix(5))")
            #expect(wins.all.count == rounds)
            #expect(losses.all.count == rounds)
            #expect(try one.itemCount() == rounds)
            try v.openUnlocked().verifyIntegrity()
        }
    }
}

@Suite("Concurrency: integrity checks under load")
struct IntegrityUnderLoadTests {
    @Test("verifyIntegrity on one connection never reports damage while another connection writes")
    func verifyWhileWriting() throws {
        try withVault { v throws in
            let writer = v.keychain
            let checker = try v.openUnlocked()
            let errors = ErrorBox()
            let done = DoneFlag()
            let checks = Counter()
            runOnThreads([
                { @Sendable in
                    defer { done.set() }
                    for i in 0..<200 {
                        do {
                            try writer.add(.genericPassword, genp("load", "a\(i)"), data: bytes("\(i)"))
                            if i % 4 == 3 {
                                try writer.update(
                                    Query(.genericPassword, genp("load", "a\(i - 1)")), attributes: [:],
                                    data: bytes("u"))
                            }
                            if i % 5 == 4 { try writer.delete(Query(.genericPassword, genp("load", "a\(i - 2)"))) }
                        } catch { errors.add(error, "writer #\(i)") }
                    }
                },
                { @Sendable in
                    while !done.isSet {
                        do { try checker.verifyIntegrity(); checks.increment() } catch { errors.add(error, "checker") }
                    }
                },
            ])
            #expect(errors.all.isEmpty, "\(errors.all.prefix(5))")
            #expect(checks.value > 0)
            try v.openUnlocked().verifyIntegrity()
        }
    }
}

final class DoneFlag: Sendable {
    private let done = Mutex(false)
    func set() { done.withLock { $0 = true } }
    var isSet: Bool { done.withLock { $0 } }
}

final class Counter: Sendable {
    private let n = Mutex(0)
    func increment() { n.withLock { $0 += 1 } }
    var value: Int { n.withLock { $0 } }
}
