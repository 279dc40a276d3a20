import Foundation
import Keychain
@testable import KeychainFS
import Testing

// Inputs the property tests once found in PathCodec, pinned: the codec used to split, search
// and compare names as Swift `Character`s (grapheme clusters under canonical equivalence), so
// a scalar that joins an ASCII separator into one grapheme, or one canonically equal to it,
// changed what a name meant. Names are bytes now (docs/paths.md, rule 2); these stay as
// regression tests.

@Suite("PathCodec: names are bytes (graphemes and canonical equivalents that once broke it)")
struct PathCodecKnownIssueTests {
    func genp(_ service: String, _ account: String, group: String = Caller.defaultAccessGroup) -> Attributes {
        [
            Schema.service: .string(service), Schema.account: .string(account),
            Schema.accessGroup: .string(group), Schema.synchronizable: .bool(false),
        ]
    }

    func expectLeafRoundTrip(
        _ attributes: Attributes, _ itemClass: ItemClass = .genericPassword,
        in directory: Attributes = [:]
    ) {
        let leaf = PathCodec.leaf(of: itemClass, attributes)
        let parsed = PathCodec.parseLeaf(itemClass, leaf, in: directory)
        #expect(parsed != nil, "leaf \"\(scalars(leaf))\" does not parse")
        for attribute in [Schema.account, Schema.label, Schema.accessGroup] where attributes[attribute] != nil {
            #expect(
                stringBytes(parsed, attribute) == stringBytes(attributes, attribute),
                "\(attribute) of \"\(scalars(leaf))\"")
        }
    }

    @Test("an account holding U+037E (GREEK QUESTION MARK, canonically `;`) has a path that does not resolve")
    func greekQuestionMarkInAccount() {
        // leaf "a\u{37E}b" is split at U+037E as if it were ";", giving the field "b" with no
        // "=": parseLeaf returns nil, so /genp/svc/a;b (with U+037E) is ENOENT for its own item.
        expectLeafRoundTrip(genp("svc", "a\u{37E}b"))
    }

    @Test("U+037E makes a non-canonical name resolve to another item: x<U+037E>accessGroup=team is x in group team")
    func greekQuestionMarkAliasesAnotherItem() {
        // The item (account "x", group "team") is spelled "x;accessGroup=team"; the name with
        // U+037E in place of ";" is the spelling of account "x\u{37E}accessGroup=team" in the
        // default group. parseLeaf returns the first (its final `leaf(...) == name` check uses
        // String ==, canonical equivalence), so rule 1 (one path per item, only the canonical
        // spelling resolves) breaks.
        let name = "x\u{37E}accessGroup=team"
        let parsed = PathCodec.parseLeaf(.genericPassword, name, in: [:])
        if let parsed {
            let again = PathCodec.leaf(of: .genericPassword, parsed)
            #expect(
                Array(again.utf8) == Array(name.utf8),
                "\"\(scalars(name))\" resolves to the item spelled \"\(scalars(again))\" (account \(stringBytes(parsed, Schema.account).map { scalars($0.utf8Text) } ?? "?"))"
            )
        }
        #expect(stringBytes(parsed, Schema.account) == Array(name.utf8), "the name does not name its own item")
    }

    @Test("an access group starting with a combining mark: ;accessGroup=<U+0301>team does not parse")
    func combiningMarkAfterEquals() {
        // "=" + U+0301 is one Character, so part.firstIndex(of: "=") finds no "=".
        expectLeafRoundTrip(genp("svc", "x", group: "\u{301}team"))
    }

    @Test("an inet server starting with a combining mark after the protocol: https:<U+0301>x does not parse")
    func combiningMarkAfterProtocolColon() {
        // "https:" + U+0301 + "x": ":" + U+0301 is one Character, so the directory name is not
        // split into protocol and server; parseDirectory returns nil and the item is unreachable.
        let attributes: Attributes = [
            Schema.server: .string("\u{301}x"), Schema.protocolAttribute: .string("htps"),
            Schema.port: .number(0),
        ]
        let directory = PathCodec.directory(of: .internetPassword, attributes)
        #expect(directory.map { Array($0.utf8) } == Array("https:\u{301}x".utf8))
        let parsed = directory.flatMap { PathCodec.parseDirectory(.internetPassword, $0) }
        #expect(parsed != nil, "directory \"\(scalars(directory ?? ""))\" does not parse")
        #expect(stringBytes(parsed, Schema.server) == Array("\u{301}x".utf8))
    }

    @Test("a server holding \":\" + a combining mark is not bracketed as docs/paths.md rule 4 says")
    func colonWithCombiningMarkInServer() {
        // Rule 4: a server containing ":" is bracketed with its colons literal. server.contains(":")
        // is a Character search, so "a:<U+0301>b" is spelled a%3A<U+0301>b instead of [a:<U+0301>b].
        // (It still round-trips; the spelling is just not the documented one.)
        let attributes: Attributes = [Schema.server: .string("a:\u{301}b"), Schema.port: .number(0)]
        let directory = PathCodec.directory(of: .internetPassword, attributes) ?? ""
        #expect(Array(directory.utf8) == Array("[a:\u{301}b]".utf8), "spelled \"\(scalars(directory))\"")
    }
}
