import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import SystemPackage

// The core queries the directory nodes share: which items a directory holds, and which item
// a file name denotes. Names are spelled and parsed by PathCodec; visibility and matching are
// the core's.
extension KeychainFileSystem {
    /// Items visible in a service/server directory.
    func items(inDirectory itemClass: ItemClass, _ spelling: String, caller: Caller) throws -> [KeychainItem] {
        let grouping = Schema.groupingAttribute(of: itemClass)
        var query = Query(itemClass, matchLimit: .all, synchronizableAny: true)
        if let attrs = PathCodec.parseDirectory(itemClass, spelling), let value = attrs[grouping] {
            query.attributes[grouping] = value
        }
        do {
            return try session(caller).matching(query).filter {
                PathCodec.directory(of: itemClass, $0.attributes).map { PathCodec.same($0, spelling) } ?? false
            }
        } catch KeychainStatus.itemNotFound { return [] }
    }

    /// A service/server directory's entries (name, inode), from the directory's sealed name
    /// lists (vault format 5): no item's attributes are opened. An inet server's list holds
    /// every protocol and port of the server: only the entries of this directory are kept. A
    /// directory whose spelling names no grouping value (a long name) is listed as `items` does.
    /// `previous`: the directory's last listing (stale: the vault changed since), whose entries
    /// of a chunk that did not change are taken as they are instead of the chunk being opened
    /// and spelled again (`Keychain.forEachNameListEntry`, `keptChunk`); its count is also the
    /// capacity reserved, so that 10,000 names are not copied from array to array as it grows.
    /// When every chunk is kept in its place, the listing is the previous one's array itself.
    func listItems(
        inDirectory itemClass: ItemClass, _ spelling: String, caller: Caller, previous: ListingCache.Listing?
    )
        throws -> ListingCache.Made
    {
        let grouping = Schema.groupingAttribute(of: itemClass)
        guard let value = PathCodec.parseDirectory(itemClass, spelling)?[grouping] else {
            let entries = try items(inDirectory: itemClass, spelling, caller: caller)
                .map {
                    DirectoryEntry(
                        name: PathCodec.leaf(of: itemClass, $0.attributes), ino: Inode.item(itemClass, id: $0.id),
                        isDirectory: false)
                }
            return ListingCache.Made(entries: entries)
        }
        // A service directory is spelled from the service alone: one check for the whole list.
        let sameForAll = itemClass == .genericPassword
        if sameForAll,
            !(PathCodec.directory(of: itemClass, [grouping: value]).map { PathCodec.same($0, spelling) } ?? false)
        {
            return ListingCache.Made(entries: [])
        }
        var builder = ListingBuilder(
            itemClass, spelling: spelling, sameForAll: sameForAll, groups: caller.accessGroups, previous: previous)
        try session(caller).forEachNameListEntry(
            itemClass, grouping: value, expecting: { builder.expect(chunks: $0) },
            keptChunk: { builder.keptChunk($0) }, chunk: { try builder.chunk($0, isKept: $1) }
        ) { builder.add($0) }
        return builder.finish()
    }

    /// Every item of a class the caller can see.
    func allItems(_ itemClass: ItemClass, caller: Caller) throws -> [KeychainItem] {
        guard itemClass != .identity else { return [] }
        do {
            return try session(caller).matching(Query(itemClass, matchLimit: .all, synchronizableAny: true))
        } catch KeychainStatus.itemNotFound { return [] }
    }

    /// The one item a leaf name names in a directory whose path gives `directoryAttributes`.
    func findItem(_ itemClass: ItemClass, directoryAttributes: Attributes, name: String, caller: Caller) throws
        -> KeychainItem?
    {
        if let key = PathCodec.parseLeaf(itemClass, name, in: directoryAttributes) {
            // A name in a group the caller is not in denotes nothing for it: ENOENT, like an
            // item that does not exist (never a permission error that would reveal it).
            if case .string(let group)? = key[Schema.accessGroup], !caller.canSee(accessGroup: group) {
                session(caller).refused(nil, .lookup, why: "not in access group")
                return nil
            }
            do {
                return try session(caller).matching(Query(itemClass, key, matchLimit: .all, synchronizableAny: true))
                    .first { PathCodec.same(PathCodec.leaf(of: itemClass, $0.attributes), name) }
            } catch KeychainStatus.itemNotFound { return nil }
        }
        guard PathCodec.isLongSpelling(name) else { return nil }
        // A long name is resolved by comparing the spellings of the directory's items.
        let candidates: [KeychainItem]
        if let spelling = PathCodec.directory(of: itemClass, directoryAttributes) {
            candidates = try items(inDirectory: itemClass, spelling, caller: caller)
        } else {
            candidates = try allItems(itemClass, caller: caller)
        }
        return candidates.first { PathCodec.same(PathCodec.leaf(of: itemClass, $0.attributes), name) }
    }

    /// The memory file (editor scratch or pending item) `name` in `parent`, if the caller may
    /// see it.
    func memoryFile(named name: String, in parent: UInt64, caller: Caller) -> MemoryFile? {
        memoryFiles.named(name, in: parent).flatMap { $0.isVisible(to: caller) ? $0 : nil }
    }

    /// Listing entries of the memory files of a directory that the caller may see (every one
    /// when `caller` is nil: rmdir's emptiness check).
    func memoryFileEntries(in parent: UInt64, caller: Caller?) -> [DirectoryEntry] {
        memoryFiles.files(in: parent)
            .filter { file in caller.map { file.isVisible(to: $0) } ?? true }
            .map { file in DirectoryEntry(name: file.state.withLock { $0.name }, ino: file.ino, isDirectory: false) }
    }
}
