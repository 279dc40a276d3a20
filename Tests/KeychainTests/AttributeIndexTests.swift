import Foundation
import KeychainCrypto
import Testing

@_spi(CallerRule) @testable import Keychain

// The Secret Service attribute index (vault format 3, Keychain+AttributeIndex.swift): one keyed
// tag per (name, value) pair of the map a D-Bus client sees, kept exact by every write, covered
// by the manifest, and only ever narrowing a search that still checks every decrypted item.

/// One row of the `attr_index` table.
struct IndexRow: Hashable, CustomStringConvertible {
    let id: Int64
    let tag: [UInt8]
    var description: String { "\(id):\(tag.prefix(4).map { String($0, radix: 16) }.joined())" }
}

/// Every row of the vault file's attribute index, read with plain SQLite.
func attributeIndexRows(_ path: String) throws -> Set<IndexRow> {
    var rows = Set<IndexRow>()
    for row in try RawDB(path).query("SELECT item_id, tag FROM attr_index") {
        guard case .integer(let id) = row[0], case .blob(let tag) = row[1] else { continue }
        rows.insert(IndexRow(id: id, tag: tag))
    }
    return rows
}

/// Every password item `caller` can see, attributes only, in (class, id) order.
func visiblePasswordItems(_ kc: Keychain, caller: Caller) throws -> [KeychainItem] {
    var out: [KeychainItem] = []
    for itemClass in Keychain.secretServiceClasses {
        do {
            out += try kc.copyMatching(
                Query(itemClass, [:], matchLimit: .all, returnAttributes: true, synchronizableAny: true), caller: caller
            )
        } catch let e as KeychainError where e.status == .itemNotFound {}
    }
    return out.sorted { ($0.itemClass.rawValue, $0.id) < ($1.itemClass.rawValue, $1.id) }
}

/// What the index must hold: each password item's tags, made from its decrypted attributes.
func expectedIndexRows(_ kc: Keychain, caller: Caller) throws -> Set<IndexRow> {
    let key = try kc.currentKeys().attributeIndex
    var rows = Set<IndexRow>()
    for item in try visiblePasswordItems(kc, caller: caller) {
        for tag in Keychain.attributeTags(item.itemClass, item.attributes, key: key) {
            rows.insert(IndexRow(id: item.id, tag: tag))
        }
    }
    return rows
}

/// A caller in the default and team groups.
let bothGroups = Caller(accessGroups: ["default", "team"], authenticationUI: .fail)
let teamOnly = Caller(accessGroups: ["team"], authenticationUI: .fail)

/// Ids a SearchItems-style query finds.
func searchIDs(_ kc: Keychain, _ query: [String: String], caller: Caller = .default) throws -> [Int64] {
    try kc.secretServiceItems(matching: query, caller: caller).map(\.id)
}

/// Adds an item the way the Secret Service face does.
@discardableResult
func addSecretServiceItem(
    _ kc: Keychain, _ attributes: [String: String], label: String = "item", secret: String = "s",
    caller: Caller = .default
) throws -> KeychainItem {
    let (itemClass, made) = try SecretServiceMapping.newItem(
        attributes: attributes, label: label, contentType: "text/plain")
    return try kc.add(itemClass, made, data: bytes(secret), caller: caller)
}

@Suite("Attribute index: writes keep it exact")
struct AttributeIndexTests {
    @Test("add, update, rename, attribute change and delete keep the index exact; search follows each")
    func writesKeepIndexExact() throws {
        try withVault { v throws in
            let kc = v.keychain
            func exact(_ sourceLocation: SourceLocation = #_sourceLocation) throws {
                #expect(
                    try attributeIndexRows(v.path) == expectedIndexRows(kc, caller: bothGroups),
                    sourceLocation: sourceLocation)
            }
            let custom = try addSecretServiceItem(
                kc, ["xdg:schema": "org.example.Custom", "tier": "gold", "region": "eu"], label: "custom")
            let cli = try kc.add(.genericPassword, genp("deploy", "ci"), data: bytes("cli"))
            let web = try kc.add(
                .internetPassword,
                [
                    Schema.server: .string("example.com"), Schema.account: .string("carol"),
                    Schema.protocolAttribute: .string(InternetProtocol.code(for: "https")!),
                ], data: bytes("web"))
            let team = try kc.add(.genericPassword, genp("deploy", "team-ci"), data: bytes("t"), caller: teamOnly)
            try exact()
            // One tag per pair of the map a client sees: 3 + 2 (service, username) + 4 + 2.
            #expect(try attributeIndexRows(v.path).count == 11)

            #expect(try searchIDs(kc, ["tier": "gold"]) == [custom.id])
            #expect(try searchIDs(kc, ["tier": "gold", "region": "us"]) == [])
            #expect(try searchIDs(kc, ["service": "deploy", "username": "ci"]) == [cli.id])
            #expect(try searchIDs(kc, ["service": "deploy"]) == [cli.id], "the team item stays hidden")
            #expect(try searchIDs(kc, ["service": "deploy"], caller: bothGroups) == [cli.id, team.id])
            #expect(try searchIDs(kc, ["service": "deploy"], caller: teamOnly) == [team.id])
            #expect(try searchIDs(kc, ["server": "example.com", "protocol": "https"]) == [web.id])
            #expect(try searchIDs(kc, ["xdg:schema": "org.gnome.keyring.NetworkPassword"]) == [web.id])
            #expect(try searchIDs(kc, [:]).sorted() == [custom.id, cli.id, web.id].sorted())

            // An update of the account (a mapped attribute).
            try kc.update(Query(.genericPassword, genp("deploy", "ci")), attributes: [Schema.account: .string("cd")])
            try exact()
            #expect(try searchIDs(kc, ["username": "ci"]) == [])
            #expect(try searchIDs(kc, ["username": "cd"]) == [cli.id])

            // A rename (what the mount's mv and the CLI do): the mapped service changes.
            try kc.rename(
                Query(.genericPassword, genp("deploy", "cd")), to: [Schema.service: .string("release")],
                replacing: false)
            try exact()
            #expect(try searchIDs(kc, ["service": "deploy"]) == [])
            #expect(try searchIDs(kc, ["service": "release", "username": "cd"]) == [cli.id])

            // The Secret Service `Attributes` property replaces the kept map.
            let customItem = try kc.item(id: custom.id, itemClass: .genericPassword, withData: false)
            try kc.update(
                Query(.genericPassword, [Schema.service: .string("org.example.Custom")]),
                attributes: try SecretServiceMapping.changes(
                    settingAttributes: ["xdg:schema": "org.example.Custom", "tier": "silver"], of: customItem))
            try exact()
            #expect(try searchIDs(kc, ["tier": "gold"]) == [])
            #expect(try searchIDs(kc, ["tier": "silver"]) == [custom.id])

            // New data (re-sealed row) keeps the tags.
            try kc.update(
                Query(.internetPassword, [Schema.server: .string("example.com")]), attributes: [:],
                data: bytes("new"))
            try exact()
            #expect(try searchIDs(kc, ["server": "example.com"]) == [web.id])

            // Delete: the item's rows go with it.
            try kc.delete(Query(.internetPassword, [Schema.server: .string("example.com")]))
            try exact()
            #expect(try attributeIndexRows(v.path).allSatisfy { $0.id != web.id })
            #expect(try searchIDs(kc, ["server": "example.com"]) == [])

            // Everything above went through the manifest: a fresh unlock verifies.
            _ = try v.openUnlocked()
        }
    }

    @Test("a master-key rotation re-tags every item under the new attribute-index key")
    func rotationRetags() throws {
        try withVault { v throws in
            let kc = v.keychain
            let custom = try addSecretServiceItem(kc, ["application": "app", "tier": "gold"])
            let cli = try kc.add(.genericPassword, genp("svc", "acct"), data: bytes("x"))
            let before = try attributeIndexRows(v.path)
            try kc.rotateMasterKey(old: try secure(testPassphrase), new: try secure("rotated passphrase"))
            let after = try attributeIndexRows(v.path)
            #expect(after.count == before.count)
            #expect(after.isDisjoint(with: before), "every tag is made under the new key")
            let again = try v.openUnlocked(passphrase: "rotated passphrase")
            #expect(try after == expectedIndexRows(again, caller: bothGroups))
            #expect(try searchIDs(again, ["tier": "gold"]) == [custom.id])
            #expect(try searchIDs(again, ["service": "svc", "username": "acct"]) == [cli.id])
        }
    }
}

@Suite("Attribute index: tampering")
struct AttributeIndexTamperTests {
    /// Each edit of the index with sqlite3 is refused at the next unlock, like a row edit.
    @Test(
        "a deleted, added, moved or dropped index row fails the unlock-time integrity check",
        arguments: [
            "DELETE FROM attr_index WHERE item_id = 1 AND tag = (SELECT min(tag) FROM attr_index WHERE item_id = 1)",
            "INSERT INTO attr_index(tag, item_id) SELECT tag, 2 FROM attr_index WHERE item_id = 1",
            "UPDATE attr_index SET item_id = 2 WHERE item_id = 1",
            "DROP TABLE attr_index",
        ])
    func tamperedIndexIsRefused(_ sql: String) throws {
        try withVault { v throws in
            let kc = v.keychain
            try addSecretServiceItem(kc, ["application": "hidden", "tier": "gold"])
            try addSecretServiceItem(kc, ["application": "other", "tier": "silver"])
            _ = try v.openUnlocked()
            try v.raw().exec(sql)
            expectError(.decode, containing: ["integrity check failed", "attribute-index"]) {
                try v.openUnlocked()
            }
        }
    }

    @Test("verify makes every item's tags again: a wrong tag written with a consistent manifest is named")
    func verifyRecomputesTags() throws {
        try withVault { v throws in
            let kc = v.keychain
            let item = try addSecretServiceItem(kc, ["application": "a", "tier": "gold"])
            #expect(try kc.verify(passphrase: try secure(testPassphrase)).isClean)
            // Through the core's own writer, so the manifest follows: only the recomputation sees it.
            try kc.writeTransaction(keys: try kc.currentKeys().manifest) {
                try $0.setAttributeTags([[UInt8](repeating: 7, count: 32)], itemID: item.id)
            }
            _ = try v.openUnlocked()
            let report = try kc.verify(passphrase: try secure(testPassphrase))
            #expect(report.damaged.map(\.id) == [item.id])
            #expect(report.damaged.first?.reason == "its attribute-index entries do not match its attributes")
        }
    }

    @Test("a forged index row met while unlocked never shows an item that does not match")
    func forgedRowOnlyNarrows() throws {
        try withVault { v throws in
            let kc = v.keychain
            let gold = try addSecretServiceItem(kc, ["application": "a", "tier": "gold"])
            let silver = try addSecretServiceItem(kc, ["application": "b", "tier": "silver"])
            // Every tag of the gold item copied onto the silver one.
            try v.raw().exec(
                "INSERT INTO attr_index(tag, item_id) SELECT tag, \(silver.id) FROM attr_index WHERE item_id = \(gold.id)"
            )
            #expect(try searchIDs(kc, ["tier": "gold"]) == [gold.id])
            #expect(try searchIDs(kc, ["application": "a"]) == [gold.id])
        }
    }
}

/// SplitMix64: a seeded generator, so a failing case can be replayed.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

@Suite("Attribute index: property")
struct AttributeIndexPropertyTests {
    static let names = [
        "service", "username", "xdg:schema", "application", "tier", "region", "color", "k", "host", "server",
        "protocol", "user", "port", "a=b", "",
    ]
    static let values = ["", "gold", "silver", "eu", "us", "x", "example.com", "https", "443", "é", "a&b", "blue"]
    static let schemas = ["org.git.Password", "org.example.Custom", "io.docker.Credentials", "org.gnome.keyring.Note"]

    static func randomMap(_ rng: inout SeededGenerator) -> [String: String] {
        var map: [String: String] = [:]
        for _ in 0..<Int.random(in: 0...5, using: &rng) {
            let name = names.randomElement(using: &rng)!
            guard !name.isEmpty else { continue }
            map[name] = name == "xdg:schema" ? schemas.randomElement(using: &rng)! : values.randomElement(using: &rng)!
        }
        return map
    }

    @Test("hundreds of random maps and queries: the index search equals the brute-force filter")
    func indexSearchEqualsBruteForce() throws {
        try withVault { v throws in
            let kc = v.keychain
            var rng = SeededGenerator(state: 0x5EC7_E75E_A2C4)
            var ids: [Int64] = []
            for n in 0..<300 {
                let caller = n % 7 == 0 ? teamOnly : Caller.default
                do {
                    if n % 10 == 0 {
                        // A CLI-style item, indexed by its mapped pairs.
                        let service = Self.values.randomElement(using: &rng)! + "\(n % 3)"
                        ids.append(try kc.add(.genericPassword, genp(service, "acct\(n % 4)"), data: bytes("d")).id)
                    } else {
                        ids.append(
                            try addSecretServiceItem(kc, Self.randomMap(&rng), label: "l\(n)", caller: caller).id)
                    }
                } catch let e as KeychainError where e.status == .duplicateItem {}
            }
            // Some attribute changes and deletes, so the index has history.
            for id in ids.shuffled(using: &rng).prefix(30) {
                guard let item = try? kc.item(id: id, itemClass: .genericPassword, withData: false, caller: bothGroups)
                else { continue }
                _ = try? kc.update(
                    Query(.genericPassword, [:], persistentReference: id),
                    attributes: try SecretServiceMapping.changes(settingAttributes: Self.randomMap(&rng), of: item),
                    caller: bothGroups)
            }
            for id in ids.shuffled(using: &rng).prefix(20) {
                for itemClass in Keychain.secretServiceClasses {
                    _ = try? kc.delete(Query(itemClass, [:], persistentReference: id), caller: bothGroups)
                }
            }
            #expect(try attributeIndexRows(v.path) == expectedIndexRows(kc, caller: bothGroups))
            var found = 0
            for caller in [Caller.default, teamOnly, bothGroups] {
                let all = try visiblePasswordItems(kc, caller: caller)
                for q in 0..<200 {
                    var query: [String: String]
                    if q % 3 == 0, let item = all.randomElement(using: &rng) {
                        // Pairs an item really has, sometimes with one value changed.
                        let have = SecretServiceMapping.attributes(of: item)
                        query = Dictionary(
                            uniqueKeysWithValues: have.shuffled(using: &rng).prefix(Int.random(in: 1...3, using: &rng))
                                .map { ($0.key, $0.value) })
                        if q % 2 == 0, let k = query.keys.first { query[k] = Self.values.randomElement(using: &rng)! }
                    } else {
                        query = Self.randomMap(&rng)
                    }
                    let expected = all.filter { SecretServiceMapping.matches($0, query) }.map(\.id)
                    #expect(try searchIDs(kc, query, caller: caller) == expected, "query \(query)")
                    if !expected.isEmpty && !query.isEmpty { found += 1 }
                }
            }
            #expect(found > 100, "most queries must find something, or the comparison proves little")
        }
    }
}
