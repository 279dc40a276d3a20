import FoundationEssentials
import Glibc
import Keychain

// The vault verbs' parts of the API socket's messages (APIWire.swift has the requests and
// replies): an import's new items, a refused batch's refusals and an access policy, and how
// the reader takes them.

/// One item of a `storeBatch` as it crosses the socket (`NewItem` is not Equatable).
public struct WireNewItem: Equatable, Sendable {
    public var item: NewItem
    public init(_ item: NewItem) { self.item = item }

    public static func == (a: WireNewItem, b: WireNewItem) -> Bool {
        a.item.itemClass == b.item.itemClass && a.item.attributes == b.item.attributes && a.item.data == b.item.data
    }
}

/// One refused item of a `storeBatch`: its place in the batch, the core's status and message.
public struct WireRefusal: Equatable, Sendable {
    public var index: Int
    public var status: KeychainStatus
    public var message: String
    public init(index: Int, status: KeychainStatus, message: String) {
        self.index = index
        self.status = status
        self.message = message
    }
}

extension WireReader {
    /// An access policy: its encoded bytes, which must decode (a policy the core cannot read
    /// is never passed on).
    mutating func policy() throws -> AccessPolicy {
        guard let policy = AccessPolicy(encoded: try part()) else { throw Self.bad }
        return policy
    }

    /// A `storeBatch` request's body: the update flag, the count, the items.
    mutating func storeBatch(frame: Int) throws -> APIRequest {
        let updateExisting = try flag()
        let n = Int(try u32())
        // Each item takes at least 13 bytes (a class name, empty attributes, empty data).
        guard n <= frame / 13 else { throw Self.bad }
        var items: [WireNewItem] = []
        items.reserveCapacity(n)
        for _ in 0..<n {
            let c = try itemClass()
            let a = try attributes(c)
            items.append(WireNewItem(NewItem(c, a, data: try part())))
        }
        return .storeBatch(items, updateExisting: updateExisting)
    }

    mutating func refusal() throws -> WireRefusal {
        let index = try i64()
        guard index >= 0, index <= Int64(Int32.max) else { throw Self.bad }
        let raw = try i64()
        guard let status = Int32(exactly: raw) else { throw Self.bad }
        return WireRefusal(index: Int(index), status: KeychainStatus(rawValue: status), message: try string())
    }
}
