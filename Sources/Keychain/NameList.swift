import FoundationEssentials
import Glibc

/// Attribute values by attribute: an attribute set, or one name-list entry (`NameListEntry`),
/// so the face can spell a name from either without building a dictionary per entry.
public protocol AttributeLookup {
    subscript(_ attribute: Attribute) -> AttributeValue? { get }
}

extension Dictionary: AttributeLookup where Key == Attribute, Value == AttributeValue {}

/// One entry of a directory's name list: an item id and the attributes its file name is spelled
/// from (the class's primary-key attributes). The list's access group and grouping value
/// (service, server) are the list's, not repeated per entry; `synchronizable` is stored only
/// when true. No size, no dates: a write of an item's data changes no entry.
///
/// The values stay encoded (`fields`, a slice of the chunk they were read from, checked when
/// the chunk was decoded) and are decoded when asked for: a 10,000-entry listing builds no
/// dictionary per entry.
public struct NameListEntry: Sendable, AttributeLookup, CustomStringConvertible {
    public let id: Int64
    public let itemClass: ItemClass
    /// The access group of the list the entry is in.
    public let accessGroup: String
    /// The directory's grouping value (service, server), when the list was read for one.
    public let groupingValue: AttributeValue?
    /// Per field: index in the class's `nameAttributes`, type tag, varint length, value bytes.
    let fields: ArraySlice<UInt8>

    /// The attributes an entry stores, in schema order: the class's primary key but the grouping
    /// attribute and the access group.
    static func nameAttributes(of itemClass: ItemClass) -> [Attribute] {
        itemClass == .genericPassword ? genericNames : itemClass == .internetPassword ? internetNames : names(itemClass)
    }
    private static let genericNames = names(.genericPassword)
    private static let internetNames = names(.internetPassword)
    private static func names(_ itemClass: ItemClass) -> [Attribute] {
        let grouping = Schema.groupingAttribute(of: itemClass)
        return Schema.primaryKey(of: itemClass).filter { $0 != grouping && $0 != Schema.accessGroup }
    }

    init(
        id: Int64, itemClass: ItemClass, accessGroup: String, groupingValue: AttributeValue?, fields: ArraySlice<UInt8>
    ) {
        self.id = id
        self.itemClass = itemClass
        self.accessGroup = accessGroup
        self.groupingValue = groupingValue
        self.fields = fields
    }

    /// The entry an item's attributes give.
    public init(id: Int64, _ itemClass: ItemClass, attributes: Attributes) {
        var fields: [UInt8] = []
        for (index, attribute) in Self.nameAttributes(of: itemClass).enumerated() {
            guard let value = attributes[attribute] else { continue }
            if attribute == Schema.synchronizable && value == .bool(false) { continue }
            let (tag, bytes) = AttributeCodec.encode(value)
            fields.append(UInt8(index))
            fields.append(tag)
            NameListCodec.appendVarint(UInt64(bytes.count), to: &fields)
            fields += bytes
        }
        var group = Caller.defaultAccessGroup
        if case .string(let g)? = attributes[Schema.accessGroup] { group = g }
        self.init(
            id: id, itemClass: itemClass, accessGroup: group,
            groupingValue: attributes[Schema.groupingAttribute(of: itemClass)], fields: fields[...])
    }

    /// Per class, by schema order: the attribute's index in `nameAttributes(of:)`, or a mark for
    /// the list's own attributes. Read once per value a spelling asks for, so it is an array look-up
    /// of an integer (no attribute copied, no search).
    private enum Slot {
        static let accessGroup = -1, grouping = -2, none = -3
        static let byClass: [[Int]] = ItemClass.allCases.map { itemClass in
            let orders = Schema.attributes(of: itemClass).map(\.order) + [Schema.accessGroup.order]
            var slots = [Int](repeating: none, count: (orders.max() ?? 0) + 1)
            for (index, attribute) in NameListEntry.nameAttributes(of: itemClass).enumerated() {
                slots[attribute.order] = index
            }
            slots[Schema.groupingAttribute(of: itemClass).order] = grouping
            slots[Schema.accessGroup.order] = accessGroup
            return slots
        }
        static let synchronizable = Schema.synchronizable.order
    }

    public subscript(_ attribute: Attribute) -> AttributeValue? {
        let slots = Slot.byClass[itemClass.tableIndex]
        let order = attribute.order
        let wanted = order >= 0 && order < slots.count ? slots[order] : Slot.none
        if wanted == Slot.accessGroup { return .string(accessGroup) }
        if wanted == Slot.grouping { return groupingValue }
        if wanted == Slot.none { return nil }
        var i = fields.startIndex
        while i < fields.endIndex {
            let index = Int(fields[i]), tag = fields[i + 1]
            i += 2
            let length = Int(NameListCodec.varint(fields, at: &i) ?? 0)
            if index == wanted { return NameListCodec.value(tag: tag, fields[i..<(i + length)]) }
            if index > wanted { break }
            i += length
        }
        return order == Slot.synchronizable ? .bool(false) : nil
    }

    /// The stored UTF-8 bytes of `attribute`'s string value when it is the one field the entry
    /// stores (a generic password's account, not synchronizable: most entries), without making
    /// a value; nil otherwise. The bytes are valid UTF-8, checked when the chunk was decoded.
    public func soleString(_ attribute: Attribute) -> ArraySlice<UInt8>? {
        let slots = Slot.byClass[itemClass.tableIndex]
        let order = attribute.order
        guard order >= 0, order < slots.count, fields.count >= 3, Int(fields[fields.startIndex]) == slots[order],
            fields[fields.startIndex + 1] == 1
        else { return nil }
        var i = fields.startIndex + 2
        guard let length = NameListCodec.varint(fields, at: &i), length == UInt64(fields.endIndex - i) else {
            return nil
        }
        return fields[i...]
    }

    /// The entry as an attribute set (the list's group and grouping value included).
    public var nameAttributes: Attributes {
        var out: Attributes = [Schema.accessGroup: .string(accessGroup)]
        if let groupingValue { out[Schema.groupingAttribute(of: itemClass)] = groupingValue }
        for attribute in Self.nameAttributes(of: itemClass) { out[attribute] = self[attribute] }
        return out
    }

    /// The same item named alike: id, class, group and the stored fields (the grouping value is
    /// the list's, known from where it was read).
    public func sameName(as other: NameListEntry) -> Bool {
        id == other.id && itemClass == other.itemClass && accessGroup.utf8.elementsEqual(other.accessGroup.utf8)
            && fields.elementsEqual(other.fields)
    }

    public var description: String { "entry \(id) (\(itemClass.rawValue), \(fields.count) bytes of name)" }
}

/// The plaintext of one chunk of a name list (vault format 5), before it is sealed. A directory's
/// list is cut into chunks of at most `chunkBytes` encoded bytes, so a name change re-seals one
/// small chunk (about one SQLite page) and 10,000 entries are a few dozen AEAD opens.
///
/// Layout: version byte, then per entry: its id (the first entry's as i64 little-endian, each
/// next one as the varint of its difference from the one before, at least 1), the varint length
/// of its fields, and its fields (per field: the attribute's index in the class's name
/// attributes, strictly increasing; the value's type tag and varint length and bytes as
/// `AttributeCodec` encodes values). Decoding is strict: anything unexpected is errSecDecode.
enum NameListCodec {
    static let version: UInt8 = 1
    /// Encoded bytes per chunk at most (an entry larger than this alone is a chunk by itself):
    /// with the AEAD's 40 bytes and SQLite's row overhead, one chunk fits a 4 KiB page.
    static let chunkBytes = 3_800

    static func appendVarint(_ value: UInt64, to out: inout [UInt8]) {
        var v = value
        while v >= 0x80 {
            out.append(UInt8(v & 0x7F) | 0x80)
            v >>= 7
        }
        out.append(UInt8(v))
    }

    /// The varint at `i` (moved past it), or nil when it runs off the end or exceeds 63 bits.
    static func varint<C: Collection<UInt8>>(_ bytes: C, at i: inout C.Index) -> UInt64? {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while i < bytes.endIndex, shift < 63 {
            let b = bytes[i]
            i = bytes.index(after: i)
            value |= UInt64(b & 0x7F) << shift
            if b & 0x80 == 0 { return value }
            shift += 7
        }
        return nil
    }

    /// A stored value (checked when its chunk was decoded). An ASCII string, the common case, is
    /// made without `String(validating:)`, whose generic metadata lookup was a tenth of a listing.
    static func value(tag: UInt8, _ bytes: ArraySlice<UInt8>) -> AttributeValue? {
        guard tag == 1, isASCII(bytes) else { return AttributeCodec.value(tag: tag, bytes) }
        return .string(bytes.withUnsafeBufferPointer { String(decoding: $0, as: UTF8.self) })
    }

    static func isASCII(_ bytes: ArraySlice<UInt8>) -> Bool {
        bytes.withUnsafeBufferPointer { buffer in buffer.allSatisfy { $0 < 0x80 } }
    }

    static func encode(_ entries: [NameListEntry]) -> [UInt8] {
        var out: [UInt8] = [version]
        var previous: Int64?
        for entry in entries {
            append(entry, after: previous, to: &out)
            previous = entry.id
        }
        return out
    }

    private static func append(_ entry: NameListEntry, after previous: Int64?, to out: inout [UInt8]) {
        if let previous {
            appendVarint(UInt64(bitPattern: entry.id &- previous), to: &out)
        } else {
            withUnsafeBytes(of: entry.id.littleEndian) { out += $0 }
        }
        appendVarint(UInt64(entry.fields.count), to: &out)
        out += entry.fields
    }

    /// The entries (in id order) cut into chunks of at most `chunkBytes`, each encoded, with the
    /// id of its first entry.
    static func chunks(_ entries: [NameListEntry], chunkBytes: Int = chunkBytes) -> [(firstID: Int64, bytes: [UInt8])] {
        var chunks: [(firstID: Int64, bytes: [UInt8])] = []
        var current: [UInt8] = [version]
        var firstID: Int64 = 0
        var previous: Int64?
        for entry in entries.sorted(by: { $0.id < $1.id }) {
            // The largest an entry can be: a full id, a 10-byte varint and its fields.
            if current.count > 1 && current.count + 18 + entry.fields.count > chunkBytes {
                chunks.append((firstID, current))
                current = [version]
                previous = nil
            }
            if previous == nil { firstID = entry.id }
            append(entry, after: previous, to: &current)
            previous = entry.id
        }
        if current.count > 1 { chunks.append((firstID, current)) }
        return chunks
    }

    /// The entries of a chunk of `itemClass`'s list of `accessGroup`, in id order, each with
    /// `groupingValue`.
    static func decode(
        _ bytes: [UInt8], itemClass: ItemClass, accessGroup: String, groupingValue: AttributeValue? = nil
    ) throws -> [NameListEntry] {
        var out: [NameListEntry] = []
        try forEachEntry(bytes, itemClass: itemClass, accessGroup: accessGroup, groupingValue: groupingValue) {
            out.append($0)
        }
        return out
    }

    /// Each entry of a chunk, in id order, handed to `body` as it is decoded (a listing spells
    /// its names from them without an array of entries). Throws at the first malformed entry,
    /// after `body` has seen the ones before it: a caller that keeps what it was given drops it
    /// on a throw.
    static func forEachEntry(
        _ bytes: [UInt8], itemClass: ItemClass, accessGroup: String, groupingValue: AttributeValue? = nil,
        _ body: (NameListEntry) throws -> Void
    ) throws {
        let bad = KeychainError(.decode, "a name list is malformed")
        guard bytes.first == version else { throw bad }
        // The types by index, read once a chunk (an `Attribute` copied per field was a tenth of
        // decoding a listing).
        let types = NameListEntry.nameAttributes(of: itemClass).map(\.type)
        var i = 1
        var previous: Int64?
        while i < bytes.count {
            let id: Int64
            if let previous {
                guard let delta = varint(bytes, at: &i), delta >= 1, delta <= UInt64(Int64.max) else { throw bad }
                let (next, overflow) = previous.addingReportingOverflow(Int64(delta))
                guard !overflow else { throw bad }
                id = next
            } else {
                guard i + 8 <= bytes.count else { throw bad }
                id = bytes[i..<(i + 8)].reversed().reduce(Int64(0)) { ($0 << 8) | Int64($1) }
                i += 8
            }
            guard let length = varint(bytes, at: &i), length <= UInt64(bytes.count - i) else { throw bad }
            let fields = bytes[i..<(i + Int(length))]
            i += Int(length)
            // Each field: a name attribute (in increasing order), a value that fits its type.
            var j = fields.startIndex
            var lastIndex = -1
            while j < fields.endIndex {
                guard fields.endIndex - j >= 2 else { throw bad }
                let index = Int(fields[j]), tag = fields[j + 1]
                j += 2
                guard index > lastIndex, index < types.count, let n = varint(fields, at: &j),
                    n <= UInt64(fields.endIndex - j)
                else { throw bad }
                // An ASCII string needs no value made to be known valid.
                let bytes = fields[j..<(j + Int(n))]
                let asciiString = tag == 1 && types[index] == .string && isASCII(bytes)
                if !asciiString {
                    guard let value = AttributeCodec.value(tag: tag, bytes), value.fits(types[index]) else {
                        throw bad
                    }
                }
                lastIndex = index
                j += Int(n)
            }
            try body(
                NameListEntry(
                    id: id, itemClass: itemClass, accessGroup: accessGroup, groupingValue: groupingValue,
                    fields: fields))
            previous = id
        }
    }
}
