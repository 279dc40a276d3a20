import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import SystemPackage

/// `/genp` and `/inet`: a directory per service or server (the class's grouping attribute),
/// never an item directly. A directory exists while an item has its service/server, or after
/// mkdir until it is removed; renaming it updates every item in it.
struct GroupedClassDirectory: TopLevelDirectory, ItemDirectory, NodeLookuper, NodeReaddirer, NodeMkdirer, NodeRmdirer {
    let itemClass: ItemClass
    var name: String { itemClass.rawValue }

    func keyAttributes(in fs: KeychainFileSystem, caller: Caller) throws -> Attributes? { nil }

    func lookup(_ name: String, in fs: KeychainFileSystem, caller: Caller) throws -> NodeStat {
        if let ino = fs.directories.emptyDirectory(itemClass, name) { return fs.directoryStat(ino) }
        // Found holding an item before, and nothing committed since: no index probe (a cold
        // lookup touches the store's pages, keys and index; this, one table).
        let session = fs.session(caller)
        let stamp = try session.changeStamp()
        if case .unlocked = fs.access.lockState,
            let ino = fs.directories.seen(itemClass, name, stamp: stamp, groups: caller.accessGroups)
        {
            return fs.directoryStat(ino)
        }
        guard try exists(name, in: fs, caller: caller) else { throw Errno.noSuchFileOrDirectory }
        let ino = fs.directories.inode(itemClass, name)
        fs.directories.markSeen(ino, stamp: stamp, groups: caller.accessGroups)
        return fs.directoryStat(ino)
    }

    /// A service directory exists when its service has an item the caller can see: one index
    /// probe. (An inet directory also names protocol and port, so its server's items are read.)
    private func exists(_ spelling: String, in fs: KeychainFileSystem, caller: Caller) throws -> Bool {
        if itemClass == .genericPassword, let attrs = PathCodec.parseDirectory(itemClass, spelling),
            let service = attrs[Schema.service]
        {
            return try fs.session(caller).hasItems(itemClass, grouping: service)
        }
        return try !fs.items(inDirectory: itemClass, spelling, caller: caller).isEmpty
    }

    func entries(in fs: KeychainFileSystem, caller: Caller) throws -> [DirectoryEntry] {
        let listed = try directoriesWithItems(in: fs, caller: caller)
        var out = listed.entries
        for (spelling, ino) in fs.directories.emptyDirectories(of: itemClass) where listed.ino(named: spelling) == nil {
            out.append(DirectoryEntry(name: spelling, ino: ino, isDirectory: true))
        }
        return out
    }

    /// The directories that hold an item the caller can see, from the listing cache while the
    /// vault is unchanged. Made by walking the class a page at a time and keeping only the
    /// distinct spellings: a 100,000-item class is never held in memory at once.
    private func directoriesWithItems(in fs: KeychainFileSystem, caller: Caller) throws -> ListingCache.Listing {
        let ino = Inode.classDirectory(itemClass)
        let stamp = try fs.session(caller).changeStamp()
        if let cached = fs.listings.listing(ino), cached.isValid(stamp: stamp, groups: caller.accessGroups) {
            return cached
        }
        var entries: [DirectoryEntry] = []
        var seen = Set<[UInt8]>()  // bytes: NFC and NFD services are two directories
        try fs.session(caller).forEachItem(itemClass) { item in
            guard let spelling = PathCodec.directory(of: itemClass, item.attributes),
                seen.insert(Array(spelling.utf8)).inserted
            else { return }
            entries.append(
                DirectoryEntry(name: spelling, ino: fs.directories.inode(itemClass, spelling), isDirectory: true))
        }
        let made = ListingCache.Listing(stamp: stamp, groups: caller.accessGroups, entries: entries)
        fs.listings.store(made, for: ino)
        return made
    }

    func mkdir(_ name: String, in fs: KeychainFileSystem, caller: Caller) throws -> NodeStat {
        guard PathCodec.parseDirectory(itemClass, name) != nil else { throw Errno.invalidArgument }
        if (try? lookup(name, in: fs, caller: caller)) != nil { throw Errno.fileExists }
        return fs.directoryStat(fs.directories.markEmpty(itemClass, name))
    }

    func rmdir(_ name: String, in fs: KeychainFileSystem, caller: Caller) throws {
        let stat = try lookup(name, in: fs, caller: caller)
        if try !fs.items(inDirectory: itemClass, name, caller: caller).isEmpty
            || !fs.memoryFileEntries(in: stat.ino, caller: nil).isEmpty
        {
            throw Errno.directoryNotEmpty
        }
        fs.directories.unmarkEmpty(stat.ino)
    }

    /// rename of a service/server directory: every item in it gets the new service/server.
    func renameDirectory(from: String, to: String, noReplace: Bool, in fs: KeychainFileSystem, caller: Caller) throws {
        guard let fromAttrs = PathCodec.parseDirectory(itemClass, from) else { throw Errno.noSuchFileOrDirectory }
        guard let toAttrs = PathCodec.parseDirectory(itemClass, to) else { throw Errno.invalidArgument }
        let moving = try fs.items(inDirectory: itemClass, from, caller: caller)
        let fromIno = fs.directories.inode(itemClass, from)
        if moving.isEmpty && !fs.directories.isEmptyDirectory(fromIno) { throw Errno.noSuchFileOrDirectory }
        if try !fs.items(inDirectory: itemClass, to, caller: caller).isEmpty {
            throw noReplace ? Errno.fileExists : Errno.directoryNotEmpty
        }
        // An empty directory there (mkdir'd, or kept after its last item left) is replaced, as
        // rename(2) replaces an empty directory; with RENAME_NOREPLACE it is EEXIST. One holding
        // an editor's scratch files is not empty.
        if let target = fs.directories.emptyDirectory(itemClass, to), target != fromIno {
            if noReplace { throw Errno.fileExists }
            if !fs.memoryFileEntries(in: target, caller: nil).isEmpty { throw Errno.directoryNotEmpty }
        }
        if !moving.isEmpty {
            var query = Query(itemClass, synchronizableAny: true)
            for (k, v) in fromAttrs { query.attributes[k] = v }
            try fs.session(caller).renameGroup(query, to: toAttrs)
        }
        fs.directories.renamed(fromIno, to: itemClass, to, empty: moving.isEmpty)
    }
}
