import FoundationEssentials

/// One item row as stored: opaque ciphertext plus keyed-hash indexes. The store never sees
/// attribute values or secrets; `itemClass` (genp, inet, …) is the only plaintext field.
public struct StoredItem: Sendable, Equatable {
    public var id: Int64
    public var itemClass: String
    /// Keyed hash of the full primary key: unique, used for point lookups and duplicates.
    public var primaryIndex: [UInt8]
    /// Keyed hash of the first path component (service, server, label): for directory listings.
    public var secondaryIndex: [UInt8]
    /// Bumped on every change; the manifest covers it, so an old row replayed is detected.
    public var version: Int64
    /// The version at which the data and item key were last sealed (their AD binds it).
    public var dataGeneration: Int64
    public var sealedAttributes: [UInt8]
    public var wrappedItemKey: [UInt8]
    public var sealedData: [UInt8]
    /// Length of the sealed data column, known even when the data itself was not loaded.
    public var sealedDataLength: Int
    /// Keyed hashes of the item's Secret Service attribute pairs (the `attr_index` rows), set
    /// by the core whenever it seals the attributes. nil: not read, and on `replace` the
    /// stored tags are kept (they change only with the attributes or the index key).
    public var attributeTags: [[UInt8]]?

    public init(
        id: Int64 = 0, itemClass: String, primaryIndex: [UInt8], secondaryIndex: [UInt8],
        version: Int64, dataGeneration: Int64, sealedAttributes: [UInt8],
        wrappedItemKey: [UInt8], sealedData: [UInt8]
    ) {
        self.id = id
        self.itemClass = itemClass
        self.primaryIndex = primaryIndex
        self.secondaryIndex = secondaryIndex
        self.version = version
        self.dataGeneration = dataGeneration
        self.sealedAttributes = sealedAttributes
        self.wrappedItemKey = wrappedItemKey
        self.sealedData = sealedData
        self.sealedDataLength = sealedData.count
    }
}
