import FoundationEssentials
import Glibc
import Keychain

/// One logged change as `watch` streams it (docs/service.md, "watch"): its sequence number,
/// operation, class, id and the mount's paths of the item (after it, or before it for a
/// removal; before it too for a rename). Never a secret: names only, and only those of the
/// access groups the watching caller is in.
public struct WireChange: Equatable, Sendable {
    public var seq: Int64
    public var kind: ItemChange.Kind
    public var itemClass: ItemClass
    public var id: Int64
    public var path: String
    public var oldPath: String?

    public init(seq: Int64, kind: ItemChange.Kind, itemClass: ItemClass, id: Int64, path: String, oldPath: String?) {
        self.seq = seq
        self.kind = kind
        self.itemClass = itemClass
        self.id = id
        self.path = path
        self.oldPath = oldPath
    }

    /// The operation's word, as `watch` prints it.
    public var operation: String { Self.word(kind) }

    public static func word(_ kind: ItemChange.Kind) -> String { kind.word }

    static let kinds: [ItemChange.Kind] = [.added, .changed, .renamed, .removed]
}

extension WireWriter {
    mutating func changes(last: Int64, _ changes: [WireChange]) {
        i64(last)
        u32(UInt32(changes.count))
        for change in changes {
            i64(change.seq)
            byte(UInt8(WireChange.kinds.firstIndex(of: change.kind)!))
            itemClass(change.itemClass)
            i64(change.id)
            string(change.path)
            if let old = presence(change.oldPath) { string(old) }
        }
    }
}

extension WireReader {
    mutating func changes(frame: Int) throws -> APIReply {
        let last = try i64()
        let n = Int(try u32())
        // Each change takes at least 30 bytes: a count beyond what the frame holds is a lie.
        guard n <= frame / 30 else { throw Self.bad }
        var out: [WireChange] = []
        out.reserveCapacity(n)
        for _ in 0..<n {
            let seq = try i64()
            let kind = Int(try byte())
            guard kind < WireChange.kinds.count else { throw Self.bad }
            let itemClass = try itemClass()
            let id = try i64()
            let path = try string()
            let oldPath = try optional { try $0.string() }
            out.append(
                WireChange(
                    seq: seq, kind: WireChange.kinds[kind], itemClass: itemClass, id: id, path: path, oldPath: oldPath))
        }
        return .changes(last: last, out)
    }
}
