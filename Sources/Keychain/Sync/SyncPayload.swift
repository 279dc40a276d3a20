import FoundationEssentials
import Glibc
import KeychainCrypto

/// What a sync record's blob holds once opened (SyncRecord.swift seals it): the item's class,
/// its attributes as stored (AttributeCodec, every attribute, the dates and the derived ones
/// too, so the other device stores the same item, byte for byte of its attributes), and its
/// data (with the extras a face keeps beside a password). A tombstone holds the class and the
/// primary key only, so the device that applies it finds the item by its primary key.
struct SyncPayload {
    var itemClass: ItemClass
    var attributes: Attributes
    var data: [UInt8]

    static let version: UInt8 = 1

    func encoded() -> [UInt8] {
        [Self.version]
            + Framing.frame([Framing.text(itemClass.rawValue), AttributeCodec.encode(attributes), data])
    }

    static func decode(_ bytes: [UInt8]) throws -> SyncPayload {
        let bad = KeychainError(.decode, "a sync record's payload is malformed")
        guard bytes.first == version, let parts = Framing.parts(bytes.dropFirst()), parts.count == 3,
            let itemClass = ItemClass(rawValue: String(decoding: parts[0], as: UTF8.self)),
            [.genericPassword, .internetPassword, .certificate, .key].contains(itemClass)
        else { throw bad }
        let attributes = try AttributeCodec.decode(parts[1], itemClass: itemClass)
        return SyncPayload(itemClass: itemClass, attributes: attributes, data: parts[2])
    }

    /// The primary key's attributes of `attributes` (with add's defaults), what a tombstone
    /// carries.
    static func primaryKey(_ itemClass: ItemClass, _ attributes: Attributes) -> Attributes {
        var key: Attributes = [:]
        for attribute in Schema.primaryKey(of: itemClass) {
            key[attribute] = attributes[attribute] ?? AttributeValue.defaultValue(for: attribute.type)
        }
        return key
    }
}

extension Framing {
    /// The parts of a `frame`, or nil when the bytes are not one.
    static func parts(_ bytes: ArraySlice<UInt8>) -> [[UInt8]]? {
        var parts: [[UInt8]] = []
        var i = bytes.startIndex
        while i < bytes.endIndex {
            guard bytes.endIndex - i >= 4 else { return nil }
            let n = Int(bytes[i..<(i + 4)].reversed().reduce(UInt32(0)) { ($0 << 8) | UInt32($1) })
            i += 4
            guard n <= bytes.endIndex - i else { return nil }
            parts.append(Array(bytes[i..<(i + n)]))
            i += n
        }
        return parts
    }
}

extension Keychain {
    /// The primary key's message, as `primaryIndex` hashes it (the domain, the class, every
    /// primary-key attribute in schema order with add's defaults, type-tagged and framed),
    /// without the vault's index key: what a sync record id is a keyed hash of, under the
    /// group's record-id key instead, so every device of the group names the item alike.
    static func primaryKeyMessage(_ itemClass: ItemClass, _ attributes: Attributes) -> [UInt8] {
        var parts: [[UInt8]] = [Framing.text("kcfs/pidx/v1"), Framing.text(itemClass.rawValue)]
        for key in Schema.primaryKey(of: itemClass) {
            let value = attributes[key] ?? AttributeValue.defaultValue(for: key.type)
            parts.append(AttributeCodec.encode([key: value]))
        }
        return Framing.frame(parts)
    }

    /// An item syncs when it is synchronizable and its protection class may leave the device
    /// (never a `…ThisDeviceOnly` one; the core refuses that pair at add, this is the guard).
    static func syncs(_ attributes: Attributes) -> Bool {
        guard case .bool(true)? = attributes[Schema.synchronizable] else { return false }
        return !accessibility(of: attributes).isThisDeviceOnly
    }
}
