import CSQLite
import Synchronization

/// The wal-index header of a WAL database (`kcfs_wal_index_header`): equal headers, each read
/// whole, mean that no transaction committed between the two reads, by any connection of any
/// process. SQLite's own readers trust their page cache on exactly this test.
struct WalIndexHeader: Equatable {
    private var words: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0)

    /// The header now, from SQLite's mapping of the wal-index at `region`; nil while a writer
    /// is changing it (or it is not initialised): then nothing may be reused.
    static func read(_ region: UnsafeRawPointer) -> WalIndexHeader? {
        var header = WalIndexHeader()
        let whole = withUnsafeMutableBytes(of: &header.words) {
            kcfs_wal_index_header(region, $0.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        return whole == 1 ? header : nil
    }

    static func == (a: WalIndexHeader, b: WalIndexHeader) -> Bool { a.words == b.words }
}

/// Rows with their data as the reading connection returned them, kept while the wal-index
/// header is the one read *before* they were read: what `VaultStore.currentItem(id:)` answers
/// instead of a read transaction when nothing has committed since. Every open of a file reads
/// its row, and the read transaction (two `fcntl` locks on the shared memory, the statement,
/// the row's copies) was the largest part of an open's own work.
///
/// Why a kept row is the row SQLite would return: the header was read whole before the row
/// was read, so the row is of that state or a later one; a later one means a commit came in
/// between, which changed the header, so the row is never used. While the header is equal,
/// no transaction has committed, and the state is the one the row was read from. A checkpoint
/// moves pages without changing what they say, and a WAL restart changes the header's salts.
///
/// Holds ciphertext only (the sealed rows, as on disk and in SQLite's page cache), at most
/// `capacity` rows and `maxBytes` in all; a header change drops every row at once.
final class RowSnapshots: Sendable {
    static let capacity = 256
    static let maxBytes = 1 << 20
    /// A row larger than this (a big certificate chain) is not kept.
    static let maxRowBytes = 64 << 10

    private struct State {
        var header: WalIndexHeader?
        var rows: [Int64: StoredItem] = [:]
        var bytes = 0
    }

    private let state = Mutex(State())

    /// The row kept for `id`, if the header is still `header`.
    func row(_ id: Int64, unchangedSince header: WalIndexHeader) -> StoredItem? {
        state.withLock { s in s.header == header ? s.rows[id] : nil }
    }

    /// Keeps `row`, read after the header was `header`.
    func keep(_ row: StoredItem, readAfter header: WalIndexHeader) {
        let size = row.sealedAttributes.count + row.wrappedItemKey.count + row.sealedData.count
        guard size <= Self.maxRowBytes else { return }
        state.withLock { s in
            if s.header != header || s.rows.count >= Self.capacity || s.bytes + size > Self.maxBytes {
                s.rows.removeAll(keepingCapacity: true)
                s.bytes = 0
                s.header = header
            }
            if let old = s.rows.updateValue(row, forKey: row.id) {
                s.bytes -= old.sealedAttributes.count + old.wrappedItemKey.count + old.sealedData.count
            }
            s.bytes += size
        }
    }
}
