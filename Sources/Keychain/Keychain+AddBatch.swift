import Foundation
import KeychainCrypto
import KeychainStore

// Many SecItemAdds in one write transaction: bulk population (the benchmark's vaults; later
// the importers) at one durable commit per batch instead of one per item.

/// One item of a batch add: what `Keychain.add` takes.
public struct NewItem: Sendable {
    public let itemClass: ItemClass
    public let attributes: Attributes
    public let data: [UInt8]

    public init(_ itemClass: ItemClass, _ attributes: Attributes, data: [UInt8]) {
        self.itemClass = itemClass
        self.attributes = attributes
        self.data = data
    }
}

extension Keychain {
    /// SecItemAdd of every item of `items` in one write transaction: all of them are stored,
    /// or (on the first item refused) none. Each item gets every rule of `add` (validation,
    /// size, system defaults, entitlement, protection class, the class key it needs); a
    /// duplicate, against the vault or against an earlier item of the same batch, is
    /// errSecDuplicateItem as `add` says it, naming its place in the batch. Returns the stored
    /// items (attributes as stored, no data), in order.
    @discardableResult
    public func addBatch(_ items: [NewItem], caller callerArgument: Caller? = nil) throws -> [KeychainItem] {
        guard !items.isEmpty else { return [] }
        let call = callContext(callerArgument)
        let keys = try call.unlockedKeys()
        // Every rule that needs no row is applied before the transaction: a bad item costs no write.
        let prepared = try items.enumerated().map { index, item in
            do {
                guard item.itemClass != .identity else {
                    throw KeychainError(
                        .param, "identities cannot be added directly: add the certificate and the private key")
                }
                let (attributes, data) = try newItem(
                    item.itemClass, item.attributes, data: item.data, caller: call.caller)
                let protection = Self.accessibility(of: attributes)
                let classKey = try classKey(protection, keys: keys, for: Self.describe(item.itemClass, attributes))
                return (itemClass: item.itemClass, attributes: attributes, data: data, classKey: classKey)
            } catch let e as KeychainError {
                throw KeychainError(
                    e.status, "\(e.message) (item \(index + 1) of \(items.count) in the batch; none was added)")
            }
        }
        return try writeTransaction(keys: keys.manifest) { vault in
            try prepared.enumerated().map { index, item in
                let id = try vault.nextItemID()
                let row = try seal(
                    id: id, itemClass: item.itemClass, attributes: item.attributes, data: item.data, version: 1,
                    keys: keys, classKey: item.classKey)
                do { try vault.insert(row, id: id) } catch StoreError.duplicate {
                    throw KeychainError(
                        .duplicateItem,
                        "\(Self.describe(item.itemClass, item.attributes)) already exists (item \(index + 1) of \(prepared.count) in the batch; none was added)"
                    )
                }
                return KeychainItem(
                    id: id, itemClass: item.itemClass, attributes: item.attributes, data: nil,
                    dataLength: item.data.count)
            }
        }
    }
}
