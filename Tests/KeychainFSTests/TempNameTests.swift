import Foundation
import Keychain
@testable import KeychainFS
import Testing

/// `PathCodec.isTempName`: rsync's temp file for a name, and nothing else. A key attribute set on
/// such a file is left to rsync's rename (XattrNamespaces.swift), so a name it wrongly took for a
/// temp file would keep a move from happening.
@Suite("PathCodec: rsync's temp names")
struct TempNameTests {
    @Test("`.f.XXXXXX` (six letters or digits) is rsync's temp file for f, byte for byte")
    func tempNames() {
        #expect(PathCodec.isTempName(".one.3KDcn8", for: "one"))
        #expect(PathCodec.isTempName(".a b.hPFhin", for: "a b"))
        #expect(PathCodec.isTempName(".é.000000", for: "é"))
    }

    @Test(
        "other names are not: another name, five or seven characters, punctuation, no leading dot, NFD for NFC",
        arguments: [
            (".one.3KDcn8", "two"), (".one.3KDcn", "one"), (".one.3KDcn8x", "one"), (".one.3KD-n8", "one"),
            ("one.3KDcn8.", "one"), ("x.one.3KDcn8", "one"), (".one_3KDcn8", "one"), (".e\u{301}.000000", "\u{e9}"),
            ("..000000", ""), (".one.3KDcn8", ".one.3KDcn8"),
        ])
    func notTempNames(_ name: String, _ leaf: String) {
        #expect(!PathCodec.isTempName(name, for: leaf))
    }
}
