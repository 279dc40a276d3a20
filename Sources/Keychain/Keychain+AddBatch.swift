import FoundationEssentials
import Glibc
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
            do { return try prepareNew(item, caller: call.caller, keys: keys) } catch let e as KeychainError {
                throw KeychainError(
                    e.status, "\(e.message) (item \(index + 1) of \(items.count) in the batch; none was added)")
            }
        }
        return try writeTransaction(keys: keys.manifest, origin: call.caller.origin) { vault in
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

/// Every item of a batch the core refused, by its place in the batch; nothing of the batch was
/// stored.
public struct BatchRefused: Error, Sendable {
    public let refusals: [(index: Int, error: KeychainError)]
    public init(refusals: [(index: Int, error: KeychainError)]) { self.refusals = refusals }
}

extension Keychain {
    /// An import's store: every item of `items` in one write transaction, each added, or with
    /// `updateExisting` (add-or-update, `addOrUpdate`'s rules) updated when an item with its
    /// primary key exists, against the vault or an earlier item of the batch. Unlike `addBatch`
    /// it does not stop at the first refusal: every item is tried, and if any is refused (a
    /// duplicate without `updateExisting`, a value too large, an invalid attribute) nothing is
    /// stored and `BatchRefused` names each one. Other failures (locked, I/O) throw as they are.
    /// `progress` is told how many items are done, inside the transaction. Returns, per item,
    /// whether it was added (true) or updated (false). An update of an item that needs user
    /// presence asks for it inside the transaction, as `rename` does (imports rarely meet one).
    public func storeBatch(
        _ items: [NewItem], updateExisting: Bool, caller callerArgument: Caller? = nil,
        progress: ((Int) -> Void)? = nil
    ) throws -> [Bool] {
        guard !items.isEmpty else { return [] }
        let call = callContext(callerArgument)
        let keys = try call.unlockedKeys()
        var refusals: [(index: Int, error: KeychainError)] = []
        var prepared: [(itemClass: ItemClass, attributes: Attributes, data: [UInt8], classKey: SecureBytes)?] = []
        prepared.reserveCapacity(items.count)
        for (index, item) in items.enumerated() {
            do { prepared.append(try prepareNew(item, caller: call.caller, keys: keys)) } catch let error
                as KeychainError
            {
                refusals.append((index, error))
                prepared.append(nil)
            }
        }
        let stop = refusals
        // The write transaction passes on only keychain errors: the refusals leave it in `found`.
        var found: [(index: Int, error: KeychainError)] = []
        do {
            return try storeBatchTransaction(
                items, prepared, refusals: stop, updateExisting: updateExisting, call: call, keys: keys,
                progress: progress, found: &found)
        } catch is KeychainError where !found.isEmpty {
            throw BatchRefused(refusals: found.sorted { $0.index < $1.index })
        }
    }

    private func storeBatchTransaction(
        _ items: [NewItem],
        _ prepared: [(itemClass: ItemClass, attributes: Attributes, data: [UInt8], classKey: SecureBytes)?],
        refusals stop: [(index: Int, error: KeychainError)], updateExisting: Bool, call: CallContext, keys: Keys,
        progress: ((Int) -> Void)?, found: inout [(index: Int, error: KeychainError)]
    ) throws -> [Bool] {
        try writeTransaction(keys: keys.manifest, origin: call.caller.origin) { vault in
            var refused = stop
            var added: [Bool] = []
            added.reserveCapacity(prepared.count)
            for (index, entry) in prepared.enumerated() {
                defer { progress?(index + 1) }
                guard let item = entry else {
                    added.append(false)
                    continue
                }
                let id = try vault.nextItemID()
                let row = try seal(
                    id: id, itemClass: item.itemClass, attributes: item.attributes, data: item.data, version: 1,
                    keys: keys, classKey: item.classKey)
                do {
                    // A refused insert changes nothing (the store refuses before it writes).
                    try vault.insert(row, id: id)
                    added.append(true)
                } catch StoreError.duplicate {
                    guard updateExisting else {
                        refused.append(
                            (
                                index,
                                KeychainError(
                                    .duplicateItem, "\(Self.describe(item.itemClass, item.attributes)) already exists")
                            ))
                        added.append(false)
                        continue
                    }
                    let keyAttributes = Set(Schema.primaryKey(of: item.itemClass))
                    do {
                        try vault.savepoint {
                            try update(
                                Query(item.itemClass, item.attributes.filter { keyAttributes.contains($0.key) }),
                                attributes: items[index].attributes.filter { !keyAttributes.contains($0.key) },
                                data: items[index].data, in: call, within: vault)
                        }
                    } catch let error as KeychainError {
                        refused.append((index, error))
                    }
                    added.append(false)
                }
            }
            // Thrown inside the transaction: it is rolled back, nothing of the batch is stored.
            guard refused.isEmpty else {
                found = refused
                throw KeychainError(refused[0].error.status, "\(refused.count) items of the batch refused")
            }
            return added
        }
    }

    /// A batch's new item with every rule that needs no row applied (the class, the attributes'
    /// defaults and checks, the class key at hand): a bad item costs no write.
    private func prepareNew(_ item: NewItem, caller: Caller, keys: Keys) throws -> (
        itemClass: ItemClass, attributes: Attributes, data: [UInt8], classKey: SecureBytes
    ) {
        guard item.itemClass != .identity else {
            throw KeychainError(.param, "identities cannot be added directly: add the certificate and the private key")
        }
        let (attributes, data) = try newItem(item.itemClass, item.attributes, data: item.data, caller: caller)
        let classKey = try classKey(
            Self.accessibility(of: attributes), keys: keys, for: Self.describe(item.itemClass, attributes))
        return (item.itemClass, attributes, data, classKey)
    }
}
