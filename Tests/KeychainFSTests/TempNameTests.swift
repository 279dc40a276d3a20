import Foundation
import Keychain
@testable import KeychainFS
import PropertyBased
import Testing

/// `PathCodec.isTempName`: rsync's temp file for a name, and nothing else. A key attribute set on
/// such a file is left to rsync's rename (XattrNamespaces.swift), so a name it wrongly took for a
/// temp file would keep a move from happening. And docs/paths.md rule 10: a name `.N.XXXXXX` is
/// rsync's temp file for N whatever N's fields (`.alice;accessGroup=team.U37dgM` is not group
/// `team.U37dgM`), and no other name has that shape.
@Suite("PathCodec: rsync's temp names")
struct TempNameTests {
    @Test("`.f.XXXXXX` (six letters or digits) is rsync's temp file for f, byte for byte")
    func tempNames() {
        #expect(PathCodec.isTempName(".one.3KDcn8", for: "one"))
        #expect(PathCodec.isTempName(".a b.hPFhin", for: "a b"))
        #expect(PathCodec.isTempName(".é.000000", for: "é"))
        // A name's own leading dot is not doubled (rsync's get_tmpname).
        #expect(PathCodec.isTempName(".env.3KDcn8", for: ".env"))
        #expect(PathCodec.isTempName("..env.3KDcn8", for: "..env"))
        #expect(PathCodec.isTempName(".env;accessGroup=team.3KDcn8", for: ".env;accessGroup=team"))
    }

    @Test(
        "other names are not: another name, five or seven characters, punctuation, no leading dot, NFD for NFC",
        arguments: [
            (".one.3KDcn8", "two"), (".one.3KDcn", "one"), (".one.3KDcn8x", "one"), (".one.3KD-n8", "one"),
            ("one.3KDcn8.", "one"), ("x.one.3KDcn8", "one"), (".one_3KDcn8", "one"), (".e\u{301}.000000", "\u{e9}"),
            ("..000000", ""), (".one.3KDcn8", ".one.3KDcn8"), ("..env.3KDcn8", ".env"), (".env.3KDcn8", "..env"),
            ("..000000", "."),
        ])
    func notTempNames(_ name: String, _ leaf: String) {
        #expect(!PathCodec.isTempName(name, for: leaf))
    }

    static let classes: [ItemClass] = [.genericPassword, .internetPassword, .certificate, .key]

    /// The attributes a name in the item's directory is parsed with (those its directory gives).
    static func directoryAttributes(_ item: PathItem) -> Attributes {
        let all = item.attributes
        var out = Attributes()
        for a in [Schema.service, Schema.server, Schema.protocolAttribute, Schema.port] where all[a] != nil {
            out[a] = all[a]
        }
        return out
    }

    static func mainAttribute(_ c: ItemClass) -> Attribute {
        c == .genericPassword || c == .internetPassword ? Schema.account : Schema.label
    }

    /// `parsed` holds exactly `expected`, strings compared as bytes.
    static func expectSame(
        _ parsed: Attributes?, _ expected: Attributes, _ what: String, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        guard let parsed else {
            Issue.record("\(what) does not parse", sourceLocation: sourceLocation)
            return
        }
        #expect(Set(parsed.keys) == Set(expected.keys), "\(what): keys", sourceLocation: sourceLocation)
        for (attribute, value) in expected {
            if case .string(let s) = value {
                #expect(
                    stringBytes(parsed, attribute) == Array(s.utf8), "\(what): \(attribute)",
                    sourceLocation: sourceLocation)
            } else {
                #expect(parsed[attribute] == value, "\(what): \(attribute)", sourceLocation: sourceLocation)
            }
        }
    }

    @Test("5,000 random names N of every class and field: rsync's temp name for N is a temp item that maps back to N")
    func randomTempNames() async {
        let input = Generator { rng in
            var item = PathItem.random(Self.classes.randomElement(using: &rng)!, &rng)
            if Int.random(in: 0..<4, using: &rng) == 0 {
                item.account = "." + item.account; item.label = "." + item.label
            }
            return (item, Names.tempSuffix(&rng))
        }
        await propertyCheck(count: 5000, input: input) { pair in
            let (item, suffix) = pair
            let c = item.itemClass, main = Self.mainAttribute(c), directory = Self.directoryAttributes(item)
            let name = PathCodec.leaf(of: c, item.attributes)
            // rsync's get_tmpname: `.` + N + `.XXXXXX`, N's own leading dot not doubled. It cuts
            // an N over 246 bytes and drops a trailing `.` (knownCutNames), nor reaches an item
            // for `.#…` (emacs's, kept in memory: rule 6).
            let inner =
                name.utf8.first == UInt8(ascii: ".") ? String(decoding: name.utf8.dropFirst(), as: UTF8.self) : name
            guard inner.utf8.count <= 246, inner.utf8.last != UInt8(ascii: "."), !PathCodec.isLongSpelling(name)
            else { return }
            let temp = "." + inner + "." + suffix
            guard !PathCodec.isScratchName(temp) else { return }
            // Rule 10: `..R` is not restored where `.R` is read for R (`..4913`: the one temp
            // item is `.4913`'s, named `.4913.XXXXXX`).
            let innerRest = String(decoding: inner.utf8.dropFirst(), as: UTF8.self)
            guard inner.utf8.first != UInt8(ascii: ".") || PathCodec.tempReading(innerRest) == innerRest else {
                return
            }
            let what = "\"\(scalars(temp))\" (\(item))"
            #expect(PathCodec.isTempName(temp, for: name), "\(what) is the temp name of N")
            let parsed = PathCodec.parseLeaf(c, temp, in: directory)
            // The temp item is that of the name inside, R: N itself, or N without its leading dot;
            // N when R is no item's name (`.4913`'s R, `4913`, is vim's) and N is no temp item's
            // (rule 10: a temp item left over, with fields, is not restored).
            let eitherPlain = PathCodec.rsyncTempParts(inner) == nil && PathCodec.rsyncTempParts(name) == nil
            let reading =
                PathCodec.parseLeaf(c, inner, in: directory)
                ?? (eitherPlain ? PathCodec.parseLeaf(c, name, in: directory) : nil)
            var rest = reading
            rest?[main] = item.attributes[main]
            guard let rest, Self.same(rest, item.attributes) else {
                // Documented (rule 10): R names no item, or one with other fields.
                #expect(name.utf8.first == UInt8(ascii: "."), "\(what): R names another item")
                return
            }
            var expected = item.attributes
            expected[main] = .string("." + PathCodec.string(reading!, main) + "." + suffix)
            Self.expectSame(parsed, expected, what)
            guard let parsed else { return }
            // Spelled back byte for byte: the temp item's one name.
            #expect(Array(PathCodec.leaf(of: c, parsed).utf8) == Array(temp.utf8), "\(what) spelled back")
            // Its own account (label) given back, it is N again: what rsync's setxattr and rename do.
            var back = parsed
            back[main] = item.attributes[main]
            #expect(Array(PathCodec.leaf(of: c, back).utf8) == Array(name.utf8), "\(what) maps back")
            Self.expectSame(PathCodec.parseLeaf(c, name, in: directory), item.attributes, "N of \(what)")
        }
    }

    /// Equal attributes, strings compared as bytes.
    static func same(_ a: Attributes, _ b: Attributes) -> Bool {
        Set(a.keys) == Set(b.keys)
            && a.allSatisfy { key, value in
                if case .string(let s) = value { return stringBytes(b, key) == Array(s.utf8) }
                return b[key] == value
            }
    }

    @Test(
        "5,000 random items whose name is not of rsync's shape: spelled as without rule 10, parsed back to themselves")
    func otherNamesUntouched() async {
        let input = Generator { rng in
            var item = PathItem.random(Self.classes.randomElement(using: &rng)!, &rng)
            if Int.random(in: 0..<4, using: &rng) == 0 {
                // A hidden name whose last field ends like rsync's suffix: the one case rule 10 escapes.
                item.account = "." + item.account; item.label = "." + item.label
                item.accessGroup += "." + Names.tempSuffix(&rng); item.synchronizable = false
            }
            return item
        }
        await propertyCheck(count: 5000, input: input) { item in
            let c = item.itemClass, attributes = item.attributes
            let main = PathCodec.string(attributes, Self.mainAttribute(c))
            guard PathCodec.rsyncTempParts(main) == nil else { return }
            var withoutMain = attributes
            withoutMain[Self.mainAttribute(c)] = .string("x")
            let fields = String(decoding: PathCodec.leaf(of: c, withoutMain).utf8.dropFirst(), as: UTF8.self)
            let plain = PathCodec.component(PathCodec.escape(main, extra: PathCodec.leafExtra) + fields)
            let name = PathCodec.leaf(of: c, attributes)
            guard !PathCodec.isLongSpelling(name) else { return }
            if PathCodec.rsyncTempParts(plain) == nil {
                #expect(Array(name.utf8) == Array(plain.utf8), "\(item) is spelled \(scalars(name))")
            } else {
                // The one spelling rule 10 changes: a leading `.` that would make rsync's shape.
                #expect(Array(name.utf8) == Array("%2E".utf8) + Array(plain.utf8).dropFirst(), "\(item)")
            }
            Self.expectSame(
                PathCodec.parseLeaf(c, name, in: Self.directoryAttributes(item)), attributes, "\(scalars(name))")
        }
    }

    static func genp(_ account: String, group: String = Caller.defaultAccessGroup, sync: Bool = false) -> Attributes {
        [
            Schema.service: .string("svc"), Schema.account: .string(account), Schema.accessGroup: .string(group),
            Schema.synchronizable: .bool(sync),
        ]
    }

    @Test(
        "known names: rsync's temp names with fields; values ending in .ABC123 read as themselves",
        arguments: [
            (".alice;accessGroup=team.U37dgM", genp(".alice.U37dgM", group: "team")),
            (".alice;synchronizable=true.U37dgM", genp(".alice.U37dgM", sync: true)),
            (".alice;accessGroup=t;synchronizable=true.000000", genp(".alice.000000", group: "t", sync: true)),
            ("alice;accessGroup=team.ABC123", genp("alice", group: "team.ABC123")),
            ("%2Eenv;accessGroup=team.ABC123", genp(".env", group: "team.ABC123")),
            (".%2Eenv;accessGroup=team.ABC123.xyz789", genp("..env.xyz789", group: "team.ABC123")),
            (".%;accessGroup=team.U37dgM", genp("..U37dgM", group: "team")), (".one.3KDcn8", genp(".one.3KDcn8")),
            (".%.abc123", genp("..abc123")), (".env.abc123", genp(".env.abc123")),
            (".env;accessGroup=team.ABC12", genp(".env", group: "team.ABC12")),
            // rsync's temp file for `env;accessGroup=team`, never `.env` in a group `team.ABC123`.
            (".env;accessGroup=team.ABC123", genp(".env.ABC123", group: "team")),
            (".a%7E.abc123", genp(".a~.abc123")), ("a.abc123", genp("a.abc123")),
            // `.4913`'s temp file (vim's `4913` is no item): the account `..4913.XXXXXX`.
            (".4913.abc123", genp("..4913.abc123")), (".4913;accessGroup=t.abc123", genp(".4913.abc123", group: "t")),
            (".%34913.abc123", genp(".4913.abc123")), ("..#x.abc123", genp("...#x.abc123")),
            // CI's property run (seed MwyW+4g4…): account `...abc123` with a field is the temp file
            // of account `.` with that field, `.;…`, as rsync names it (its leading `.` not doubled).
            (".;accessGroup=t.abc123", genp("...abc123", group: "t")),
        ])
    func knownNames(_ name: String, _ attributes: Attributes) {
        let parsed = PathCodec.parseLeaf(.genericPassword, name, in: [Schema.service: .string("svc")])
        Self.expectSame(parsed, attributes, name)
        #expect(PathCodec.leaf(of: .genericPassword, attributes) == name)
    }

    @Test(
        "names of rsync's shape whose inner name is no item's, or not canonical, name nothing",
        arguments: [
            "..abc123", ".%ZZ;accessGroup=t.abc123", ".a;bogus=1.abc123", ".a;synchronizable=false.abc123",
            ".%2Ea.abc123", ".a~.abc123", "..4913.abc123", "...abc123",
        ])
    func notNames(_ name: String) {
        #expect(PathCodec.parseLeaf(.genericPassword, name, in: [:]) == nil, "\(name)")
    }

    @Test("/inet: rsync's suffix after each field that may end a name")
    func internetFields() {
        let dir: Attributes = [
            Schema.server: .string("example.com"), Schema.protocolAttribute: .string("htps"), Schema.port: .number(0),
        ]
        for (field, value) in [
            ("path", "%2Flogin"), ("securityDomain", "realm.ABC123"), ("authenticationType", "form"),
            ("protocol", "zzzz"), ("accessGroup", "team"), ("synchronizable", "true"),
        ] {
            let n = "bob;\(field)=\(value)"
            guard let real = PathCodec.parseLeaf(.internetPassword, n, in: dir) else {
                Issue.record("\(n) does not parse")
                continue
            }
            var expected = real
            expected[Schema.account] = .string(".bob.Zz9Zz9")
            Self.expectSame(PathCodec.parseLeaf(.internetPassword, "." + n + ".Zz9Zz9", in: dir), expected, n)
        }
    }

    @Test("rsync cuts a long name in its temp name (246 bytes kept, no UTF-8 sequence split) and drops a trailing dot")
    func knownCutNames() {
        let a250 = String(repeating: "a", count: 250), a246 = String(repeating: "a", count: 246)
        #expect(PathCodec.isTempName("." + a246 + ".Ab12cd", for: a250))
        #expect(PathCodec.isTempName("." + a246 + ".Ab12cd", for: "." + a250))
        #expect(PathCodec.isTempName("." + a246 + ".Ab12cd", for: String(repeating: "a", count: 247)))
        #expect(PathCodec.isTempName("." + a246 + ".Ab12cd", for: a246 + "b"))
        #expect(!PathCodec.isTempName("." + a246 + ".Ab12cd", for: "b" + a246))
        // Cut, the temp name is its own prefix: not its own temp file (its comment is its own).
        #expect(!PathCodec.isTempName("." + a246 + ".Ab12cd", for: "." + a246 + ".Ab12cd"))
        #expect(!PathCodec.isTempName("." + String(repeating: "a", count: 245) + ".Ab12cd", for: a246 + "b"))
        // The cut falls in `é` (C3 A9): every non-ASCII byte before it goes too.
        let e = String(repeating: "a", count: 243) + "\u{E9}\u{E9}x"
        #expect(PathCodec.isTempName("." + String(repeating: "a", count: 243) + ".Ab12cd", for: e))
        #expect(PathCodec.isTempName(".a.Ab12cd", for: "a."))
        #expect(PathCodec.isTempName(".a.Ab12cd", for: ".a."))
        #expect(!PathCodec.isTempName(".a..Ab12cd", for: "a."))
        // The temp item of the cut name is an item that spells back.
        let temp = "." + a246 + ".Ab12cd"
        let parsed = PathCodec.parseLeaf(.genericPassword, temp, in: [Schema.service: .string("svc")])
        Self.expectSame(parsed, Self.genp("." + a246 + ".Ab12cd"), "the cut temp name")
        #expect(parsed.map { PathCodec.leaf(of: .genericPassword, $0) } == temp)
    }
}
