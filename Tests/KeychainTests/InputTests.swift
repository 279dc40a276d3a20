import Foundation
import Keychain
import Testing

// Bad and unusual input: any string the type allows is a name; size limits are exact; a
// refused call leaves the vault exactly as it was.

private let A = Schema.self
private func s(_ v: String) -> AttributeValue { .string(v) }

/// Asserts the vault holds exactly `before` and that its manifest still verifies, on this
/// keychain and on a fresh open.
private func expectUnchanged(
    _ v: TestVault, _ before: [ItemSnapshot], sourceLocation: SourceLocation = #_sourceLocation
) throws {
    #expect(try snapshot(v.keychain) == before, sourceLocation: sourceLocation)
    #expect(try v.keychain.itemCount() == before.count, sourceLocation: sourceLocation)
    #expect(throws: Never.self, sourceLocation: sourceLocation) { try v.keychain.verifyIntegrity() }
    #expect(throws: Never.self, sourceLocation: sourceLocation) { try v.openUnlocked().verifyIntegrity() }
}

@Suite("Names and sizes")
struct InputTests {
    static let oddNames = [
        "ünïcödé 🔑 ключ 鍵", "a/b/c", "/", "..", ".", "../../etc/passwd", "100%", "%2F%00", "a\u{0}b", "a\u{0}",
        "\u{0}", " leading and trailing ", "tab\tnew\nline\r", "\u{202E}rtl", "quote\"back\\slash", "x",
        String(repeating: "long/", count: 2000),
    ]

    @Test("any string is a name: unicode, '/', '%', NUL inside, control characters; each reads back exactly")
    func oddNamesRoundTrip() throws {
        try withVault { v throws in
            let kc = v.keychain
            for (i, name) in Self.oddNames.enumerated() {
                try kc.add(.genericPassword, genp(name, name, [A.label: s(name)]), data: bytes("secret \(i)"))
                try kc.add(
                    .internetPassword, [A.server: s(name), A.account: s(name), A.path: s(name)],
                    data: bytes("inet \(i)"))
            }
            #expect(try kc.itemCount() == 2 * Self.oddNames.count)
            for (i, name) in Self.oddNames.enumerated() {
                let item = try kc.find(Query(.genericPassword, genp(name, name), returnData: true))
                #expect(item.data == bytes("secret \(i)"), "genp \(i)")
                #expect(item.string(A.service).map { Array($0.utf8) } == Array(name.utf8))
                #expect(item.string(A.account).map { Array($0.utf8) } == Array(name.utf8))
                #expect(item.string(A.label).map { Array($0.utf8) } == Array(name.utf8))
                // By service alone (secondary index) and by label (scan) too.
                let byService = try kc.copyMatching(Query(.genericPassword, genp(name), matchLimit: .all))
                #expect(byService.map(\.id) == [item.id], "service \(i)")
                let byLabel = try kc.copyMatching(Query(.genericPassword, [A.label: s(name)], matchLimit: .all))
                #expect(byLabel.map(\.id) == [item.id], "label \(i)")
                let inet = try kc.find(
                    Query(
                        .internetPassword, [A.server: s(name), A.account: s(name), A.path: s(name)], returnData: true))
                #expect(inet.data == bytes("inet \(i)"))
            }
            // Messages name the item on one line, whatever its name holds.
            for name in Self.oddNames {
                let e = expectError(.duplicateItem) { try kc.add(.genericPassword, genp(name, name), data: []) }
                #expect(
                    e.map { !$0.message.contains("\n") && !$0.message.contains("\r") && !$0.message.contains("\u{0}") }
                        ?? false,
                    "one-line message for \(Array(name.utf8).prefix(20))")
            }
            // NUL does not truncate: "a\0b", "a\0", "\0" are not "a" or "".
            expectError(.itemNotFound) { try kc.find(Query(.genericPassword, genp("a", "a"))) }
            expectError(.itemNotFound) { try kc.find(Query(.genericPassword, genp("", ""))) }
            try v.openUnlocked().verifyIntegrity()
        }
    }

    @Test("canonically equivalent but different strings (NFC/NFD) are different names, on every query path")
    func normalizationIsNotApplied() throws {
        let nfc = "caf\u{E9}", nfd = "cafe\u{301}"
        #expect(Array(nfc.utf8) != Array(nfd.utf8))
        try withVault { v throws in
            let kc = v.keychain
            try kc.add(.genericPassword, genp("nfc", nfc), data: bytes("nfc"))
            try kc.add(.genericPassword, genp("nfd", nfd), data: bytes("nfd"))
            // Primary-index path: exact bytes.
            expectError(.itemNotFound) { try kc.find(Query(.genericPassword, genp("nfc", nfd))) }
            // Scan path (account only): must agree with the index path and match bytes exactly.
            let byAccount = try kc.copyMatching(
                Query(.genericPassword, [A.account: s(nfc)], matchLimit: .all, returnData: true))
            #expect(
                byAccount.compactMap(\.data) == [bytes("nfc")], "a query for the NFC account also returned the NFD item"
            )
            // Same for update and delete: they must not touch the NFD item.
            expectError(.itemNotFound) { try kc.delete(Query(.genericPassword, [A.account: s("no such account")])) }
            #expect(
                try kc.update(Query(.genericPassword, [A.account: s(nfc)]), attributes: [A.label: s("touched")]) == 1)
            #expect(try kc.delete(Query(.genericPassword, [A.account: s(nfc)])) == 1)
            let nfdItem = try kc.find(Query(.genericPassword, genp("nfd", nfd), returnData: true))
            #expect(nfdItem.data == bytes("nfd"))
            #expect(nfdItem.string(A.label) == nil, "updating the NFC account relabelled the NFD item")
        }
    }

    @Test("the empty account, empty service and empty data are values like any other")
    func emptyValues() throws {
        try withVault { v throws in
            let kc = v.keychain
            try kc.add(.genericPassword, genp("", ""), data: [])
            try kc.add(.genericPassword, genp("svc", ""), data: [0, 0, 0])
            #expect(try kc.find(Query(.genericPassword, genp("", ""), returnData: true)).data == [])
            #expect(try secret(kc, "svc", "") == [0, 0, 0])
            let binary = (0...255).map { UInt8($0) }
            try kc.add(.genericPassword, genp("bin", "all bytes"), data: binary)
            #expect(try secret(kc, "bin", "all bytes") == binary)
        }
    }

    @Test("a 64 KiB label is accepted; 64 KiB + 1 is errSecDataTooLarge and changes nothing")
    func attributeSizeLimit() throws {
        try withVault { v throws in
            let kc = v.keychain
            let max = String(repeating: "L", count: Keychain.maxAttributeSize)
            #expect(Keychain.maxAttributeSize == 65536)
            try kc.add(.genericPassword, genp("svc", "max", [A.label: s(max)]), data: bytes("m"))
            #expect(try kc.find(Query(.genericPassword, genp("svc", "max"))).string(A.label) == max)
            let before = try snapshot(kc)

            expectError(.dataTooLarge, containing: ["label", "65537"]) {
                try kc.add(.genericPassword, genp("svc", "over", [A.label: s(max + "L")]), data: [])
            }
            try expectUnchanged(v, before)
            // Multi-byte characters count in bytes: 21846 × 3 bytes = 65538.
            expectError(.dataTooLarge) {
                try kc.add(
                    .genericPassword, genp("svc", "over", [A.label: s(String(repeating: "€", count: 21846))]), data: [])
            }
            expectError(.dataTooLarge) {
                try kc.add(.genericPassword, genp(max + "x", "over"), data: [])
            }
            expectError(.dataTooLarge) {
                try kc.add(
                    .genericPassword,
                    genp("svc", "over", [.named("generic"): .data([UInt8](repeating: 1, count: 65537))]), data: [])
            }
            expectError(.dataTooLarge) {
                try kc.update(Query(.genericPassword, genp("svc", "max")), attributes: [A.label: s(max + "L")])
            }
            expectError(.dataTooLarge) {
                try kc.update(Query(.genericPassword, genp("svc", "max")), attributes: [A.account: s(max + "L")])
            }
            try expectUnchanged(v, before)
        }
    }

    @Test("a 1 MiB secret is accepted; 1 MiB + 1 is errSecDataTooLarge naming the limit, and changes nothing")
    func dataSizeLimit() throws {
        try withVault { v throws in
            let kc = v.keychain
            #expect(Keychain.maxDataSize == 1_048_576)
            var big = [UInt8](repeating: 0, count: Keychain.maxDataSize)
            for i in big.indices { big[i] = UInt8(truncatingIfNeeded: i &* 31 &+ 7) }
            try kc.add(.genericPassword, genp("svc", "big"), data: big)
            #expect(try secret(kc, "svc", "big") == big)
            try kc.add(.genericPassword, genp("svc", "small"), data: bytes("small"))
            let before = try snapshot(kc)

            expectError(.dataTooLarge, containing: ["1048576"]) {
                try kc.add(.genericPassword, genp("svc", "too big"), data: big + [1])
            }
            try expectUnchanged(v, before)
            expectError(.dataTooLarge, containing: ["1048576"]) {
                try kc.update(Query(.genericPassword, genp("svc", "small")), attributes: [:], data: big + [1])
            }
            expectError(.dataTooLarge, containing: ["1048576"]) {
                try kc.update(Query(.genericPassword, genp("svc")), attributes: [A.label: s("x")], data: big + [1])
            }
            try expectUnchanged(v, before)
            // The secret message never contains the secret.
            let e = expectError(.dataTooLarge) {
                try kc.add(.genericPassword, genp("svc", "x"), data: bytes("SECRETMARK") + big)
            }
            #expect(e.map { !$0.message.contains("SECRETMARK") } ?? false)

            // Replacing with exactly 1 MiB works.
            try kc.update(Query(.genericPassword, genp("svc", "small")), attributes: [:], data: big)
            #expect(try secret(kc, "svc", "small") == big)
        }
    }

    @Test("a refused call in the middle of others changes nothing (duplicate, wrong attribute, entitlement)")
    func failuresLeaveVaultIntact() throws {
        try withVault { v throws in
            let kc = v.keychain
            try kc.add(.genericPassword, genp("svc", "a"), data: bytes("a"))
            try kc.add(.internetPassword, [A.server: s("host"), A.account: s("a")], data: bytes("i"))
            let before = try snapshot(kc)
            expectError(.duplicateItem) { try kc.add(.genericPassword, genp("svc", "a"), data: bytes("other")) }
            expectError(.noSuchAttr) { try kc.add(.genericPassword, genp("svc", "b", [A.server: s("h")]), data: []) }
            expectError(.missingEntitlement) {
                try kc.add(.genericPassword, genp("svc", "b", [A.accessGroup: s("x")]), data: [])
            }
            expectError(.param) { try kc.delete(Query(.genericPassword, matchLimit: .all)) }
            expectError(.readOnlyAttr) {
                try kc.update(Query(.genericPassword, genp("svc")), attributes: [A.creationDate: .date(Date())])
            }
            try expectUnchanged(v, before)
        }
    }
}
