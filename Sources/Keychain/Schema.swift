import FoundationEssentials
import Glibc

/// The five item classes of Keychain Services, by their `kSecClass` codes.
public enum ItemClass: String, CaseIterable, Sendable, CustomStringConvertible {
    case genericPassword = "genp"
    case internetPassword = "inet"
    case certificate = "cert"
    case key = "keys"
    case identity = "idnt"

    public var description: String { rawValue }

    /// The class's place in `allCases`, for per-class tables kept in arrays.
    var tableIndex: Int {
        switch self {
        case .genericPassword: 0
        case .internetPassword: 1
        case .certificate: 2
        case .key: 3
        case .identity: 4
        }
    }
}

/// Accessibility (`kSecAttrAccessible`, code `pdmn`): when an item's data can be read.
public enum Accessibility: String, CaseIterable, Sendable {
    case whenUnlocked = "ak"
    case afterFirstUnlock = "ck"
    case always = "dk"
    case whenPasscodeSetThisDeviceOnly = "akpu"
    case whenUnlockedThisDeviceOnly = "aku"
    case afterFirstUnlockThisDeviceOnly = "cku"
    case alwaysThisDeviceOnly = "dku"

    /// The lowerCamel name of the `kSecAttrAccessible…` constant, as shown in xattrs and the CLI.
    public var name: String {
        switch self {
        case .whenUnlocked: "whenUnlocked"
        case .afterFirstUnlock: "afterFirstUnlock"
        case .always: "always"
        case .whenPasscodeSetThisDeviceOnly: "whenPasscodeSetThisDeviceOnly"
        case .whenUnlockedThisDeviceOnly: "whenUnlockedThisDeviceOnly"
        case .afterFirstUnlockThisDeviceOnly: "afterFirstUnlockThisDeviceOnly"
        case .alwaysThisDeviceOnly: "alwaysThisDeviceOnly"
        }
    }

    /// Accepts the constant's name (`afterFirstUnlock`) or Apple's code (`ck`).
    public init?(text: String) {
        if let byCode = Accessibility(rawValue: text) { self = byCode; return }
        guard let byName = Accessibility.allCases.first(where: { $0.name.equalsIgnoringCase(text) })
        else { return nil }
        self = byName
    }

    /// Data stays readable after the keychain is locked again (AfterFirstUnlock, Always).
    public var readableWhileLocked: Bool {
        switch self {
        case .afterFirstUnlock, .afterFirstUnlockThisDeviceOnly, .always, .alwaysThisDeviceOnly: true
        default: false
        }
    }

    /// The class key is bound to this machine's device key: a copied vault cannot open it.
    public var isThisDeviceOnly: Bool {
        switch self {
        case .whenPasscodeSetThisDeviceOnly, .whenUnlockedThisDeviceOnly, .afterFirstUnlockThisDeviceOnly,
            .alwaysThisDeviceOnly:
            true
        default: false
        }
    }
}

/// `SecAccessControlCreateFlags`, with Apple's bit values.
public struct AccessControlFlags: OptionSet, Hashable, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    public static let userPresence = AccessControlFlags(rawValue: 1 << 0)
    public static let biometryAny = AccessControlFlags(rawValue: 1 << 1)
    public static let biometryCurrentSet = AccessControlFlags(rawValue: 1 << 3)
    public static let devicePasscode = AccessControlFlags(rawValue: 1 << 4)
    public static let or = AccessControlFlags(rawValue: 1 << 14)
    public static let and = AccessControlFlags(rawValue: 1 << 15)
    public static let privateKeyUsage = AccessControlFlags(rawValue: 1 << 30)
    public static let applicationPassword = AccessControlFlags(rawValue: 1 << 31)

    static let names: [(String, AccessControlFlags)] = [
        ("userPresence", .userPresence), ("biometryAny", .biometryAny),
        ("biometryCurrentSet", .biometryCurrentSet), ("devicePasscode", .devicePasscode),
        ("or", .or), ("and", .and), ("privateKeyUsage", .privateKeyUsage),
        ("applicationPassword", .applicationPassword),
    ]

    /// What this Linux keychain can actually enforce; the rest is refused as unimplemented
    /// rather than stored and silently ignored.
    public static let supported: AccessControlFlags = [.userPresence, .devicePasscode, .or, .and]

    /// Comma-separated names, e.g. `userPresence` or `userPresence,or,devicePasscode`.
    public var text: String {
        Self.names.filter { contains($0.1) }.map(\.0).joined(separator: ",")
    }

    public init?(text: String) {
        var flags: AccessControlFlags = []
        for part in text.split(separator: ",", omittingEmptySubsequences: true) {
            let name = part.trimmingWhitespace()
            guard let flag = Self.names.first(where: { $0.0.equalsIgnoringCase(name) })?.1 else {
                return nil
            }
            flags.insert(flag)
        }
        self = flags
    }
}

/// `SecAccessControl`: a protection class plus the conditions for using the item.
public struct AccessControl: Hashable, Sendable {
    public var protection: Accessibility
    public var flags: AccessControlFlags

    public init(protection: Accessibility, flags: AccessControlFlags) {
        self.protection = protection
        self.flags = flags
    }

    /// Reading the data needs an interactive check (a prompt) first.
    public var requiresPresence: Bool { !flags.intersection([.userPresence, .devicePasscode]).isEmpty }
}

/// The kinds of value an attribute holds.
public enum AttributeType: Sendable {
    case string, data, number, bool, date, accessibility, accessControl
}

/// Who may set an attribute.
public enum AttributeAccess: Sendable {
    /// The caller may set it on add and change it on update.
    case readWrite
    /// Set by the keychain (dates); may be given on add (imports), never changed by update.
    case system
    /// Derived from the item's data (certificate fields); read-only to updates.
    case derived
}

/// One row of the attribute schema: the single table-driven definition of every attribute.
public struct Attribute: Hashable, Sendable, CustomStringConvertible, Comparable {
    /// The four-character code: the real value of the `kSecAttr…` constant (`svce`).
    public let code: String
    /// The lowerCamel name after the constant (`service` for kSecAttrService): xattr and JSON name.
    public let name: String
    public let type: AttributeType
    public let access: AttributeAccess
    /// Schema order, so attributes print and hash in a stable order.
    let order: Int

    public var description: String { name }
    /// Equal and hashed by schema order, which is one per name (every attribute is made from its
    /// schema row; the class pseudo-attribute has -1): comparing and hashing an Int instead of
    /// the name's characters was a fifth of decoding an attribute set, which a listing does for
    /// every item.
    public static func == (a: Attribute, b: Attribute) -> Bool { a.order == b.order }
    public func hash(into h: inout Hasher) { h.combine(order) }
    public static func < (a: Attribute, b: Attribute) -> Bool { a.order < b.order }
}

/// The attribute schema of every class, after Apple's SecItemSchema.c.
public enum Schema {
    private static let G = ItemClass.genericPassword, I = ItemClass.internetPassword
    private static let C = ItemClass.certificate, K = ItemClass.key

    private struct Row {
        let name: String, code: String, type: AttributeType, access: AttributeAccess
        let classes: Set<ItemClass>, key: Set<ItemClass>
    }

    private static let rows: [Row] = [
        // The primary key of every class also holds the access group and the sync flag.
        Row(
            name: "accessGroup", code: "agrp", type: .string, access: .readWrite, classes: [G, I, C, K],
            key: [G, I, C, K]),
        Row(
            name: "synchronizable", code: "sync", type: .bool, access: .readWrite, classes: [G, I, C, K],
            key: [G, I, C, K]),
        Row(name: "service", code: "svce", type: .string, access: .readWrite, classes: [G], key: [G]),
        Row(name: "server", code: "srvr", type: .string, access: .readWrite, classes: [I], key: [I]),
        Row(name: "protocol", code: "ptcl", type: .string, access: .readWrite, classes: [I], key: [I]),
        Row(name: "port", code: "port", type: .number, access: .readWrite, classes: [I], key: [I]),
        Row(name: "account", code: "acct", type: .string, access: .readWrite, classes: [G, I], key: [G, I]),
        Row(name: "path", code: "path", type: .string, access: .readWrite, classes: [I], key: [I]),
        Row(name: "securityDomain", code: "sdmn", type: .string, access: .readWrite, classes: [I], key: [I]),
        Row(name: "authenticationType", code: "atyp", type: .string, access: .readWrite, classes: [I], key: [I]),
        Row(name: "certificateType", code: "ctyp", type: .number, access: .derived, classes: [C], key: [C]),
        Row(name: "issuer", code: "issr", type: .data, access: .derived, classes: [C], key: [C]),
        Row(name: "serialNumber", code: "slnr", type: .data, access: .derived, classes: [C], key: [C]),
        Row(name: "keyClass", code: "kcls", type: .number, access: .readWrite, classes: [K], key: [K]),
        Row(name: "applicationLabel", code: "klbl", type: .data, access: .readWrite, classes: [K], key: [K]),
        Row(name: "applicationTag", code: "atag", type: .data, access: .readWrite, classes: [K], key: [K]),
        Row(name: "keyType", code: "type", type: .number, access: .readWrite, classes: [K], key: [K]),
        Row(name: "keySizeInBits", code: "bsiz", type: .number, access: .readWrite, classes: [K], key: [K]),
        Row(name: "effectiveKeySize", code: "esiz", type: .number, access: .readWrite, classes: [K], key: [K]),
        Row(name: "creator", code: "crtr", type: .number, access: .readWrite, classes: [G, I, K], key: [K]),
        Row(name: "startDate", code: "sdat", type: .date, access: .readWrite, classes: [K], key: [K]),
        Row(name: "endDate", code: "edat", type: .date, access: .readWrite, classes: [K], key: [K]),
        Row(name: "label", code: "labl", type: .string, access: .readWrite, classes: [G, I, C, K], key: []),
        Row(name: "description", code: "desc", type: .string, access: .readWrite, classes: [G, I], key: []),
        Row(name: "comment", code: "icmt", type: .string, access: .readWrite, classes: [G, I], key: []),
        Row(name: "type", code: "type", type: .number, access: .readWrite, classes: [G, I], key: []),
        Row(name: "generic", code: "gena", type: .data, access: .readWrite, classes: [G], key: []),
        Row(name: "isInvisible", code: "invi", type: .bool, access: .readWrite, classes: [G, I], key: []),
        Row(name: "isNegative", code: "nega", type: .bool, access: .readWrite, classes: [G, I], key: []),
        Row(
            name: "accessible", code: "pdmn", type: .accessibility, access: .readWrite, classes: [G, I, C, K], key: []),
        Row(
            name: "accessControl", code: "accc", type: .accessControl, access: .readWrite, classes: [G, I, C, K],
            key: []),
        Row(name: "creationDate", code: "cdat", type: .date, access: .system, classes: [G, I, C, K], key: []),
        Row(name: "modificationDate", code: "mdat", type: .date, access: .system, classes: [G, I, C, K], key: []),
        Row(name: "subject", code: "subj", type: .data, access: .derived, classes: [C], key: []),
        Row(name: "subjectKeyID", code: "skid", type: .data, access: .derived, classes: [C], key: []),
        Row(name: "publicKeyHash", code: "pkhh", type: .data, access: .derived, classes: [C], key: []),
        Row(name: "certificateEncoding", code: "cenc", type: .number, access: .derived, classes: [C], key: []),
        Row(name: "isPermanent", code: "perm", type: .bool, access: .readWrite, classes: [K], key: []),
        Row(name: "isExtractable", code: "extr", type: .bool, access: .readWrite, classes: [K], key: []),
        Row(name: "isSensitive", code: "sens", type: .bool, access: .readWrite, classes: [K], key: []),
        Row(name: "canEncrypt", code: "encr", type: .bool, access: .readWrite, classes: [K], key: []),
        Row(name: "canDecrypt", code: "decr", type: .bool, access: .readWrite, classes: [K], key: []),
        Row(name: "canDerive", code: "drve", type: .bool, access: .readWrite, classes: [K], key: []),
        Row(name: "canSign", code: "sign", type: .bool, access: .readWrite, classes: [K], key: []),
        Row(name: "canVerify", code: "vrfy", type: .bool, access: .readWrite, classes: [K], key: []),
        Row(name: "canWrap", code: "wrap", type: .bool, access: .readWrite, classes: [K], key: []),
        Row(name: "canUnwrap", code: "unwp", type: .bool, access: .readWrite, classes: [K], key: []),
        // keychainfs's own (not Apple's): the hosts the ssh agent offers this key to (docs/ssh.md).
        Row(name: "sshHosts", code: "ssht", type: .string, access: .readWrite, classes: [K], key: []),
        // keychainfs's own: a private key's public half as the ssh agent lists it (the SSH public
        // key blob), or why the agent cannot use the key; set from the key's data whenever it is
        // stored (add, import, an update of the data), so the agent lists and finds keys without
        // decrypting one (docs/ssh.md, "What the agent stores").
        Row(name: "sshPublicKey", code: "sshk", type: .data, access: .derived, classes: [K], key: []),
        Row(name: "sshUnusable", code: "sshu", type: .string, access: .derived, classes: [K], key: []),
        // keychainfs's own: a Secret Service item's attribute map and content type, as JSON
        // (docs/secret-service.md).
        Row(
            name: "secretServiceAttributes", code: "ssat", type: .string, access: .readWrite, classes: [G, I], key: []
        ),
        // keychainfs's own: how many bytes of a password item's data box, after the secret and
        // a NUL, are the extras a face keeps beside it (git's expiry and refresh token); set by
        // the core whenever the data is stored (SecretExtras.swift).
        Row(name: "secretExtrasLength", code: "sxln", type: .number, access: .derived, classes: [G, I], key: []),
    ]

    /// `kSecClass` is not an attribute of any class: naming it in an update is errSecNoSuchAttr.
    public static let itemClassPseudoAttribute = Attribute(
        code: "class", name: "class", type: .string, access: .readWrite, order: -1)

    private static let attributes: [Attribute] = rows.enumerated().map {
        Attribute(code: $1.code, name: $1.name, type: $1.type, access: $1.access, order: $0)
    }
    private static let byName: [String: Int] = Dictionary(
        uniqueKeysWithValues: rows.enumerated().map { ($1.name.lowercased(), $0) })

    /// The class an identity's attributes come from: the identity itself has no table.
    private static func tableClass(_ c: ItemClass) -> Set<ItemClass> {
        c == .identity ? [C, K] : [c]
    }

    // Per-class tables, built once: decoding and indexing consult them for every attribute
    // of every item, and filtering the schema each time was half the cost of a lookup.
    private static let classAttributes: [ItemClass: [Attribute]] = Dictionary(
        uniqueKeysWithValues: ItemClass.allCases.map { c in
            let classes = tableClass(c)
            return (c, rows.indices.filter { !rows[$0].classes.isDisjoint(with: classes) }.map { attributes[$0] })
        })
    private static let classKeys: [ItemClass: [Attribute]] = Dictionary(
        uniqueKeysWithValues: ItemClass.allCases.map { c in
            (c, c == .identity ? [] : rows.indices.filter { rows[$0].key.contains(c) }.map { attributes[$0] })
        })
    private static let classCodes: [ItemClass: [String: Attribute]] = classAttributes.mapValues { list in
        Dictionary(list.map { ($0.code, $0) }, uniquingKeysWith: { first, _ in first })
    }

    /// Attributes of a class, in schema order.
    public static func attributes(of itemClass: ItemClass) -> [Attribute] { classAttributes[itemClass]! }

    /// The primary-key attributes of a class (besides none for identities), in schema order.
    public static func primaryKey(of itemClass: ItemClass) -> [Attribute] { classKeys[itemClass]! }

    /// The attribute with a four-character code in a class.
    static func attribute(code: String, in itemClass: ItemClass) -> Attribute? { classCodes[itemClass]![code] }

    /// The attribute whose code is these bytes in a class, without making a String of them
    /// (the decoder's lookup, once per attribute of every item read). Codes are ASCII, so
    /// bytes that are not UTF-8 find nothing, as with `attribute(code:in:)`.
    static func attribute(codeBytes: ArraySlice<UInt8>, in itemClass: ItemClass) -> Attribute? {
        guard codeBytes.count == 4 else {
            return String(validating: codeBytes, as: UTF8.self).flatMap { attribute(code: $0, in: itemClass) }
        }
        return classPackedCodes[itemClass.tableIndex][packed(codeBytes)]
    }

    private static func packed<C: Collection<UInt8>>(_ bytes: C) -> UInt32 {
        bytes.reduce(UInt32(0)) { ($0 << 8) | UInt32($1) }
    }

    /// `classCodes` for four-byte codes, keyed by the code's bytes packed into an integer, in
    /// an array by class.
    private static let classPackedCodes: [[UInt32: Attribute]] = ItemClass.allCases.map { c in
        Dictionary(
            classAttributes[c]!.filter { $0.code.utf8.count == 4 }.map { (packed($0.code.utf8), $0) },
            uniquingKeysWith: { first, _ in first })
    }

    public static func isPrimaryKey(_ attribute: Attribute, in itemClass: ItemClass) -> Bool {
        rows[attribute.order].key.contains(itemClass)
    }

    /// Looks an attribute up by lowerCamel name (any case) or four-character code, within a
    /// class (codes are only unique per class: `type` is keyType for keys). Unknown names,
    /// and names that do not belong to the class, are errSecNoSuchAttr.
    public static func attribute(named text: String, in itemClass: ItemClass) throws -> Attribute {
        if text == "class" || text == "kSecClass" {
            throw KeychainError(.noSuchAttr, "'class' is not an attribute: an item's class cannot be changed")
        }
        let classes = tableClass(itemClass)
        if let i = byName[text.lowercased()], !rows[i].classes.isDisjoint(with: classes) { return attributes[i] }
        if let i = rows.indices.first(where: { rows[$0].code == text && !rows[$0].classes.isDisjoint(with: classes) }) {
            return attributes[i]
        }
        if byName[text.lowercased()] != nil {
            throw KeychainError(.noSuchAttr, "attribute '\(text)' does not belong to class \(itemClass)")
        }
        throw KeychainError(.noSuchAttr, "unknown attribute '\(text)'")
    }

    public static func belongs(_ attribute: Attribute, to itemClass: ItemClass) -> Bool {
        attribute.order >= 0 && !rows[attribute.order].classes.isDisjoint(with: tableClass(itemClass))
    }

    /// Shorthands for attributes the core itself reasons about.
    public static let accessGroup = attributes[0]
    public static let synchronizable = attributes[1]
    public static func named(_ name: String) -> Attribute { attributes[byName[name.lowercased()]!] }
    public static let service = named("service")
    public static let server = named("server")
    public static let account = named("account")
    public static let label = named("label")
    public static let applicationTag = named("applicationTag")
    public static let isExtractable = named("isExtractable")
    public static let accessible = named("accessible")
    public static let accessControl = named("accessControl")
    public static let creationDate = named("creationDate")
    public static let modificationDate = named("modificationDate")
    public static let protocolAttribute = named("protocol")
    public static let port = named("port")
    public static let path = named("path")
    public static let securityDomain = named("securityDomain")
    public static let authenticationType = named("authenticationType")

    /// The attribute that names an item's directory (genp: service, inet: server) or, for
    /// classes without one, the item itself (label). Its keyed hash is the secondary index.
    public static func groupingAttribute(of itemClass: ItemClass) -> Attribute {
        switch itemClass {
        case .genericPassword: service
        case .internetPassword: server
        default: label
        }
    }
}

/// `kSecAttrProtocol…` values: Apple's four-character codes and their readable names.
public enum InternetProtocol {
    public static let table: [(name: String, code: String)] = [
        ("ftp", "ftp "), ("ftpaccount", "ftpa"), ("http", "http"), ("irc", "irc "), ("nntp", "nntp"),
        ("pop3", "pop3"), ("smtp", "smtp"), ("socks", "sox "), ("imap", "imap"), ("ldap", "ldap"),
        ("appletalk", "atlk"), ("afp", "afp "), ("telnet", "teln"), ("ssh", "ssh "), ("ftps", "ftps"),
        ("https", "htps"), ("httpproxy", "htpx"), ("httpsproxy", "htsx"), ("ftpproxy", "ftpx"),
        ("smb", "smb "), ("rtsp", "rtsp"), ("rtspproxy", "rtsx"), ("daap", "daap"), ("eppc", "eppc"),
        ("ipp", "ipp "), ("nntps", "ntps"), ("ldaps", "ldps"), ("telnets", "tels"), ("imaps", "imps"),
        ("ircs", "ircs"), ("pop3s", "pops"),
    ]

    /// The code for a name (`https` → `htps`) or a code given as is (`htps`, `ssh `, `ssh`).
    public static func code(for text: String) -> String? {
        let lower = text.lowercased()
        if let hit = table.first(where: { $0.name == lower }) { return hit.code }
        if let hit = table.first(where: { $0.code == lower || $0.code.trimmingWhitespace() == lower }) {
            return hit.code
        }
        return nil
    }

    public static func name(for code: String) -> String? { table.first { $0.code == code }?.name }
}
