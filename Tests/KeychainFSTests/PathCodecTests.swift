import Foundation
import Keychain
@testable import KeychainFS
import PropertyBased
import Testing

// Property tests of the path layout (docs/paths.md) without a mount: every item's spelling
// parses back to its own attributes, byte for byte; no two items share a spelling; no spelling
// holds `/` or NUL or exceeds 255 bytes; over-long spellings take the documented long form.
// Strings are compared as UTF-8 bytes, never with Swift's `==` (canonical equivalence).

/// One random item's path-relevant attributes.
struct PathItem: CustomStringConvertible, Sendable {
    var itemClass: ItemClass
    var service = ""  // genp
    // inet
    var server = "", protocolCode = "", port: Int64 = 0, path = "", securityDomain = "", authenticationType = ""
    var account = ""  // genp, inet
    var label = ""  // cert, keys, idnt
    var accessGroup = Caller.defaultAccessGroup
    var synchronizable = false

    var attributes: Attributes {
        var a: Attributes = [Schema.accessGroup: .string(accessGroup), Schema.synchronizable: .bool(synchronizable)]
        switch itemClass {
        case .genericPassword:
            a[Schema.service] = .string(service)
            a[Schema.account] = .string(account)
        case .internetPassword:
            a[Schema.server] = .string(server)
            a[Schema.protocolAttribute] = .string(protocolCode)
            a[Schema.port] = .number(port)
            a[Schema.account] = .string(account)
            a[Schema.path] = .string(path)
            a[Schema.securityDomain] = .string(securityDomain)
            a[Schema.authenticationType] = .string(authenticationType)
        default:
            a[Schema.label] = .string(label)
        }
        return a
    }

    /// The strings the spelling is made of.
    var strings: [String] {
        switch itemClass {
        case .genericPassword: [service, account, accessGroup]
        case .internetPassword: [server, protocolCode, account, path, securityDomain, authenticationType, accessGroup]
        default: [label, accessGroup]
        }
    }

    /// Identity of the item as bytes: two items are the same iff their keys are equal.
    var key: [[UInt8]] {
        [
            Array(itemClass.rawValue.utf8), Array(String(itemClass == .internetPassword ? port : 0).utf8),
            [synchronizable ? 1 : 0],
        ]
            + strings.map { Array($0.utf8) }
    }

    var description: String {
        "\(itemClass) "
            + zip(["s0", "s1", "s2", "s3", "s4", "s5", "s6"], strings).map { "\($0)=\"\(scalars($1))\"" }
            .joined(separator: " ") + " port=\(port) sync=\(synchronizable)"
    }

    static func random(_ itemClass: ItemClass, _ rng: inout any SeededRandomNumberGenerator) -> PathItem {
        var item = PathItem(itemClass: itemClass)
        item.account = Names.name(&rng)
        item.label = Names.name(&rng)
        item.service = Names.name(&rng)
        item.server =
            Int.random(in: 0..<10, using: &rng) == 0
            ? InternetProtocol.table.randomElement(using: &rng)!.name  // the `%66tp:21` case
            : Names.name(&rng)
        switch Int.random(in: 0..<4, using: &rng) {
        case 0: item.protocolCode = ""
        case 1: item.protocolCode = Names.string(Int.random(in: 1...4, using: &rng), &rng)  // a code with no name
        default: item.protocolCode = InternetProtocol.table.randomElement(using: &rng)!.code
        }
        item.port = Bool.random(using: &rng) ? 0 : Int64.random(in: 1...65535, using: &rng)
        for keyPath in [\PathItem.path, \.securityDomain, \.authenticationType] where Bool.random(using: &rng) {
            item[keyPath: keyPath] = Names.name(&rng)
        }
        if Int.random(in: 0..<3, using: &rng) == 0 {
            let group = Names.name(&rng)
            item.accessGroup = group.isEmpty ? "team" : group
        }
        item.synchronizable = Int.random(in: 0..<4, using: &rng) == 0
        return item
    }

    static func generator(_ classes: [ItemClass], where keep: @escaping @Sendable (PathItem) -> Bool = { _ in true })
        -> Generator<PathItem, Shrink.None<PathItem>>
    {
        Generator { rng in
            while true {
                let item = random(classes.randomElement(using: &rng)!, &rng)
                if keep(item) { return item }
            }
        }
    }
}

/// The spelling docs/paths.md gives an item before the 255-byte rule: the oracle the codec's
/// own spelling is checked against.
enum Spec {
    static func escape(_ s: String, _ extra: Set<UInt8>) -> [UInt8] {
        let b = Array(s.utf8)
        if b.isEmpty { return Array("%".utf8) }
        var out: [UInt8] = []
        for c in b {
            if c == 0x25 || c == 0x2F || c == 0 || extra.contains(c) {
                out += Array(String(format: "%%%02X", c).utf8)
            } else {
                out.append(c)
            }
        }
        return out
    }

    static let semicolon: Set<UInt8> = [0x3B]

    /// Rule 6's scratch names, as a regular expression over the name's bytes (each byte one
    /// scalar, so no grapheme joins two).
    static func isScratch(_ b: [UInt8]) -> Bool {
        let text = String(String.UnicodeScalarView(b.map { Unicode.Scalar($0) }))
        let pattern = try! Regex(#"(?s)^(4913|.+~|#.+#|\.#.+|\..+\.sw[a-z]x?)$"#).matchingSemantics(.unicodeScalar)
        return text.wholeMatch(of: pattern) != nil
    }

    /// Rule 2's whole-name escapes: a trailing `~`; the first byte of `.`, `..` or a scratch name.
    static func component(_ spelled: [UInt8]) -> [UInt8] {
        var b = spelled
        if b.last == 0x7E { b = b.dropLast() + Array("%7E".utf8) }
        if b == [0x2E] || b == [0x2E, 0x2E] || isScratch(b) {
            b = Array(String(format: "%%%02X", b[0]).utf8) + b.dropFirst()
        }
        return b
    }

    static func leaf(_ item: PathItem) -> [UInt8] {
        var suffix: [(String, String)] = []
        switch item.itemClass {
        case .genericPassword: break
        case .internetPassword:
            suffix = [
                ("path", item.path), ("securityDomain", item.securityDomain),
                ("authenticationType", item.authenticationType),
            ]
            .filter { !$0.1.isEmpty }
            if !item.protocolCode.isEmpty && InternetProtocol.name(for: item.protocolCode) == nil {
                suffix.append(("protocol", item.protocolCode))
            }
        default: break
        }
        if item.accessGroup != Caller.defaultAccessGroup { suffix.append(("accessGroup", item.accessGroup)) }
        if item.synchronizable { suffix.append(("synchronizable", "true")) }
        var fields: [UInt8] = []
        for (name, value) in suffix { fields += Array(";\(name)=".utf8) + escape(value, semicolon) }
        let main = item.itemClass == .genericPassword || item.itemClass == .internetPassword ? item.account : item.label
        return spell(Array(main.utf8), fields)
    }

    /// Rule 10's shape, as a regular expression over the bytes: `.`, anything, `.` and six
    /// ASCII letters or digits. The inner part and the suffix, or nil.
    static func rsyncShape(_ b: [UInt8]) -> (inner: [UInt8], tail: [UInt8])? {
        let text = String(String.UnicodeScalarView(b.map { Unicode.Scalar($0) }))
        let pattern = try! Regex(#"(?s)^\.(.*)(\.[A-Za-z0-9]{6})$"#).matchingSemantics(.unicodeScalar)
        guard let m = text.wholeMatch(of: pattern) else { return nil }
        let bytes = { (s: Substring) in s.unicodeScalars.map { UInt8($0.value) } }
        return (bytes(m.output[1].substring!), bytes(m.output[2].substring!))
    }

    /// Rules 2 and 10: a main part of rsync's temp shape `.M.XXXXXX` is spelled `.` + the name of
    /// M with the same fields + `.XXXXXX` (unless that is emacs's `.#…`); any other name escaped,
    /// its leading `.` too when it would have the shape.
    static func spell(_ main: [UInt8], _ fields: [UInt8]) -> [UInt8] {
        if let (inner, tail) = rsyncShape(main) {
            let spelled = spell(inner, fields)
            // rsync does not double a leading `.`: when the inner spelling's own part after its
            // `.` is no item's name (an empty main part, `;…`, or one `component` escapes) and the
            // dotted one is, the temp name is `.` + that part + tail (`..;f=v.XXXXXX` is not).
            let own = Array(spelled.dropFirst())
            let dropsDot =
                spelled.first == 0x2E && rsyncShape(own) == nil && (own.first == 0x3B || component(own) != own)
                && rsyncShape(spelled) == nil && component(spelled) == spelled
            let temp = (dropsDot ? [] : [0x2E]) + spelled + tail
            if !isScratch(temp) { return temp }
        }
        let plain = component(escape(String(decoding: main, as: UTF8.self), semicolon) + fields)
        return rsyncShape(plain) == nil ? plain : Array("%2E".utf8) + plain.dropFirst()
    }

    static func directory(_ item: PathItem) -> [UInt8]? {
        switch item.itemClass {
        case .genericPassword: return component(escape(item.service, []))
        case .internetPassword:
            var out: [UInt8] = []
            let name = InternetProtocol.name(for: item.protocolCode)
            if let name { out += Array((name + ":").utf8) }
            if item.server.utf8.contains(0x3A) {
                out += [0x5B] + escape(item.server, [0x5B, 0x5D]) + [0x5D]
            } else {
                var host = escape(item.server, [0x3A, 0x5B, 0x5D])
                if name == nil, item.port != 0, InternetProtocol.table.contains(where: { Array($0.name.utf8) == host })
                {
                    host = Array(String(format: "%%%02X", host[0]).utf8) + host.dropFirst()
                }
                out += host
            }
            if item.port != 0 { out += Array(":\(item.port)".utf8) }
            return component(out)
        default: return nil
        }
    }

    /// The 255-byte rule: the spelling itself, or a prefix of it (not cut inside an escape or
    /// a UTF-8 sequence), `%~` and 16 hex digits.
    static func check(
        _ spelled: String, against full: [UInt8], _ item: PathItem, _ what: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let got = Array(spelled.utf8)
        #expect(
            !got.contains(0x2F) && !got.contains(0), "\(what) holds / or NUL: \(item)", sourceLocation: sourceLocation)
        #expect(
            got.count <= PathCodec.maxComponentBytes, "\(what) has \(got.count) bytes: \(item)",
            sourceLocation: sourceLocation)
        if full.count <= PathCodec.maxComponentBytes {
            #expect(
                got == full,
                "\(what) \"\(scalars(spelled))\" is not the documented \"\(scalars(full.utf8Text))\": \(item)",
                sourceLocation: sourceLocation)
            #expect(
                !PathCodec.isLongSpelling(spelled), "short \(what) reads as a long spelling: \(item)",
                sourceLocation: sourceLocation)
            return
        }
        #expect(
            PathCodec.isLongSpelling(spelled), "over-long \(what) is not in the long form: \(item)",
            sourceLocation: sourceLocation)
        guard got.count >= 18 else {
            Issue.record("long \(what) too short: \(item)", sourceLocation: sourceLocation); return
        }
        let cut = got.count - 18
        let marker = Array(got[cut...])
        #expect(
            Array(marker.prefix(2)) == Array("%~".utf8)
                && marker.dropFirst(2).allSatisfy { Array("0123456789abcdef".utf8).contains($0) },
            "long \(what) does not end in %~ and 16 hex digits: \(scalars(spelled))", sourceLocation: sourceLocation)
        #expect(
            Array(full.prefix(cut)) == Array(got.prefix(cut)),
            "long \(what) is not a prefix of the full spelling: \(item)",
            sourceLocation: sourceLocation)
        if cut < full.count {
            #expect(
                full[cut] & 0xC0 != 0x80, "long \(what) cut inside a UTF-8 sequence: \(item)",
                sourceLocation: sourceLocation)
        }
        // Inside an escape: one of the two bytes before the cut is the `%` of a `%XX`.
        let escapeStarts = Set(escapePositions(full))
        #expect(
            !escapeStarts.contains(cut - 1) && !escapeStarts.contains(cut - 2),
            "long \(what) cut inside a %XX escape: \(item)", sourceLocation: sourceLocation)
    }

    /// Where the `%XX` escapes of a spelling start (a lone `%`, the empty string, is none).
    static func escapePositions(_ b: [UInt8]) -> [Int] {
        var out: [Int] = []
        var i = 0
        let hex = Array("0123456789ABCDEF".utf8)
        while i < b.count {
            if b[i] == 0x25, i + 2 < b.count, hex.contains(b[i + 1]), hex.contains(b[i + 2]) {
                out.append(i); i += 3
            } else {
                i += 1
            }
        }
        return out
    }
}
