import Foundation
import KeychainCrypto
import Synchronization
import Testing

@_spi(CallerRule) @testable import Keychain

/// The change log (vault format 7, ChangeLog.swift): a sealed row per committed item change,
/// written in the change's transaction, numbered without gaps, pruned to `ChangeLog.retained`.
@Suite("the change log: rows in the change's transaction, sealed, gap-free, bounded")
struct ChangeLogTests {
    static func account(_ names: Attributes?) -> String? {
        guard case .string(let s)? = names?[Schema.account] else { return nil }
        return s
    }

    @Test("add, update, rename, delete: one row each, numbered 1…4, with names before and after, none in clear")
    func logsEachChange() throws {
        try withVault { v throws in
            let kc = v.keychain
            let item = try kc.add(.genericPassword, genp("svc", "alice-log"), data: bytes("one"))
            try kc.update(Query(.genericPassword, genp("svc", "alice-log")), attributes: [:], data: bytes("two"))
            try kc.update(
                Query(.genericPassword, genp("svc", "alice-log")), attributes: [Schema.account: .string("bob-log")])
            _ = try kc.delete(Query(.genericPassword, genp("svc", "bob-log")))
            let page = try kc.changeLog(after: 0)
            #expect(page.changes.map(\.seq) == [1, 2, 3, 4] && page.last == 4)
            #expect(page.changes.map(\.kind) == [.added, .changed, .renamed, .removed])
            #expect(page.changes.allSatisfy { $0.id == item.id && $0.itemClass == .genericPassword })
            #expect(page.changes.map { Self.account($0.before) } == [nil, nil, "alice-log", "bob-log"])
            #expect(page.changes.map { Self.account($0.after) } == ["alice-log", "alice-log", "bob-log", nil])
            #expect(page.changes.allSatisfy { ($0.after ?? $0.before)?[Schema.service] == .string("svc") })
            #expect(try kc.changeLog(after: 2).changes.map(\.seq) == [3, 4])
            #expect(try kc.changeLog(after: 4).changes.isEmpty)
            // The rows: class, id and operation in clear, the names sealed.
            let rows = try v.raw().query("SELECT seq, class, item_id, op, sealed FROM change_log ORDER BY seq")
            #expect(rows.count == 4)
            for row in rows {
                guard case .blob(let sealed) = row[4] else {
                    Issue.record("no sealed blob")
                    continue
                }
                for name in ["alice-log", "bob-log", "svc"] {
                    #expect(!Data(sealed).contains(Data(name.utf8)), "a name in clear in the log")
                }
            }
        }
    }

    @Test("a write that fails (a duplicate) leaves no row and no gap; the observers get each change's seq")
    func rolledBackMemberLeavesNoRow() throws {
        try withVault { v throws in
            let kc = v.keychain
            _ = try kc.add(.genericPassword, genp("svc", "taken"), data: bytes("x"))
            #expect(throws: KeychainError.self) { try kc.add(.genericPassword, genp("svc", "taken"), data: bytes("y")) }
            let seqs = Mutex<[Int64]>([])
            kc.onCommit { changes in seqs.withLock { $0 += changes.map(\.seq) } }
            _ = try kc.add(.genericPassword, genp("svc", "next"), data: bytes("z"))
            #expect(try kc.changeLog(after: 0).changes.map(\.seq) == [1, 2])
            #expect(seqs.withLock { $0 } == [2])
        }
    }

    @Test("the log keeps the last 10,000 changes: an older --since is errSecDataNotAvailable, never a gap")
    func retention() throws {
        try withVault { v throws in
            let kc = v.keychain
            let n = Int(ChangeLog.retained) + 5
            _ = try kc.addBatch(
                (0..<n).map { NewItem(.genericPassword, genp("bulk", "a\($0)"), data: bytes("s")) })
            #expect(
                try v.raw().query("SELECT min(seq), max(seq), count(*) FROM change_log") == [
                    [.integer(6), .integer(Int64(n)), .integer(ChangeLog.retained)]
                ])
            expectError(.dataNotAvailable, containing: ["no longer holds"]) { try kc.changeLog(after: 4) }
            #expect(try kc.changeLog(after: 5, limit: 3).changes.map(\.seq) == [6, 7, 8])
            #expect(try kc.changeLog(after: -1, limit: 1).changes.map(\.seq) == [6])
            expectError(.dataNotAvailable, containing: ["ends at"]) { try kc.changeLog(after: Int64(n) + 1) }
        }
    }

    @Test("a row deleted, altered or moved to another sequence number is refused as tampering, and verify says so")
    func tamperedRowsAreRefused() throws {
        for tamper in [
            "DELETE FROM change_log WHERE seq = 2",
            "UPDATE change_log SET sealed = (SELECT sealed FROM change_log WHERE seq = 1) WHERE seq = 2",
            "UPDATE change_log SET op = 4 WHERE seq = 2",
            "UPDATE change_log SET item_id = 99 WHERE seq = 2",
        ] {
            try withVault { v throws in
                let kc = v.keychain
                for account in ["a", "b", "c"] {
                    _ = try kc.add(.genericPassword, genp("svc", account), data: bytes("s"))
                }
                #expect(try kc.verify(passphrase: try secure(testPassphrase)).isClean)
                try v.raw().exec(tamper)
                expectError(.decode) { try kc.changeLog(after: 0) }
                let report = try kc.verify(passphrase: try secure(testPassphrase))
                let failure = report.failures.first ?? ""
                #expect(
                    report.failures.count == 1
                        && (failure.contains("change-log row") || failure.contains("change log has a gap")),
                    "\(report.failures)")
            }
        }
    }

    @Test("a master-key rotation seals the log anew: the same rows, readable with the new keys, numbered on")
    func rotationKeepsTheLog() throws {
        try withVault { v throws in
            let kc = v.keychain
            _ = try kc.add(.genericPassword, genp("svc", "before-rotation"), data: bytes("s"))
            let sealed = try v.raw().query("SELECT sealed FROM change_log")
            try kc.rotateMasterKey(old: try secure(testPassphrase), new: try secure("rotated passphrase"))
            #expect(try v.raw().query("SELECT sealed FROM change_log") != sealed, "sealed anew")
            _ = try kc.add(.genericPassword, genp("svc", "after-rotation"), data: bytes("s"))
            let again = try v.openUnlocked(passphrase: "rotated passphrase")
            let page = try again.changeLog(after: 0)
            #expect(page.changes.map(\.seq) == [1, 2])
            #expect(page.changes.map { Self.account($0.after) } == ["before-rotation", "after-rotation"])
        }
    }

    @Test("a caller sees a change only in its groups: a rename across groups is an add or a delete to one side")
    func visibility() {
        let a: Attributes = [
            Schema.service: .string("s"), Schema.account: .string("x"), Schema.accessGroup: .string("a"),
        ]
        var b = a
        b[Schema.accessGroup] = .string("b")
        let rename = LoggedChange(seq: 1, itemClass: .genericPassword, id: 1, kind: .renamed, before: a, after: b)
        #expect(rename.visible { _ in true } == rename)
        #expect(rename.visible { _ in false } == nil)
        #expect(rename.visible { $0 == "a" }?.kind == .removed && rename.visible { $0 == "a" }?.after == nil)
        #expect(rename.visible { $0 == "b" }?.kind == .added && rename.visible { $0 == "b" }?.before == nil)
        let plain = LoggedChange(seq: 2, itemClass: .genericPassword, id: 1, kind: .changed, before: nil, after: [:])
        #expect(plain.visible { $0 == Caller.defaultAccessGroup } == plain)
    }
}
