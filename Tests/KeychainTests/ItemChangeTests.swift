import Foundation
import Synchronization
import Testing

@_spi(CallerRule) @testable import Keychain

/// The core's change stream (issue 30, ItemChange.swift): every commit hands its item changes to
/// the `onCommit` observers, each with the face it was made through and, on demand, its names
/// before and after, which are what a face spells a path from.
@Suite("the core's change stream: kinds, origin, names")
struct ItemChangeTests {
    @Test("add, data write, rename, delete: one change each, with the caller's face and both names")
    func changesCarryOriginAndNames() throws {
        try withVault { v throws in
            let kc = v.keychain
            let seen = Mutex<[ItemChange]>([])
            kc.onCommit { changes in seen.withLock { $0 += changes } }
            let api = Caller.default.originating("api")
            let item = try kc.add(.genericPassword, genp("svc", "alice"), data: bytes("one"), caller: api)
            try kc.update(Query(.genericPassword, genp("svc", "alice")), attributes: [:], data: bytes("two"))
            try kc.update(
                Query(.genericPassword, genp("svc", "alice")), attributes: [Schema.account: .string("bob")],
                caller: Caller.default.originating("fuse"))
            _ = try kc.delete(Query(.genericPassword, genp("svc", "bob")), caller: api)
            let changes = seen.withLock { $0 }
            #expect(changes.map(\.kind) == [.added, .changed, .renamed, .removed])
            #expect(changes.allSatisfy { $0.id == item.id && $0.itemClass == .genericPassword })
            #expect(changes.map(\.origin) == ["api", "", "fuse", "api"])
            #expect(changes.map(\.dataChanged) == [true, true, false, false])
            func account(_ entry: NameListEntry?) -> String? {
                guard case .string(let s)? = entry?[Schema.account] else { return nil }
                return s
            }
            let names = changes.map { kc.names(of: $0) }
            #expect(names.map { account($0.before) } == [nil, "alice", "alice", "bob"])
            #expect(names.map { account($0.after) } == ["alice", "alice", "bob", nil])
            #expect(names.allSatisfy { ($0.before ?? $0.after)?.groupingValue == .string("svc") })
            #expect(names.allSatisfy { ($0.before ?? $0.after)?.accessGroup == Caller.defaultAccessGroup })
        }
    }

    @Test("each writer hears its own changes on its own thread before it returns")
    func writerHearsItsOwnChanges() throws {
        try withVault { v throws in
            let kc = v.keychain
            let heard = Mutex<[(Int64, ItemChange.Kind)]>([])
            kc.beforeWriterReturns { changes in heard.withLock { $0 += changes.map { ($0.id, $0.kind) } } }
            let item = try kc.add(.genericPassword, genp("svc", "carol"), data: bytes("x"))
            #expect(heard.withLock { $0.map(\.0) } == [item.id])
            _ = try kc.delete(Query(.genericPassword, genp("svc", "carol")))
            #expect(heard.withLock { $0.map(\.1) } == [.added, .removed])
        }
    }

    @Test("a write that fails (a duplicate) hands out no change")
    func rolledBackMemberHasNoChange() throws {
        try withVault { v throws in
            let kc = v.keychain
            _ = try kc.add(.genericPassword, genp("svc", "taken"), data: bytes("x"))
            let seen = Mutex<[ItemChange]>([])
            kc.onCommit { changes in seen.withLock { $0 += changes } }
            #expect(throws: KeychainError.self) {
                try kc.add(.genericPassword, genp("svc", "taken"), data: bytes("y"))
            }
            #expect(seen.withLock { $0 }.isEmpty)
        }
    }
}
