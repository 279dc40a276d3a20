import Foundation
import Keychain
@testable import KeychainFS
import PropertyBased
import Testing

@Suite("PathCodec: properties of the path layout")
struct PathCodecTests {
    static let classes: [ItemClass] = [.genericPassword, .internetPassword, .certificate, .key, .identity]

    /// The attributes `parseLeaf` must give back for an item (the codec fills the defaults).
    func expectRoundTrip(_ item: PathItem, sourceLocation: SourceLocation = #_sourceLocation) {
        let attributes = item.attributes
        let leaf = PathCodec.leaf(of: item.itemClass, attributes)
        Spec.check(leaf, against: Spec.leaf(item), item, "leaf", sourceLocation: sourceLocation)
        var directoryAttributes: Attributes = [:]
        if let full = Spec.directory(item) {
            guard let directory = PathCodec.directory(of: item.itemClass, attributes) else {
                Issue.record("no directory for \(item)", sourceLocation: sourceLocation)
                return
            }
            Spec.check(directory, against: full, item, "directory", sourceLocation: sourceLocation)
            guard !PathCodec.isLongSpelling(directory) else { return }  // resolved by listing, not parsing
            guard let parsed = PathCodec.parseDirectory(item.itemClass, directory) else {
                Issue.record(
                    "directory \"\(scalars(directory))\" does not parse: \(item)", sourceLocation: sourceLocation)
                return
            }
            directoryAttributes = parsed
        } else {
            #expect(PathCodec.directory(of: item.itemClass, attributes) == nil, "\(item.itemClass) has a directory")
        }
        guard !PathCodec.isLongSpelling(leaf) else { return }
        guard let parsed = PathCodec.parseLeaf(item.itemClass, leaf, in: directoryAttributes) else {
            Issue.record("leaf \"\(scalars(leaf))\" does not parse: \(item)", sourceLocation: sourceLocation)
            return
        }
        for (attribute, value) in attributes {
            if case .string(let s) = value {
                #expect(
                    stringBytes(parsed, attribute) == Array(s.utf8),
                    "\(attribute) came back as \"\(stringBytes(parsed, attribute).map { scalars($0.utf8Text) } ?? "nil")\": \(item)",
                    sourceLocation: sourceLocation)
            } else {
                #expect(
                    parsed[attribute] == value,
                    "\(attribute) came back as \(String(describing: parsed[attribute])): \(item)",
                    sourceLocation: sourceLocation)
            }
        }
        #expect(
            Set(parsed.keys) == Set(attributes.keys),
            "parsed attributes \(parsed.keys.map(\.name).sorted()) for \(item)",
            sourceLocation: sourceLocation)
    }

    @Test("round trip: spelling → parse → the item's own attributes, byte-exact (every class, 3,000 items)")
    func roundTrip() async {
        await propertyCheck(count: 3000, input: PathItem.generator(Self.classes)) { item in
            expectRoundTrip(item)
        }
    }

    @Test("round trip of NFC/NFD twins: é and e+U+0301 are two items with two spellings")
    func canonicalTwins() async {
        await propertyCheck(count: 1000, input: PathItem.generator(Self.classes)) { item in
            var twin = item
            twin.account = Names.twin(item.account)
            twin.service = Names.twin(item.service)
            twin.label = Names.twin(item.label)
            twin.server = Names.twin(item.server)
            expectRoundTrip(twin)
            let a = PathCodec.leaf(of: item.itemClass, item.attributes),
                b = PathCodec.leaf(of: twin.itemClass, twin.attributes)
            let da = PathCodec.directory(of: item.itemClass, item.attributes),
                db = PathCodec.directory(of: twin.itemClass, twin.attributes)
            if item.key != twin.key {
                #expect(
                    Array(a.utf8) != Array(b.utf8) || da.map { Array($0.utf8) } != db.map { Array($0.utf8) },
                    "\(item) and its twin share a spelling")
            }
        }
    }

    @Test("known names: é / e+U+0301, Å / U+212B, Hangul, empty account, 300 bytes")
    func knownNames() {
        for name in [
            "caf\u{E9}", "cafe\u{301}", "\u{C5}", "\u{212B}", "A\u{30A}", "\u{AC00}", "\u{1100}\u{1161}", "",
            ".hidden", "x~", "50%", "a/b", "a;b", "[::1]", String(repeating: "\u{E9}", count: 150),
            String(repeating: "e\u{301}", count: 100), String(repeating: "%", count: 100),
        ] {
            for itemClass in Self.classes {
                var item = PathItem(itemClass: itemClass)
                item.account = name; item.service = name; item.label = name; item.server = name
                expectRoundTrip(item)
            }
        }
        #expect(PathCodec.leaf(of: .genericPassword, [Schema.account: .string("")]) == "%")
        #expect(
            PathCodec.directory(of: .internetPassword, [Schema.server: .string("ftp"), Schema.port: .number(21)])
                == "%66tp:21")
    }

    @Test("uniqueness: two different items of a class never share a spelling (20,000 items with near twins)")
    func uniqueness() async {
        let batch = Generator { rng -> [PathItem] in
            var items: [PathItem] = []
            for _ in 0..<200 {
                let item = PathItem.random(Self.classes.randomElement(using: &rng)!, &rng)
                items.append(item)
                // Near twins: the canonical twin, one scalar more, and a long name sharing 250 bytes.
                var twin = item
                twin.account = Names.twin(item.account); twin.label = Names.twin(item.label)
                twin.service = Names.twin(item.service); twin.server = Names.twin(item.server)
                items.append(twin)
                var longer = item
                longer.account += "x"; longer.label += "x"
                items.append(longer)
                var long = item
                let stem = String(repeating: "\u{E9}", count: 125)
                long.account = stem + item.account; long.label = stem + item.label; long.service = stem + item.service
                items.append(long)
            }
            return items
        }
        await propertyCheck(count: 100, input: batch) { items in
            var seen: [[UInt8]: PathItem] = [:]
            for item in items {
                let attributes = item.attributes
                var spelled = Array(item.itemClass.rawValue.utf8) + [0x2F]
                if let d = PathCodec.directory(of: item.itemClass, attributes) { spelled += Array(d.utf8) + [0x2F] }
                spelled += Array(PathCodec.leaf(of: item.itemClass, attributes).utf8)
                if let other = seen[spelled], other.key != item.key {
                    Issue.record("\(other) and \(item) share the spelling \"\(scalars(spelled.utf8Text))\"")
                }
                seen[spelled] = item
            }
        }
    }

    @Test("parsing accepts only canonical spellings, byte-exact (random names as the kernel would pass them)")
    func onlyCanonicalSpellingsParse() async {
        let input = Generator { rng -> (ItemClass, String) in
            let itemClass = Self.classes.randomElement(using: &rng)!
            var name = Names.string(Int.random(in: 0...20, using: &rng), &rng)
            if Bool.random(using: &rng) {
                name += ";accessGroup=" + Names.string(Int.random(in: 0...6, using: &rng), &rng)
            }
            if Int.random(in: 0..<4, using: &rng) == 0 { name += ";synchronizable=true" }
            return (itemClass, name)
        }
        await propertyCheck(count: 5000, input: input) { pair in
            let (itemClass, name) = pair
            if let parsed = PathCodec.parseLeaf(itemClass, name, in: [:]) {
                let again = PathCodec.leaf(of: itemClass, parsed)
                #expect(
                    Array(again.utf8) == Array(name.utf8),
                    "\"\(scalars(name))\" parsed although the item's spelling is \"\(scalars(again))\"")
            }
            if let parsed = PathCodec.parseDirectory(itemClass, name),
                let again = PathCodec.directory(of: itemClass, parsed)
            {
                #expect(
                    Array(again.utf8) == Array(name.utf8),
                    "directory \"\(scalars(name))\" parsed although its spelling is \"\(scalars(again))\"")
            }
        }
    }

    @Test("scratch names, `.` and `..` are never an item's spelling; other hidden names are")
    func scratchNamesAreNeverItems() async {
        await propertyCheck(count: 2000, input: PathItem.generator(Self.classes)) { item in
            for name in [PathCodec.leaf(of: item.itemClass, item.attributes)]
                + [PathCodec.directory(of: item.itemClass, item.attributes)].compactMap({ $0 })
            {
                let bytes = Array(name.utf8)
                #expect(!Spec.isScratch(bytes) && !PathCodec.isScratchName(name), "\(item) is spelled as scratch")
                #expect(bytes != [0x2E] && bytes != [0x2E, 0x2E], "\(item) is spelled as a dot entry")
            }
        }
    }

    @Test(
        "the scratch patterns are exactly the editors' ones",
        arguments: [
            (".f.swp", true), (".f.swx", true), (".f.swo", true), (".f.swpx", true), (".f.swpy", false), ("4913", true),
            ("f~", true), (".#f", true),
            ("#f#", true), (".env", false), (".npmrc", false), (".f.XXXXXX", false), ("~", false), ("#", false),
            ("##", false), (".swp", false), ("sedAbC123", false), ("f.swp", false), ("49134", false),
        ])
    func scratchPatterns(name: String, scratch: Bool) {
        #expect(PathCodec.isScratchName(name) == scratch)
        #expect(Spec.isScratch(Array(name.utf8)) == scratch)
    }
}

extension PathCodecTests {
    /// rsync's shape `.M.XXXXXX` with M made of the pieces rule 2 and rule 10 treat apart (`.`,
    /// `;`, `%`, `~`, `#`, vim's `4913`, nothing), nested up to three deep, on items with and without
    /// fields. CI's run with seed `MwyW+4g4…` found one (`...abc123` with a field) by chance.
    @Test("round trip of rsync-shaped names built from awkward pieces, nested, with and without fields (5,000)")
    func awkwardTempShapes() async {
        let pieces = [".", "..", ";", "%", "~", "#", "4913", "", "a", "%2E", ".#", "a.b"]
        let input = Generator { rng -> PathItem in
            var item = PathItem(
                itemClass: [.genericPassword, .internetPassword, .certificate].randomElement(using: &rng)!)
            item.service = "svc"; item.server = "example.com"; item.protocolCode = "htps"
            var main = (0..<Int.random(in: 0...3, using: &rng)).map { _ in pieces.randomElement(using: &rng)! }.joined()
            for _ in 0..<Int.random(in: 1...3, using: &rng) { main = "." + main + "." + Names.tempSuffix(&rng) }
            item.account = main; item.label = main
            if Bool.random(using: &rng) { item.accessGroup = "t" }
            if Int.random(in: 0..<4, using: &rng) == 0 { item.synchronizable = true }
            if Int.random(in: 0..<4, using: &rng) == 0 { item.authenticationType = "form" }
            return item
        }
        await propertyCheck(count: 5000, input: input) { item in expectRoundTrip(item) }
    }
}
