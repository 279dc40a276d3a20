import Foundation

/// One entry of a directory's name list: an item id and the attributes its file name is spelled
/// from (the class's primary-key attributes other than the grouping one: the directory's value is
/// the list's, not the entry's). No size, no dates: a write of an item's data changes no entry.
public struct NameListEntry: Equatable, Sendable {
    public let id: Int64
    public let nameAttributes: Attributes

    public init(id: Int64, nameAttributes: Attributes) {
        self.id = id
        self.nameAttributes = nameAttributes
    }

    /// The entry an item's attributes give: its primary-key attributes but the grouping one.
    public init(id: Int64, _ itemClass: ItemClass, attributes: Attributes) {
        let grouping = Schema.groupingAttribute(of: itemClass)
        var name = Attributes()
        for key in Schema.primaryKey(of: itemClass) where key != grouping {
            if let value = attributes[key] { name[key] = value }
        }
        self.init(id: id, nameAttributes: name)
    }
}

/// The plaintext of one chunk of a name list (vault format 5), before it is sealed. A directory's
/// list is cut into chunks of at most `chunkBytes` encoded bytes, so a name change re-seals one
/// small chunk (about one SQLite page) and 10,000 entries are a few dozen AEAD opens.
///
/// Layout: version byte, then per entry: its id (i64 little-endian) and its name attributes
/// (u32 length + `AttributeCodec` bytes). Ids strictly increase within a chunk. Decoding is
/// strict: anything unexpected is errSecDecode.
enum NameListCodec {
    static let version: UInt8 = 1
    /// Encoded bytes per chunk at most (an entry larger than this alone is a chunk by itself):
    /// with the AEAD's 40 bytes and SQLite's row overhead, one chunk fits a 4 KiB page.
    static let chunkBytes = 3_800

    static func encode(_ entries: [NameListEntry]) -> [UInt8] {
        var out: [UInt8] = [version]
        for entry in entries { append(entry, to: &out) }
        return out
    }

    private static func append(_ entry: NameListEntry, to out: inout [UInt8]) {
        withUnsafeBytes(of: entry.id.littleEndian) { out += $0 }
        let name = AttributeCodec.encode(entry.nameAttributes)
        withUnsafeBytes(of: UInt32(name.count).littleEndian) { out += $0 }
        out += name
    }

    /// The entries (in id order) cut into chunks of at most `chunkBytes`, each encoded, with the
    /// id of its first entry.
    static func chunks(_ entries: [NameListEntry], chunkBytes: Int = chunkBytes) -> [(firstID: Int64, bytes: [UInt8])] {
        var chunks: [(firstID: Int64, bytes: [UInt8])] = []
        var current: [UInt8] = [version]
        var firstID: Int64 = 0
        for entry in entries.sorted(by: { $0.id < $1.id }) {
            var one: [UInt8] = []
            append(entry, to: &one)
            if current.count > 1 && current.count + one.count > chunkBytes {
                chunks.append((firstID, current))
                current = [version]
            }
            if current.count == 1 { firstID = entry.id }
            current += one
        }
        if current.count > 1 { chunks.append((firstID, current)) }
        return chunks
    }

    static func decode(_ bytes: [UInt8], itemClass: ItemClass) throws -> [NameListEntry] {
        let bad = KeychainError(.decode, "a name list is malformed")
        guard bytes.first == version else { throw bad }
        var out: [NameListEntry] = []
        var i = 1
        func int(_ n: Int) throws -> UInt64 {
            guard i + n <= bytes.count else { throw bad }
            defer { i += n }
            return bytes[i..<(i + n)].reversed().reduce(UInt64(0)) { ($0 << 8) | UInt64($1) }
        }
        while i < bytes.count {
            let id = Int64(bitPattern: try int(8))
            let length = Int(try int(4))
            guard length <= bytes.count - i, out.last.map({ $0.id < id }) ?? true else { throw bad }
            let name = try AttributeCodec.decode(Array(bytes[i..<(i + length)]), itemClass: itemClass)
            i += length
            out.append(NameListEntry(id: id, nameAttributes: name))
        }
        return out
    }
}
