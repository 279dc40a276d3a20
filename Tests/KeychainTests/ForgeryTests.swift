import Foundation
@_spi(CallerRule) import Keychain
import KeychainCrypto
import Testing

// Forgeries built the way an attacker holding honest copies of the vault would build them:
// real snapshots of the file taken at different moments (checkpointed, then copied), rows and
// meta blobs recombined between them with SQL. Each must be refused at unlock with a message
// that names what failed, and the keychain must stay locked: never wrong data.

/// Checkpoints the WAL into the main file and copies it to `dir/name`: an honest copy.
func snapshotFile(_ v: TestVault, _ name: String) throws -> String {
    try v.raw().exec("PRAGMA wal_checkpoint(TRUNCATE)")
    let copy = v.dir + "/" + name
    try FileManager.default.copyItem(atPath: v.path, toPath: copy)
    return copy
}

/// A copy of `base` changed by `sql`, run with each of `attach` attached as s0, s1, …
func forge(_ v: TestVault, from base: String, attach: [String] = [], _ sql: String) throws -> String {
    let forged = v.dir + "/forged-\(UUID().uuidString).vault"
    try FileManager.default.copyItem(atPath: base, toPath: forged)
    let db = try RawDB(forged)
    for (i, path) in attach.enumerated() { try db.exec("ATTACH '\(path)' AS s\(i)") }
    try db.exec(sql)
    try db.exec("PRAGMA wal_checkpoint(TRUNCATE)")
    return forged
}

/// SQL that puts row `id` of the attached snapshot `from` in place of the current one.
func replayRow(_ id: Int64, from snapshot: String) -> String {
    let columns = RawDB.itemColumns.joined(separator: ", ")
    return
        "UPDATE items SET (\(columns)) = (SELECT \(columns) FROM \(snapshot).items WHERE id = \(id)) WHERE id = \(id);"
}

func replayMeta(_ name: String, from snapshot: String) -> String {
    "UPDATE meta SET value = (SELECT value FROM \(snapshot).meta WHERE name = '\(name)') WHERE name = '\(name)';"
}

/// Expects unlocking `path` to be refused with errSecDecode naming `containing`, the keychain
/// left locked.
func expectRefused(
    _ v: TestVault, _ path: String, containing: [String], sourceLocation: SourceLocation = #_sourceLocation
) throws {
    let kc = try Keychain.open(at: path, deviceKeyPath: v.deviceKeyPath)
    expectError(.decode, containing: containing, sourceLocation: sourceLocation) {
        try kc.unlock(passphrase: try secure(testPassphrase))
    }
    #expect(kc.lockState == .neverUnlocked, sourceLocation: sourceLocation)
}

@Suite("Forgeries from real snapshots")
struct ForgeryTests {
    @Test("two snapshots mixed (one item at its old secret beside another's new one) never open, whichever manifest")
    func twoSnapshotMix() throws {
        try withVault { v throws in
            let kc = v.keychain
            let a = try kc.add(.genericPassword, genp("svc", "a"), data: bytes("a-1"))
            let b = try kc.add(.genericPassword, genp("svc", "b"), data: bytes("b-1"))
            let first = try snapshotFile(v, "first.vault")
            try kc.update(Query(.genericPassword, genp("svc", "a")), attributes: [:], data: bytes("a-2"))
            let second = try snapshotFile(v, "second.vault")
            try kc.update(Query(.genericPassword, genp("svc", "b")), attributes: [:], data: bytes("b-2"))
            let third = try snapshotFile(v, "third.vault")
            // {a-1, b-2} never existed. Under the last manifest, and under each older one.
            for manifestFrom in ["s0", "s1", "s2"] {
                let forged = try forge(
                    v, from: third, attach: [first, second, third],
                    replayRow(a.id, from: "s0") + replayMeta("manifest", from: manifestFrom))
                try expectRefused(v, forged, containing: ["manifest", "replayed"])
            }
            // And the other way round: {a-2, b-1} is the second snapshot itself, which did exist.
            let honest = try forge(v, from: third, attach: [second], replayRow(b.id, from: "s0"))
            try expectRefused(v, honest, containing: ["manifest", "2 rows found, 2 expected"])
            #expect(try secret(v.openUnlocked(), "svc", "a") == bytes("a-2"))
        }
    }

    @Test("a selective deletion assembled from three copies (count and accumulator adjusted) is refused by the tag")
    func selectiveDeletion() throws {
        try withVault { v throws in
            let kc = v.keychain
            try kc.add(.genericPassword, genp("svc", "a"), data: bytes("a"))
            try kc.add(.genericPassword, genp("svc", "b"), data: bytes("b"))
            let first = try snapshotFile(v, "first.vault")
            let c = try kc.add(.genericPassword, genp("svc", "c"), data: bytes("c"))
            let second = try snapshotFile(v, "second.vault")
            try kc.update(Query(.genericPassword, genp("svc", "a")), attributes: [:], data: bytes("a-2"))
            let third = try snapshotFile(v, "third.vault")
            // c's entry is the difference of the first two accumulators; taking it out of the
            // third (and the count down by one) is exactly what format 1 accepted.
            func manifest(_ path: String) throws -> [UInt8] { try #require(try RawDB(path).meta("manifest")) }
            let m1 = try manifest(first), m2 = try manifest(second)
            var m3 = try manifest(third)
            for i in 24..<56 { m3[i] ^= m1[i] ^ m2[i] }
            m3[8] -= 1
            let forged = try forge(v, from: third, "DELETE FROM items WHERE id = \(c.id);")
            try RawDB(forged).setMeta("manifest", m3)
            try expectRefused(v, forged, containing: ["manifest", "authentication tag does not verify"])
            // Without touching the manifest, the deletion is named as such.
            let plain = try forge(v, from: third, "DELETE FROM items WHERE id = \(c.id);")
            try expectRefused(v, plain, containing: ["2 rows found, 3 expected", "deleted"])
        }
    }

    @Test("an older access policy replayed (dd back in team) is refused, naming the policy")
    func policyRollback() throws {
        try withVault { v throws in
            let kc = v.keychain
            var policy = AccessPolicy()
            policy.add(group: "team", executable: "/usr/bin/dd")
            policy.add(group: "team", executable: "/usr/bin/cat")
            try kc.setAccessPolicy(policy, passphrase: try secure(testPassphrase))
            try kc.add(
                .genericPassword, genp("svc", "team", [Schema.accessGroup: .string("team")]), data: bytes("t"),
                caller: Caller(accessGroups: ["team", "default"]))
            let before = try snapshotFile(v, "before.vault")
            let removed = policy.remove(group: "team", executable: "/usr/bin/dd")
            #expect(removed)
            try kc.setAccessPolicy(policy, passphrase: try secure(testPassphrase))
            let after = try snapshotFile(v, "after.vault")
            let forged = try forge(v, from: after, attach: [before], replayMeta("access_policy", from: "s0"))
            try expectRefused(v, forged, containing: ["access policy", "replayed"])
            // The honest file still says dd is out.
            let kc2 = try v.openUnlocked()
            #expect(try !kc2.accessPolicy().accessGroups(forExecutable: "/usr/bin/dd").contains("team"))
        }
    }

    @Test("a row duplicated under a new id is refused, naming the id and the row that fails its own check")
    func duplicatedRow() throws {
        try withVault { v throws in
            let kc = v.keychain
            let a = try kc.add(.genericPassword, genp("svc", "a"), data: bytes("a"))
            let b = try kc.add(.genericPassword, genp("svc", "b"), data: bytes("b"))
            try kc.delete(Query(.genericPassword, genp("svc", "b")))
            let now = try snapshotFile(v, "now.vault")
            // The copy needs its own primary index (the column is UNIQUE): one byte appended.
            func copyOfA(as id: Int64) -> String {
                """
                INSERT INTO items(id, class, pidx, sidx, version, data_gen, attrs, item_key, data)
                SELECT \(id), class, pidx || x'00', sidx, version, data_gen, attrs, item_key, data
                FROM items WHERE id = \(a.id);
                """
            }
            // Under an id never issued.
            let fresh = try forge(v, from: now, copyOfA(as: b.id + 5))
            try expectRefused(v, fresh, containing: ["never issued", "\(b.id + 5) (genp)"])
            // Under the id of the deleted item (issued, so only the count and the row's own
            // check give it away).
            let reused = try forge(v, from: now, copyOfA(as: b.id))
            try expectRefused(v, reused, containing: ["rows were added", "\(b.id) (genp)"])
        }
    }

    @Test("an edited device_key_id reads as tampering, not as another machine")
    func deviceKeyID() throws {
        try withVault { v throws in
            try v.keychain.add(
                .genericPassword, genp("svc", "a", [Schema.accessible: .accessibility(.whenUnlockedThisDeviceOnly)]),
                data: bytes("a"))
            let db = try v.raw()
            var id = try #require(try db.meta("device_key_id"))
            id[0] ^= 1
            try db.setMeta("device_key_id", id)
            try expectRefused(v, v.path, containing: ["authentication tag does not verify", "device_key_id"])
        }
    }
}

@Suite("Salvage")
struct SalvageTests {
    @Test("a vault that no longer unlocks: salvage copies every intact item (and the policy), names what it leaves")
    func salvagesIntactItems() throws {
        try withVault { v throws in
            let kc = v.keychain
            var policy = AccessPolicy()
            policy.add(group: "team", executable: "/usr/bin/dd")
            try kc.setAccessPolicy(policy, passphrase: try secure(testPassphrase))
            try kc.add(.genericPassword, genp("svc", "a", [Schema.label: .string("kept label")]), data: bytes("a"))
            let b = try kc.add(.genericPassword, genp("svc", "b"), data: bytes("b"))
            try kc.add(.internetPassword, [Schema.server: .string("example.com")], data: bytes("c"))
            try v.raw().flipByte("data", id: b.id) { $0 / 2 }
            try v.raw().query("DELETE FROM items WHERE id = 3")
            expectError(.decode, containing: ["manifest"]) { try v.openUnlocked() }

            let destination = v.dir + "/salvaged.vault"
            let report = try Keychain.salvage(
                from: v.path, to: destination, passphrase: try secure(testPassphrase), deviceKeyPath: v.deviceKeyPath)
            #expect(report.salvaged == 1)
            #expect(report.policyCopied)
            #expect(report.skipped.map(\.id) == [b.id])
            #expect(report.skipped.first?.reason == "its data does not authenticate")
            let salvaged = try Keychain.open(at: destination, deviceKeyPath: v.deviceKeyPath).unlocked(testPassphrase)
            #expect(try secret(salvaged, "svc", "a") == bytes("a"))
            let item = try salvaged.find(Query(.genericPassword, genp("svc", "a")))
            #expect(item.string(Schema.label) == "kept label")
            #expect(try salvaged.accessPolicy().groups.map(\.name) == ["team"])
            #expect(try salvaged.verify(passphrase: try secure(testPassphrase)).isClean)
        }
    }
}
