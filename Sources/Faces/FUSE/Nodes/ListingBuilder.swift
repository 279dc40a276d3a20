import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import SystemPackage

/// What `listItems` makes of a service/server directory's name list as the core hands it over
/// (`Keychain.forEachNameListEntry`): the entries (name, inode) and where each chunk put its
/// names, taking a kept chunk's names from the directory's previous listing.
///
/// One value the core's callbacks change through one mutating call each (a chunk, an entry), not
/// several variables captured by closures: each captured variable was checked for exclusive
/// access at run time on every entry. The same code runs once at mount on a made-up list
/// (`KeychainFileSystem.warmUp`), so a daemon's first listing does not pay Swift's first use of it.
struct ListingBuilder {
    let itemClass: ItemClass
    let spelling: String
    /// A service directory is spelled from the service alone: one check for the whole list.
    let sameForAll: Bool
    let leaves: PathCodec.ListedLeaves
    let previous: ListingCache.Listing?
    let kept: [[UInt8]: ListingCache.Chunk]
    private(set) var made = ListingCache.Made(entries: [])
    /// While every chunk so far is kept, in the place it had, the listing is the start of the
    /// previous one (`shared` entries of it), not copied: after a change elsewhere in the vault
    /// the new listing shares the previous one's array. Copied at the first chunk that differs.
    private var shared = 0
    private var copied = false
    /// The chunk being decoded: its entry, where its names start in `made.entries`, the ids of
    /// its first and last entries (every entry, those of other directories too).
    private var open: OpenChunk?
    /// The list's chunks (the core says how many before the first): with no previous listing,
    /// the entries are reserved from the first chunk's count, so that 10,000 names are not
    /// copied from array to array (and onto fresh pages) as it grows.
    private var chunkCount = 0
    private var reserved = false

    private struct OpenChunk {
        let entry: [UInt8]
        let start: Int
        var first = Int64.max
        var last = Int64.min
    }

    /// `groups`: the caller's access groups (a previous listing made for others shares nothing).
    init(
        _ itemClass: ItemClass, spelling: String, sameForAll: Bool, groups: [String], previous: ListingCache.Listing?
    ) {
        self.itemClass = itemClass
        self.spelling = spelling
        self.sameForAll = sameForAll
        self.leaves = PathCodec.ListedLeaves(itemClass)
        self.previous = previous
        self.kept = previous?.groups == groups ? previous?.chunks ?? [:] : [:]
    }

    /// The number of chunks of the list (one access group).
    mutating func expect(chunks: Int) { chunkCount = chunks }

    /// The ids the previous listing decoded from a chunk with this keyed entry, if it kept it.
    func keptChunk(_ entry: [UInt8]) -> (first: Int64, last: Int64)? { kept[entry].map { ($0.first, $0.last) } }

    private mutating func copyShared() {
        guard !copied else { return }
        copied = true
        made.entries.reserveCapacity(previous?.entries.count ?? 0)
        if let previous, shared > 0 { made.entries.append(contentsOf: previous.entries[0..<shared]) }
    }

    private mutating func close() {
        guard let o = open else { return }
        open = nil
        guard o.first <= o.last else { return }
        made.chunks[o.entry] = ListingCache.Chunk(first: o.first, last: o.last, range: o.start..<made.entries.count)
        if !reserved && previous == nil && chunkCount > 1 {
            reserved = true
            made.entries.reserveCapacity(made.entries.count * chunkCount)
        }
    }

    /// Before each chunk: its keyed entry, and whether the core kept it (no entries follow).
    mutating func chunk(_ entry: [UInt8], isKept: Bool) throws {
        close()
        guard isKept else {
            copyShared()
            open = OpenChunk(entry: entry, start: made.entries.count)
            return
        }
        // The core keeps only what `keptChunk` said was here.
        guard let chunk = kept[entry], let previous else { throw Errno.ioError }
        if !copied && chunk.range.lowerBound == shared {
            shared = chunk.range.upperBound
            made.chunks[entry] = chunk
            return
        }
        copyShared()
        let start = made.entries.count
        made.entries.append(contentsOf: previous.entries[chunk.range])
        made.chunks[entry] = ListingCache.Chunk(first: chunk.first, last: chunk.last, range: start..<made.entries.count)
    }

    /// An entry of the list, spelled from its stored bytes (its values decoded only where the
    /// spelling needs them).
    mutating func add(_ entry: NameListEntry) {
        // Several groups' lists (merged by id) come with no chunk: nothing is shared then.
        if !copied { copyShared() }
        if open != nil {
            if open!.first == Int64.max { open!.first = entry.id }
            open!.last = entry.id
        }
        if !sameForAll {
            guard let directory = PathCodec.directory(of: itemClass, entry), PathCodec.same(directory, spelling)
            else { return }
        }
        made.entries.append(
            DirectoryEntry(name: leaves.leaf(entry), ino: Inode.item(itemClass, id: entry.id), isDirectory: false))
    }

    /// The listing: when every chunk was kept in its place, the previous listing's array itself.
    mutating func finish() -> ListingCache.Made {
        close()
        if !copied, let previous {
            made.entries = shared == previous.entries.count ? previous.entries : Array(previous.entries[0..<shared])
        }
        // The first chunk's count times the chunks overshoots when later chunks hold fewer (longer
        // or deleted names): the cache keeps the array, so not a buffer many times its entries.
        if made.entries.capacity > 2 * made.entries.count + 1_024 {
            var fitted: [DirectoryEntry] = []
            fitted.reserveCapacity(made.entries.count)
            fitted.append(contentsOf: made.entries)
            made.entries = fitted
        }
        return made
    }
}

extension KeychainFileSystem {
    /// Run once before the mount is announced usable: Swift's first use of the listing path (type
    /// metadata, protocol conformances, one-time initialisations, the node casts every request
    /// makes) and the store's (the name lists' statements prepared, their bucket table checked
    /// against the manifest for this state of the vault), paid here instead of by the first
    /// readdir. It keeps nothing: a made-up list in memory (a listing made, then made again from
    /// its kept chunks), and the `default` group's list of a service read and dropped.
    func warmUp() {
        let groups = [Caller.defaultAccessGroup]
        let service = "keychainfs-warm-up"
        let entries = (0..<3).map {
            NameListEntry(
                id: Int64($0 + 1), .genericPassword,
                attributes: [Schema.service: .string(service), Schema.account: .string("acct\($0)")])
        }
        var builder = ListingBuilder(
            .genericPassword, spelling: service, sameForAll: true, groups: groups, previous: nil)
        builder.expect(chunks: 2)
        try? builder.chunk([1], isKept: false)
        builder.add(entries[0])
        try? builder.chunk([2], isKept: false)
        for entry in entries.dropFirst() { builder.add(entry) }
        let made = builder.finish()
        let listing = ListingCache.Listing(stamp: [0], groups: groups, entries: made.entries, chunks: made.chunks)
        _ = listing.ino(named: "acct1")
        let cache = ListingCache(maxEntries: 8)
        cache.store(listing, for: Inode.root)
        _ = cache.listing(Inode.root)
        _ = DirectoryListing(ino: Inode.root, parent: Inode.root, entries: listing.entries)[2]
        var again = ListingBuilder(
            .genericPassword, spelling: service, sameForAll: true, groups: groups, previous: listing)
        for chunk in [[UInt8(1)], [2]] where again.keptChunk(chunk) != nil { try? again.chunk(chunk, isKept: true) }
        _ = again.finish()
        // The store's side, through the door every process may use (nothing audited).
        let everyone = access.everyoneSession()
        var read = ListingBuilder(.genericPassword, spelling: service, sameForAll: true, groups: groups, previous: nil)
        _ = try? everyone.changeStamp()
        try? everyone.forEachNameListEntry(
            .genericPassword, grouping: .string(service), expecting: { read.expect(chunks: $0) },
            keptChunk: { read.keptChunk($0) }, chunk: { try read.chunk($0, isKept: $1) }
        ) { read.add($0) }
        _ = read.finish()
        // Each node type against each operation's protocol: the casts fill the runtime's
        // conformance cache (a miss scans every conformance of the binary).
        let nodes: [any Node] =
            [RootNode()] + TopLevel.directories.map { $0 as any Node } + [
                GroupDirectory(itemClass: .genericPassword, spelling: service, ino: Inode.root),
                GroupDirectory(itemClass: .internetPassword, spelling: service, ino: Inode.root),
                ItemNode(itemClass: .genericPassword, id: 1),
            ]
        for node in nodes {
            _ = node as? any NodeLookuper
            _ = node as? any NodeReaddirer
            _ = node as? any NodeCreater
            _ = node as? any NodeMkdirer
            _ = node as? any NodeRmdirer
            _ = node as? any NodeUnlinker
            _ = node as? any NodeOpener
            _ = node as? any NodeTruncater
            _ = node as? any NodeWithItemAttributes
            _ = node as? any ItemDirectory
        }
    }
}
