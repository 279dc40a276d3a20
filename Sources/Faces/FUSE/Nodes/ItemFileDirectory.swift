import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import SystemPackage

/// A directory whose files are items and editor scratch files: a service/server directory
/// (`GroupDirectory`) or a flat class directory (`/cert`, `/keys`). What they share: a name is
/// a memory file the caller may see, else the item whose canonical spelling it is; a new name
/// is an item from its creat(2) on (a certificate: a pending certificate until it has bytes).
protocol ItemFileDirectory: ItemDirectory, NodeLookuper, NodeReaddirer, NodeCreater {}

extension ItemFileDirectory {
    func lookupFile(_ name: String, in fs: KeychainFileSystem, caller: Caller) throws -> NodeStat {
        if let file = fs.memoryFile(named: name, in: ino, caller: caller) { return file.stat() }
        return try lookupItem(name, in: fs, caller: caller)
    }

    /// The item whose canonical spelling `name` is (memory files aside).
    func lookupItem(_ name: String, in fs: KeychainFileSystem, caller: Caller) throws -> NodeStat {
        guard let attrs = try keyAttributes(in: fs, caller: caller),
            let item = try fs.findItem(itemClass, directoryAttributes: attrs, name: name, caller: caller)
        else {
            throw Errno.noSuchFileOrDirectory
        }
        return fs.itemStat(item)
    }

    func create(_ name: String, flags: Int32, in fs: KeychainFileSystem, caller: Caller) throws -> Opened {
        let append = flags & O_APPEND != 0
        if PathCodec.isScratchName(name) {
            if fs.memoryFiles.named(name, in: ino) != nil { throw Errno.fileExists }
            let file = fs.memoryFiles.make(.editorScratch, parent: ino, name: name, caller: caller)
            let handle = fs.openFiles.register(
                OpenFile(ino: file.ino, target: .memory(file), caller: caller, append: append))
            return Opened(handle: handle, stat: file.stat())
        }
        guard let attrs = try keyAttributes(in: fs, caller: caller) else { throw Errno.notPermitted }
        // Not the canonical spelling of any item (bad escape, invalid UTF-8, long form).
        guard let key = PathCodec.parseLeaf(itemClass, name, in: attrs) else { throw Errno.invalidArgument }
        // In /cert and /keys a name is a label, which is not (or not all of) the primary key: an
        // item with that label is found by looking it up. Elsewhere the name is the primary key.
        if itemClass == .certificate || itemClass == .key, (try? lookup(name, in: fs, caller: caller)) != nil {
            throw Errno.fileExists
        }
        if itemClass == .certificate {
            // A certificate cannot exist empty: the name is a pending certificate in memory
            // until its bytes are committed (MemoryFiles.swift).
            let file = fs.memoryFiles.make(.pendingItem(itemClass, key), parent: ino, name: name, caller: caller)
            let handle = fs.openFiles.register(
                OpenFile(ino: file.ino, target: .memory(file), caller: caller, append: append))
            return Opened(handle: handle, stat: file.stat())
        }
        // Every other class: the item exists from creat(2) on (SecItemAdd with empty data), so
        // a second open, unlink, rename, ftruncate or setxattr by anyone meets the item itself,
        // and a create the keychain refuses (locked, group not entitled, duplicate: EEXIST)
        // fails here, at once. In /genp and /inet that is the whole check: no lookup first (the
        // kernel looked the name up just before, and no memory file has such a name).
        // Committed without an fsync: nothing promised the empty item durable before this
        // handle's fsync or close, whose durable commit (of its bytes, or of the manifest alone
        // when it wrote none) makes it durable with them: one fsync per created file.
        let (item, granted) = try fs.session(caller).create(itemClass, key, data: [], durable: false)
        fs.memoryFiles.markFresh(item.id)
        fs.memoryFiles.markCreated(item.id)
        fs.directories.unmarkEmpty(ino)
        let file = OpenFile(
            ino: Inode.item(itemClass, id: item.id), target: .item(itemClass, item.id), caller: granted,
            append: append, accessibility: item.accessibility, openedStat: fs.itemStat(item))
        try file.state.withLock { s in
            s.owesDurableCreate = true
            // O_TRUNC keeps its rule on a new file: the writes replace whatever is stored at commit.
            if flags & O_TRUNC != 0 { try s.truncateAtOpen() }
        }
        let handle = fs.openFiles.register(file)
        return Opened(handle: handle, stat: fs.itemStat(item))
    }
}

/// `/genp/<service>` and `/inet/[proto:]server[:port]`: the items of one service or server.
/// Its listing is cached while the vault is unchanged (ListingCache).
struct GroupDirectory: ItemFileDirectory {
    let itemClass: ItemClass
    let spelling: String
    let ino: UInt64

    func keyAttributes(in fs: KeychainFileSystem, caller: Caller) throws -> Attributes? {
        if let attrs = PathCodec.parseDirectory(itemClass, spelling) { return attrs }
        // A long directory name: take the attributes from one of its items.
        guard let item = try fs.items(inDirectory: itemClass, spelling, caller: caller).first else {
            throw Errno.noSuchFileOrDirectory
        }
        var attrs = Attributes()
        for a in [Schema.service, Schema.server, Schema.protocolAttribute, Schema.port] where item.attributes[a] != nil
        {
            attrs[a] = item.attributes[a]
        }
        return attrs
    }

    func lookup(_ name: String, in fs: KeychainFileSystem, caller: Caller) throws -> NodeStat {
        // Only hits come from the listing: a miss takes the full path (one index probe),
        // which also audits names of other access groups.
        if let file = fs.memoryFile(named: name, in: ino, caller: caller) { return file.stat() }
        if let cached = try validListing(in: fs, caller: caller), let item = cached.ino(named: name),
            let (itemClass, id) = Inode.decodeItem(item)
        {
            // The listing says which item the name is; its stat (size, times) is read by id once
            // per listing (a data write changes no listing, so none is kept in it).
            if let stat = fs.listings.stat(of: item, in: ino, stamp: cached.stamp) { return stat }
            let stat = try ItemNode(itemClass: itemClass, id: id).stat(in: fs, caller: caller)
            fs.listings.remember(stat, in: ino, stamp: cached.stamp)
            return stat
        }
        return try lookupItem(name, in: fs, caller: caller)
    }

    func entries(in fs: KeychainFileSystem, caller: Caller) throws -> [DirectoryEntry] {
        let listed = try listing(in: fs, caller: caller).entries
        let memory = fs.memoryFileEntries(in: ino, caller: caller)
        return memory.isEmpty ? listed : listed + memory
    }

    private func validListing(in fs: KeychainFileSystem, caller: Caller) throws -> ListingCache.Listing? {
        // The groups are compared first: the change stamp costs a store read.
        guard let cached = fs.listings.listing(ino), cached.groups == caller.accessGroups else { return nil }
        guard cached.stamp == (try fs.session(caller).changeStamp()) else {
            fs.listings.evict(ino)
            return nil
        }
        return cached
    }

    /// The directory's items as (name, inode), from the cache when nothing in the vault changed
    /// since it was made for these access groups.
    private func listing(in fs: KeychainFileSystem, caller: Caller) throws -> ListingCache.Listing {
        let stamp = try fs.session(caller).changeStamp()
        let cached = fs.listings.listing(ino)
        if let cached, cached.isValid(stamp: stamp, groups: caller.accessGroups) { return cached }
        let made = try fs.listItems(inDirectory: itemClass, spelling, caller: caller, previous: cached)
        let listing = ListingCache.Listing(
            stamp: stamp, groups: caller.accessGroups, entries: made.entries, chunks: made.chunks)
        fs.listings.store(listing, for: ino)
        return listing
    }
}

/// `/cert` and `/keys`: items named by label, directly in the class directory.
struct FlatClassDirectory: TopLevelDirectory, ItemFileDirectory {
    let itemClass: ItemClass
    var name: String { itemClass.rawValue }

    func keyAttributes(in fs: KeychainFileSystem, caller: Caller) throws -> Attributes? { [:] }

    func lookup(_ name: String, in fs: KeychainFileSystem, caller: Caller) throws -> NodeStat {
        try lookupFile(name, in: fs, caller: caller)
    }

    func entries(in fs: KeychainFileSystem, caller: Caller) throws -> [DirectoryEntry] {
        var seen = Set<[UInt8]>()  // bytes: NFC and NFD labels are two names
        var out: [DirectoryEntry] = []
        // A page of rows at a time, each item's attributes dropped once its name is spelled.
        try fs.session(caller).forEachItem(itemClass) { item in
            let leaf = PathCodec.leaf(of: itemClass, item.attributes)
            if seen.insert(Array(leaf.utf8)).inserted {
                out.append(DirectoryEntry(name: leaf, ino: Inode.item(itemClass, id: item.id), isDirectory: false))
            }
        }
        return out + fs.memoryFileEntries(in: ino, caller: caller)
    }
}
