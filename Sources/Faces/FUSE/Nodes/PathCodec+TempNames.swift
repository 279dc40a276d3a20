import FoundationEssentials
import Keychain

// rsync's temp files (docs/paths.md, rule 10). `rsync -aX` writes each file N to `.N.XXXXXX`
// beside it (a leading `.` unless N has one, N, `.` and six letters or digits: mkstemp's), sets
// N's xattrs on it, then renames it to N. N may end with a `;field=value`
// (`alice;accessGroup=team`), whose value the suffix would run into
// (`.alice;accessGroup=team.U37dgM` read plainly is group `team.U37dgM`), so a name `.R.XXXXXX`
// is read as the temp file of R (or of `.R`) before anything else, whatever R's fields: the item
// whose account (label) is `.` + R's account (label) + `.XXXXXX`, with R's other attributes. Such
// an item is spelled that way back, so one item has one name; and no other name has that shape
// (a plain spelling that would have it escapes its leading `.` as `%2E`).
extension PathCodec {
    /// rsync's temp name shape: a leading `.`, then N, `.` and six ASCII letters or digits. The
    /// inner name N and the suffix `.XXXXXX`, or nil.
    static func rsyncTempParts(_ name: String) -> (inner: String, tail: String)? {
        // Most names do not begin with `.`: answered without copying their bytes (a listing
        // spells thousands).
        guard name.utf8.first == UInt8(ascii: ".") else { return nil }
        let b = Array(name.utf8)
        guard b.count >= 8, b[b.count - 7] == UInt8(ascii: ".") else { return nil }
        guard b.suffix(6).allSatisfy(isTempSuffixByte) else { return nil }
        return (String(decoding: b[1..<(b.count - 7)], as: UTF8.self), String(decoding: b.suffix(7), as: UTF8.self))
    }

    static func isTempSuffixByte(_ b: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(b) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(b)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b)
    }

    /// Whether `name` is rsync's temp file for another name `leaf`: `rsyncTempPrefix(leaf)` + `.`
    /// + six letters or digits (mkstemp's `XXXXXX`). Compared as bytes. (A temp name of 254
    /// bytes is its own cut: never its own temp file.)
    public static func isTempName(_ name: String, for leaf: String) -> Bool {
        let prefix = rsyncTempPrefix(Array(leaf.utf8))
        guard prefix.count > 1, !same(name, leaf), let (inner, _) = rsyncTempParts(name) else { return false }
        return inner.utf8.elementsEqual(prefix.dropFirst())
    }

    /// What rsync (3.x's `get_tmpname`) puts before `.XXXXXX` in the temp name of a file named
    /// `leaf`: `.`, then the leaf without its own leading `.` (not doubled), cut to 246 bytes so
    /// that the temp name fits in 255 (and, when the cut fell inside non-ASCII bytes, every
    /// non-ASCII byte before it dropped too, so no UTF-8 sequence is split), then one trailing
    /// `.` dropped (`a.`'s temp name is `.a.XXXXXX`).
    static func rsyncTempPrefix(_ leaf: [UInt8]) -> [UInt8] {
        var rest = leaf.first == UInt8(ascii: ".") ? Array(leaf.dropFirst()) : leaf
        if rest.count > rsyncTempKept {
            let firstCut = rest[rsyncTempKept]
            rest = Array(rest.prefix(rsyncTempKept))
            if firstCut & 0x80 != 0 { while let last = rest.last, last & 0x80 != 0 { rest.removeLast() } }
        }
        var prefix = [UInt8(ascii: ".")] + rest
        if prefix.last == UInt8(ascii: ".") { prefix.removeLast() }
        return prefix
    }

    /// The bytes of a name rsync keeps in its temp name: 255, less its leading `.` and `.XXXXXX`,
    /// less one (its buffer counts the NUL).
    static let rsyncTempKept = maxComponentBytes - 1 - 7 - 1

    /// The name whose temp file `.` + `inner` + `.XXXXXX` is read as (parseTempLeaf): `inner`
    /// itself, unless it is a name never given to an item (a scratch name, `.`, `…~`: `component`
    /// escapes it; an empty account or label, spelled `%`) while `.` + `inner` is one. rsync
    /// dropped that leading `.` (`.4913`'s temp file is `.4913.XXXXXX`).
    static func tempReading(_ inner: String) -> String {
        guard rsyncTempParts(inner) == nil,
            inner.utf8.first == UInt8(ascii: ";") || !component(inner).utf8.elementsEqual(inner.utf8)
        else { return inner }
        let dotted = "." + inner
        guard rsyncTempParts(dotted) == nil, component(dotted).utf8.elementsEqual(dotted.utf8) else { return inner }
        return dotted
    }

    /// The spelling of a leaf (before `fitted`) whose account or label is `main` and whose
    /// `;field=value` parts are `fields`. A `main` of rsync's temp shape `.M.XXXXXX` is spelled as
    /// rsync names the temp file of M's item: `.` + that item's name + `.XXXXXX` (unless that is
    /// emacs's `.#…`, a scratch name). Every other name is escaped as always, and its leading `.`
    /// escaped too when it would otherwise have rsync's temp shape (`.env;accessGroup=t.abc123`
    /// is `%2Eenv;accessGroup=t.abc123`): rsync's shape is rsync's temp files only.
    static func spell(_ main: String, fields: String) -> String {
        if let (inner, tail) = rsyncTempParts(main) {
            let spelled = spell(inner, fields: fields)
            // `.4913`'s temp item (account `..4913.XXXXXX`) is spelled as rsync names it,
            // `.4913.XXXXXX`: its inner name `4913` is no item's (tempReading).
            let bytes = Array(spelled.utf8)
            let own = String(decoding: bytes.dropFirst(), as: UTF8.self)
            let temp = (bytes.first == UInt8(ascii: ".") && tempReading(own) != own ? "" : ".") + spelled + tail
            if !isScratchName(temp) { return temp }
        }
        let plain = component(escape(main, extra: leafExtra) + fields)
        guard rsyncTempParts(plain) != nil else { return plain }
        return "%2E" + String(decoding: Array(plain.utf8).dropFirst(), as: UTF8.self)
    }

    /// The key attributes of rsync's temp file `name` = `.` + `inner` + `tail`: those of the item
    /// `inner` names, its account (label) `.` + that one's + `tail`. Nil when `inner` names
    /// nothing or `name` is not the canonical spelling of that item.
    static func parseTempLeaf(
        _ itemClass: ItemClass, _ name: String, inner: String, tail: String, in directory: Attributes
    ) -> Attributes? {
        guard var attributes = parseLeaf(itemClass, tempReading(inner), in: directory) else { return nil }
        let main = mainAttribute(itemClass)
        attributes[main] = .string("." + string(attributes, main) + tail)
        guard same(leaf(of: itemClass, attributes), name) else { return nil }
        return attributes
    }
}
