import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import KeychainCrypto

/// The path layout (docs/paths.md is its specification):
///
///     /genp/<service>/<account>[;accessGroup=…][;synchronizable=true]
///     /inet/[<protocol>:]<server>[:<port>]/<account>[;path=…][;securityDomain=…][;authenticationType=…][;accessGroup=…][;synchronizable=true]
///     /cert/<label>[;…]   /keys/<label>[;…]   /idnt/<label>[;…]
///
/// Every component is escaped reversibly; only the canonical spelling of an item resolves,
/// so every item has exactly one path, computed from its own attributes.
/// rsync's temp names (`.N.XXXXXX`) are read first: PathCodec+TempNames.swift.
public enum PathCodec {
    public static let maxComponentBytes = 255
    static let longNameMarker = "%~"

    // MARK: Escaping

    /// Percent-escapes `%`, `/`, NUL and `extra` bytes, and spells the empty string `%`.
    /// Escapes are uppercase `%XX`. (A whole component is also kept from looking like `.`,
    /// `..` or an editor's scratch file: `component`.)
    static func escape(_ text: String, extra: [UInt8] = []) -> String {
        // Most names need no escape: return them as they are, without copying their bytes.
        // (Scanned as a buffer where the string has one: a listing spells thousands, and the
        // generic scan of a UTF8View was a tenth of a first listing.)
        func needsEscape(_ b: UInt8) -> Bool { b == 0x25 || b == 0x2F || b == 0 || extra.contains(b) }
        let clean =
            text.utf8.withContiguousStorageIfAvailable { !$0.isEmpty && !$0.contains(where: needsEscape) }
            ?? (!text.utf8.isEmpty && !text.utf8.contains(where: needsEscape))
        if clean { return text }
        let bytes = Array(text.utf8)
        if bytes.isEmpty { return "%" }
        var out = [UInt8]()
        out.reserveCapacity(bytes.count + 8)
        for b in bytes {
            if b == 0x25 || b == 0x2F || b == 0 || extra.contains(b) {
                out += escaped(b)
            } else {
                out.append(b)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static func escaped(_ b: UInt8) -> [UInt8] {
        let hex = Array("0123456789ABCDEF".utf8)
        return [0x25, hex[Int(b >> 4)], hex[Int(b & 15)]]
    }

    /// A whole file or directory name: never `.` or `..`, never a name editors use for their
    /// scratch files (`isScratchName`), which would be kept in memory instead of stored. Such a
    /// spelling has its first byte (`.`, `#` or `4`, always ASCII) escaped, or its trailing `~`.
    static func component(_ spelled: String) -> String {
        // Most names are none of those (no `~` at the end; not starting with `.`, `#` or `4`):
        // returned as they are, without copying their bytes (a listing spells thousands).
        let utf8 = spelled.utf8
        if let first = utf8.first, first != UInt8(ascii: "."), first != UInt8(ascii: "#"), first != UInt8(ascii: "4"),
            utf8.last != UInt8(ascii: "~")
        {
            return spelled
        }
        var bytes = Array(spelled.utf8)
        if bytes.last == UInt8(ascii: "~") { bytes = bytes.dropLast() + escaped(UInt8(ascii: "~")) }
        if bytes == [0x2E] || bytes == [0x2E, 0x2E] || isScratchName(bytes) {
            bytes = escaped(bytes[0]) + bytes.dropFirst()
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Reverses `escape`. Nil for a malformed escape or bytes that are not UTF-8.
    static func unescape(_ spelled: String) -> String? {
        spelled == "%" ? "" : spelled.percentDecoded(lowercaseHex: false)  // lowercase escapes are not canonical
    }

    /// A component longer than a filename may be is spelled as a prefix, `%~` and a hash of
    /// the full spelling: still unique and stable, resolved by comparing spellings.
    static func fitted(_ spelled: String) -> String {
        guard spelled.utf8.count > maxComponentBytes else { return spelled }
        let bytes = Array(spelled.utf8)
        let hash = AttributeText.hex(KeyedHash.digest([bytes])).prefix(16)
        var cut = maxComponentBytes - longNameMarker.utf8.count - hash.count
        // Do not cut inside a %XX escape or a UTF-8 sequence.
        while cut > 0 && (bytes[cut] & 0xC0 == 0x80) { cut -= 1 }
        if cut >= 1 && bytes[cut - 1] == 0x25 { cut -= 1 } else if cut >= 2 && bytes[cut - 2] == 0x25 { cut -= 2 }
        return String(decoding: bytes[0..<cut], as: UTF8.self) + longNameMarker + hash
    }

    public static func isLongSpelling(_ name: String) -> Bool {
        let b = Array(name.utf8)
        return b.indices.dropLast().contains { b[$0] == 0x25 && b[$0 + 1] == UInt8(ascii: "~") }
    }

    /// Names that editors create beside a file, kept in daemon memory and never stored: vim's
    /// swap files (`.f.swp`, `.f.swo`…`.f.swx`, and `.f.swpx`) and its write test `4913`, backups `f~`, emacs
    /// lock and auto-save files `.#f` and `#f#`. Every other name is an item (`.env` too).
    /// Compared as bytes.
    public static func isScratchName(_ name: String) -> Bool { isScratchName(Array(name.utf8)) }

    static func isScratchName(_ b: [UInt8]) -> Bool {
        let dot = UInt8(ascii: "."), hash = UInt8(ascii: "#"), tilde = UInt8(ascii: "~")
        if b == Array("4913".utf8) { return true }
        if b.count >= 2 && b.last == tilde { return true }
        if b.count >= 3 && b.first == hash && b.last == hash { return true }
        guard b.count >= 3, b.first == dot else { return false }
        if b[1] == hash { return true }
        // `.<name>.sw<letter>`: vim's swap files (.swp, then .swo, .swn… when taken), and
        // `.<name>.sw<letter>x`, its probe for file systems that cut long names.
        let n = b.last == UInt8(ascii: "x") && b.count >= 7 && b[b.count - 5] == dot ? b.count - 1 : b.count
        return n >= 6 && b[n - 4] == dot && b[n - 3] == UInt8(ascii: "s") && b[n - 2] == UInt8(ascii: "w")
            && (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(b[n - 1])
    }

    /// Names compared as bytes: Swift's `==` on strings is canonical equivalence, which would
    /// make the NFC and NFD spellings of `é` one name.
    static func same(_ a: String, _ b: String) -> Bool { a.utf8.elementsEqual(b.utf8) }

    // MARK: Directory components

    static let leafExtra: [UInt8] = [UInt8(ascii: ";")]
    static let hostExtra: [UInt8] = [UInt8(ascii: ":"), UInt8(ascii: "["), UInt8(ascii: "]")]

    /// The directory an item lives in under its class directory (genp: service,
    /// inet: protocol/server/port), or nil for classes whose items sit in the class directory.
    public static func directory<A: AttributeLookup>(of itemClass: ItemClass, _ attributes: A) -> String? {
        switch itemClass {
        case .genericPassword:
            return fitted(component(escape(string(attributes, Schema.service))))
        case .internetPassword:
            var out = ""
            let code = string(attributes, Schema.protocolAttribute)
            let protocolName = InternetProtocol.name(for: code)
            if let protocolName { out += protocolName + ":" }
            let server = string(attributes, Schema.server)
            let port = number(attributes, Schema.port)
            var host: String
            if server.utf8.contains(UInt8(ascii: ":")) {
                host = "[" + escape(server, extra: [UInt8(ascii: "["), UInt8(ascii: "]")]) + "]"
            } else {
                host = escape(server, extra: hostExtra)
                // "ftp:21" would read as protocol ftp, server 21: escape the host's first byte.
                if protocolName == nil, port != 0, InternetProtocol.code(forName: host) != nil {
                    host =
                        "%" + AttributeText.hex(Array(host.utf8)[0], width: 2, uppercase: true)
                        + String(host.dropFirst())
                }
            }
            out += host
            if port != 0 { out += ":\(port)" }
            return fitted(component(out))
        default:
            return nil
        }
    }

    /// The file name of an item within its directory.
    public static func leaf<A: AttributeLookup>(of itemClass: ItemClass, _ attributes: A) -> String {
        var suffix: [(String, String)] = []
        if itemClass == .internetPassword {
            for attribute in [Schema.path, Schema.securityDomain, Schema.authenticationType] {
                let v = string(attributes, attribute)
                if !v.isEmpty { suffix.append((attribute.name, v)) }
            }
            let code = string(attributes, Schema.protocolAttribute)
            if !code.isEmpty && InternetProtocol.name(for: code) == nil {
                suffix.append((Schema.protocolAttribute.name, code))
            }
        }
        let group = string(attributes, Schema.accessGroup)
        if !group.isEmpty && group != Caller.defaultAccessGroup { suffix.append((Schema.accessGroup.name, group)) }
        if case .bool(true)? = attributes[Schema.synchronizable] { suffix.append((Schema.synchronizable.name, "true")) }
        var fields = ""
        for (name, value) in suffix { fields += ";\(name)=" + escape(value, extra: leafExtra) }
        return fitted(spell(string(attributes, mainAttribute(itemClass)), fields: fields))
    }

    /// The attribute a leaf's first part names: the account (genp, inet), else the label.
    static func mainAttribute(_ itemClass: ItemClass) -> Attribute {
        itemClass == .genericPassword || itemClass == .internetPassword ? Schema.account : Schema.label
    }

    /// File names of listed items, as `leaf(of:_:)` spells them, made once per listing. The
    /// common name, a generic password's account that is the entry's one field (so not
    /// synchronizable), in the default access group, and that needs no escape, is made straight
    /// from the entry's stored bytes: no value decoded, no string made twice. Every other entry
    /// is spelled by `leaf(of:_:)`. The two agree byte for byte on every entry
    /// (NameListCodecTests).
    public struct ListedLeaves {
        let itemClass: ItemClass
        // Read once here, not per entry (each is a global of another module).
        private let account = Schema.account
        private let defaultGroup = Caller.defaultAccessGroup

        public init(_ itemClass: ItemClass) { self.itemClass = itemClass }

        public func leaf(_ entry: NameListEntry) -> String {
            if itemClass == .genericPassword, let bytes = entry.soleString(account), PathCodec.isPlainLeaf(bytes),
                entry.accessGroup.isEmpty || entry.accessGroup == defaultGroup
            {
                return bytes.withUnsafeBufferPointer { String(decoding: $0, as: UTF8.self) }
            }
            return PathCodec.leaf(of: itemClass, entry)
        }
    }

    /// A name `escape`, `component` and `fitted` leave as it is, in a leaf: not empty, no byte
    /// escaped (`%`, `/`, NUL, `;`), not starting with `.`, `#` or `4` nor ending with `~`, and
    /// no longer than a file name may be.
    static func isPlainLeaf(_ bytes: ArraySlice<UInt8>) -> Bool {
        bytes.withUnsafeBufferPointer { b in
            guard let first = b.first, let last = b.last, b.count <= maxComponentBytes,
                first != UInt8(ascii: "."), first != UInt8(ascii: "#"), first != UInt8(ascii: "4"),
                last != UInt8(ascii: "~")
            else { return false }
            return !b.contains { $0 == 0x25 || $0 == 0x2F || $0 == 0 || $0 == 0x3B }
        }
    }

    // MARK: Parsing

    /// Parses a directory component into the attributes it names. Nil when it is not the
    /// canonical spelling of anything (or is a long spelling, resolved by listing instead).
    public static func parseDirectory(_ itemClass: ItemClass, _ name: String) -> Attributes? {
        guard !isLongSpelling(name) else { return nil }
        var attributes = Attributes()
        switch itemClass {
        case .genericPassword:
            guard let service = unescape(name) else { return nil }
            attributes[Schema.service] = .string(service)
        case .internetPassword:
            // Split on bytes: a `:` followed by a combining mark is still a separator.
            var tokens: [String] = []
            var current: [UInt8] = []
            var depth = 0
            for b in name.utf8 {
                if b == UInt8(ascii: "[") { depth += 1 } else if b == UInt8(ascii: "]") { depth -= 1 }
                if b == UInt8(ascii: ":") && depth == 0 {
                    tokens.append(String(decoding: current, as: UTF8.self))
                    current = []
                } else {
                    current.append(b)
                }
            }
            tokens.append(String(decoding: current, as: UTF8.self))
            var proto = "", host = "", port: Int64 = 0
            func parsePort(_ t: String) -> Int64? {
                guard let p = Int64(t), p > 0, p <= 65535, same(String(p), t) else { return nil }
                return p
            }
            switch tokens.count {
            case 1: host = tokens[0]
            case 2:
                if let code = InternetProtocol.code(forName: tokens[0]) {
                    proto = code; host = tokens[1]
                } else {
                    host = tokens[0]; guard let p = parsePort(tokens[1]) else { return nil }; port = p
                }
            case 3:
                guard let code = InternetProtocol.code(forName: tokens[0]), let p = parsePort(tokens[2]) else {
                    return nil
                }
                proto = code; host = tokens[1]; port = p
            default: return nil
            }
            let server: String?
            let hostBytes = Array(host.utf8)
            if hostBytes.count >= 2 && hostBytes.first == UInt8(ascii: "[") && hostBytes.last == UInt8(ascii: "]") {
                server = unescape(String(decoding: hostBytes.dropFirst().dropLast(), as: UTF8.self))
            } else {
                server = unescape(host)
            }
            guard let server else { return nil }
            attributes[Schema.server] = .string(server)
            attributes[Schema.protocolAttribute] = .string(proto)
            attributes[Schema.port] = .number(port)
        default:
            return nil
        }
        guard let spelled = directory(of: itemClass, attributes), same(spelled, name) else { return nil }
        return attributes
    }

    /// Parses a leaf name (in the directory `directory` names) into the item's key attributes.
    public static func parseLeaf(_ itemClass: ItemClass, _ name: String, in directory: Attributes) -> Attributes? {
        guard !isLongSpelling(name), !isScratchName(name) else { return nil }
        // rsync's temp file `.N.XXXXXX` for a name N: only ever that (PathCodec+TempNames.swift).
        if let (inner, tail) = rsyncTempParts(name) {
            return parseTempLeaf(itemClass, name, inner: inner, tail: tail, in: directory)
        }
        // Split on bytes: U+037E (GREEK QUESTION MARK) is canonically equivalent to `;` but is
        // not a separator.
        let parts = Array(name.utf8).split(separator: UInt8(ascii: ";"), omittingEmptySubsequences: false)
            .map { String(decoding: $0, as: UTF8.self) }
        guard let first = parts.first, let main = unescape(first) else { return nil }
        var attributes = directory
        attributes[mainAttribute(itemClass)] = .string(main)
        attributes[Schema.accessGroup] = .string(Caller.defaultAccessGroup)
        attributes[Schema.synchronizable] = .bool(false)
        if itemClass == .internetPassword {
            for a in [Schema.path, Schema.securityDomain, Schema.authenticationType] { attributes[a] = .string("") }
        }
        for part in parts.dropFirst() {
            let bytes = Array(part.utf8)
            guard let eq = bytes.firstIndex(of: UInt8(ascii: "=")) else { return nil }
            let key = String(decoding: bytes[..<eq], as: UTF8.self)
            guard let value = unescape(String(decoding: bytes[(eq + 1)...], as: UTF8.self)) else { return nil }
            switch key {
            case Schema.accessGroup.name: attributes[Schema.accessGroup] = .string(value)
            case Schema.synchronizable.name:
                guard same(value, "true") else { return nil }
                attributes[Schema.synchronizable] = .bool(true)
            case Schema.path.name where itemClass == .internetPassword: attributes[Schema.path] = .string(value)
            case Schema.securityDomain.name where itemClass == .internetPassword:
                attributes[Schema.securityDomain] = .string(value)
            case Schema.authenticationType.name where itemClass == .internetPassword:
                attributes[Schema.authenticationType] = .string(value)
            case Schema.protocolAttribute.name where itemClass == .internetPassword:
                attributes[Schema.protocolAttribute] = .string(value)
            default: return nil
            }
        }
        guard same(leaf(of: itemClass, attributes), name) else { return nil }
        return attributes
    }

    static func string<A: AttributeLookup>(_ attributes: A, _ attribute: Attribute) -> String {
        if case .string(let s)? = attributes[attribute] { return s }
        return ""
    }

    static func number<A: AttributeLookup>(_ attributes: A, _ attribute: Attribute) -> Int64 {
        if case .number(let n)? = attributes[attribute] { return n }
        return 0
    }
}

extension InternetProtocol {
    /// The code for a protocol *name* only (`https` → `htps`); codes are not accepted here,
    /// so a path has one spelling.
    static func code(forName name: String) -> String? { table.first { PathCodec.same($0.name, name) }?.code }
}
