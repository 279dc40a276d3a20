import Foundation
import Keychain

/// A filesystem error: the errno to reply with.
public struct FSError: Error {
    public let errno: Int32
    public init(_ errno: Int32) { self.errno = errno }
}

/// What `stat` shows for a node.
public struct NodeStat {
    public var ino: UInt64
    public var isDirectory: Bool
    public var size: Int
    public var modified: Date
    public var created: Date
}

/// Inode numbers: fixed for the root and class directories, the item id (tagged with its
/// class) for items, so an item keeps its inode across renames and the daemon needs no
/// path table; a small table for service/server directories and editor scratch files.
enum Inode {
    static let root: UInt64 = 1
    static let classes: [ItemClass] = [.genericPassword, .internetPassword, .certificate, .key, .identity]
    static let itemShift: UInt64 = 40
    static let scratchTag: UInt64 = 7
    static let firstDirectory: UInt64 = 1000

    static func classDirectory(_ c: ItemClass) -> UInt64 { 2 + UInt64(classes.firstIndex(of: c)!) }
    static func classOf(directory ino: UInt64) -> ItemClass? {
        (2..<UInt64(2 + classes.count)).contains(ino) ? classes[Int(ino - 2)] : nil
    }
    static func item(_ c: ItemClass, id: Int64) -> UInt64 {
        (UInt64(classes.firstIndex(of: c)! + 1) << itemShift) | UInt64(id)
    }
    static func decodeItem(_ ino: UInt64) -> (ItemClass, Int64)? {
        let tag = ino >> itemShift
        guard tag >= 1 && tag <= UInt64(classes.count) else { return nil }
        return (classes[Int(tag - 1)], Int64(ino & ((1 << itemShift) - 1)))
    }
    static func scratch(_ n: UInt64) -> UInt64 { (scratchTag << itemShift) | n }
    static func isScratch(_ ino: UInt64) -> Bool { ino >> itemShift == scratchTag }
}

/// The filesystem face of a keychain. Every method translates one filesystem call into core
/// calls and back; keychain rules stay in the core, errno comes from KeychainStatus.errno.
public final class KeychainFileSystem: @unchecked Sendable {
    // @unchecked: all mutable state below is guarded by `lock`.
    public let keychain: Keychain
    public let uid: uid_t
    public let gid: gid_t
    let mountTime = Date()

    private let lock = NSLock()
    /// Service/server directories by (class, spelling) and back.
    private var directoryInodes: [String: UInt64] = [:]
    private var directories: [UInt64: (ItemClass, String)] = [:]
    private var nextDirectory = Inode.firstDirectory
    /// Directories made with mkdir that hold no item yet (not stored in the vault).
    private var emptyDirectories: Set<UInt64> = []
    private var openFiles: [UInt64: OpenFile] = [:]
    private var nextHandle: UInt64 = 1
    private var scratch: [UInt64: ScratchFile] = [:]
    private var nextScratch: UInt64 = 1
    /// Items this daemon created through the mount whose attributes nobody has set since:
    /// temp files of `sed -i` and friends. Renamed onto an existing item, such a file gives it
    /// its bytes (the target keeps its attributes), instead of replacing it.
    private var freshItems: Set<Int64> = []
    /// Directory listings (name → stat) by directory inode, valid while the vault's change
    /// stamp and the caller's access groups are the ones they were made for. Spelling 10,000
    /// names means decrypting 10,000 attribute sets; `ls -l` then looks each name up again.
    private var listings: [UInt64: Listing] = [:]

    private struct Listing {
        let stamp: [Int64]
        let groups: [String]
        let entries: [(name: String, stat: NodeStat)]
        let byName: [String: NodeStat]
    }

    /// Called (off the request thread) when the kernel's cached view of a node went stale.
    public var invalidate: (@Sendable (Invalidation) -> Void)?

    public enum Invalidation: Sendable {
        case inode(UInt64)
        case entry(parent: UInt64, name: String)
    }

    final class OpenFile {
        let ino: UInt64
        var itemClass: ItemClass?
        var itemID: Int64?
        var scratch: ScratchFile?
        let caller: Caller
        let append: Bool
        var buffer: [UInt8]?
        var dirty = false
        /// A write was refused (EFBIG): the handle's buffered bytes are dropped and every later
        /// commit fails with this errno, so the old secret stays intact and nothing is added.
        var failed: Int32?
        /// Bytes were written (or ftruncate was called) on this handle. An O_TRUNC open alone is
        /// committed only at release: the shell's `> file` flushes once before the first write,
        /// and committing the empty file then would lose the old secret if the write fails.
        var written = false
        /// Bumped by every write and truncate: a commit marks the handle clean only if no write
        /// landed while it was committing (FLUSH is not serialised with WRITE).
        var generation = 0
        init(ino: UInt64, itemClass: ItemClass?, itemID: Int64?, scratch: ScratchFile?, caller: Caller, append: Bool) {
            self.ino = ino; self.itemClass = itemClass; self.itemID = itemID; self.scratch = scratch
            self.caller = caller; self.append = append
        }
    }

    /// Swap, backup and lock files of editors: kept in daemon memory only, never stored.
    final class ScratchFile {
        let ino: UInt64
        var parent: UInt64
        var name: String
        var data: [UInt8] = []
        var modified = Date()
        /// A file created through the mount: it becomes an item (SecItemAdd) at its first
        /// commit with bytes, or at release. Until then it is listed like any file, and a crash
        /// leaves nothing behind.
        var pending: (ItemClass, Attributes)?
        /// After the commit this inode stays an alias of the new item, because the kernel may
        /// still hold it for the name.
        var committed: (ItemClass, Int64)?
        /// The access group of the process that made it: scratch files (a vim swap file holds
        /// the secret being edited) are visible only to processes in that group.
        var ownerGroup = Caller.defaultAccessGroup
        init(ino: UInt64, parent: UInt64, name: String) { self.ino = ino; self.parent = parent; self.name = name }
    }

    /// Who is calling, which groups that gives, prompts, and the audit log.
    public let access: AccessLayer

    public init(keychain: Keychain, uid: uid_t = getuid(), gid: gid_t = getgid(), audit: AuditLog? = nil) {
        self.keychain = keychain
        self.uid = uid
        self.gid = gid
        self.access = AccessLayer(keychain: keychain, audit: audit)
    }

    /// Runs one access decision and records it in the audit log, allowed or denied (with the
    /// keychain status or errno as the reason).
    func audited<R>(_ caller: Caller, item: Int64?, _ operation: String, _ body: () throws -> R) throws -> R {
        do {
            let result = try body()
            access.audit?.record(caller, item: item, operation, allowed: true)
            return result
        } catch let e as KeychainError {
            access.audit?.record(caller, item: item, operation, allowed: false, why: e.status.name)
            throw fsError(e, "\(operation) item \(item.map(String.init) ?? "-")")
        } catch let e as FSError {
            access.audit?.record(caller, item: item, operation, allowed: false, why: String(cString: strerror(e.errno)))
            throw e
        }
    }

    // MARK: Translating core errors

    func fsError(_ error: any Error, _ what: String) -> FSError {
        if let e = error as? FSError { return e }
        if let e = error as? KeychainError {
            if e.status == .decode {
                // Tampering or damage: always logged (the message names the item id, no secret).
                Log.error("\(what): \(e.message)")
            } else {
                Log.debug("\(what): \(e.status.name): \(e.message)")
            }
            return FSError(e.status.errno)
        }
        Log.error("\(what): \(error)")
        return FSError(EIO)
    }

    func attempt<R>(_ what: @autoclosure () -> String, _ body: () throws -> R) throws -> R {
        do { return try body() } catch { throw fsError(error, what()) }
    }

    // MARK: Directories

    private func directoryInode(_ itemClass: ItemClass, _ spelling: String) -> UInt64 {
        lock.withLock {
            let key = itemClass.rawValue + "/" + spelling
            if let ino = directoryInodes[key] { return ino }
            let ino = nextDirectory
            nextDirectory += 1
            directoryInodes[key] = ino
            directories[ino] = (itemClass, spelling)
            return ino
        }
    }

    private func directory(_ ino: UInt64) -> (ItemClass, String)? { lock.withLock { directories[ino] } }

    /// Items visible in a service/server directory.
    private func items(inDirectory itemClass: ItemClass, _ spelling: String, caller: Caller) throws -> [KeychainItem] {
        let grouping = Schema.groupingAttribute(of: itemClass)
        var query = Query(itemClass, matchLimit: .all, synchronizableAny: true)
        if let attrs = PathCodec.parseDirectory(itemClass, spelling), let value = attrs[grouping] {
            query.attributes[grouping] = value
        }
        do {
            return try keychain.copyMatching(query, caller: caller).filter { PathCodec.directory(of: itemClass, $0.attributes) == spelling }
        } catch KeychainStatus.itemNotFound { return [] }
    }

    private func allItems(_ itemClass: ItemClass, caller: Caller) throws -> [KeychainItem] {
        guard itemClass != .identity else { return [] }
        do { return try keychain.copyMatching(Query(itemClass, matchLimit: .all, synchronizableAny: true), caller: caller) }
        catch KeychainStatus.itemNotFound { return [] }
    }

    // MARK: Lookup and stat

    enum Node {
        case root
        case classDirectory(ItemClass)
        case directory(ItemClass, String)
        case item(ItemClass, Int64)
        case scratch(ScratchFile)
    }

    func node(_ ino: UInt64) throws -> Node {
        if ino == Inode.root { return .root }
        if let c = Inode.classOf(directory: ino) { return .classDirectory(c) }
        if let (c, id) = Inode.decodeItem(ino) { return .item(c, id) }
        if Inode.isScratch(ino) {
            guard let s = lock.withLock({ scratch[ino] }) else { throw FSError(ENOENT) }
            if let (c, id) = lock.withLock({ s.committed }) { return .item(c, id) }
            return .scratch(s)
        }
        if let (c, s) = directory(ino) { return .directory(c, s) }
        throw FSError(ENOENT)
    }

    func directoryStat(_ ino: UInt64) -> NodeStat {
        NodeStat(ino: ino, isDirectory: true, size: 0, modified: mountTime, created: mountTime)
    }

    func itemStat(_ item: KeychainItem) -> NodeStat {
        NodeStat(ino: Inode.item(item.itemClass, id: item.id), isDirectory: false,
                 size: Self.contentLength(item.itemClass, item.dataLength),
                 modified: item.modificationDate ?? mountTime, created: item.creationDate ?? mountTime)
    }

    // MARK: Content: what a file shows of an item's data

    /// A certificate is stored as DER (Apple's value) and shown as PEM, which is what
    /// openssl, curl and Python's ssl read; everything else is shown byte for byte.
    static func content(_ itemClass: ItemClass, _ data: [UInt8]) -> [UInt8] {
        itemClass == .certificate && !data.isEmpty ? CertificateData.pem(data) : data
    }

    static func contentLength(_ itemClass: ItemClass, _ dataLength: Int) -> Int {
        guard itemClass == .certificate, dataLength > 0 else { return dataLength }
        let b64 = (dataLength + 2) / 3 * 4
        return "-----BEGIN CERTIFICATE-----\n".utf8.count + b64 + (b64 + 63) / 64 + "-----END CERTIFICATE-----\n".utf8.count
    }

    /// An identity's file: the certificate's PEM followed by the private key as stored.
    private func identityContent(_ id: Int64, caller: Caller) throws -> [UInt8] {
        let identity = try attempt("read identity \(id)") { try keychain.identity(certificateID: id, withData: true, caller: caller) }
        var out = Self.content(.certificate, identity.certificate.data ?? [])
        out += identity.key.data ?? []
        return out
    }

    private func identityStat(_ identity: Keychain.Identity) -> NodeStat {
        NodeStat(ino: Inode.item(.identity, id: identity.id), isDirectory: false,
                 size: Self.contentLength(.certificate, identity.certificate.dataLength) + identity.key.dataLength,
                 modified: identity.certificate.modificationDate ?? mountTime, created: identity.certificate.creationDate ?? mountTime)
    }

    /// The item behind an inode, for stat and xattrs (an identity shows its certificate's).
    private func statItem(_ c: ItemClass, _ id: Int64, caller: Caller) throws -> KeychainItem {
        try attempt("item \(id)") {
            if c == .identity { return try keychain.identity(certificateID: id, withData: false, caller: caller).certificate }
            return try keychain.item(id: id, itemClass: c, withData: false, caller: caller)
        }
    }

    /// Finds the one item a leaf name names in a directory.
    private func findItem(_ itemClass: ItemClass, directoryAttributes: Attributes, name: String, caller: Caller) throws -> KeychainItem? {
        if let key = PathCodec.parseLeaf(itemClass, name, in: directoryAttributes) {
            // A name in a group the caller is not in denotes nothing for it: ENOENT, like an
            // item that does not exist (never a permission error that would reveal it).
            if case .string(let group)? = key[Schema.accessGroup], !caller.accessGroups.contains(group) {
                access.audit?.record(caller, item: nil, "lookup", allowed: false, why: "not in access group")
                return nil
            }
            do {
                return try keychain.copyMatching(Query(itemClass, key, matchLimit: .all, synchronizableAny: true), caller: caller)
                    .first { PathCodec.leaf(of: itemClass, $0.attributes) == name }
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
        return candidates.first { PathCodec.leaf(of: itemClass, $0.attributes) == name }
    }

    private func scratchFile(parent: UInt64, name: String, caller: Caller) -> ScratchFile? {
        lock.withLock { scratch.values.first { $0.parent == parent && $0.name == name && $0.committed == nil } }
            .flatMap { visible($0, to: caller) ? $0 : nil }
    }

    private func visible(_ s: ScratchFile, to caller: Caller) -> Bool {
        caller.accessGroups.contains(lock.withLock { s.ownerGroup })
    }

    private func newScratch(parent: UInt64, name: String, caller: Caller) -> ScratchFile {
        lock.withLock {
            let s = ScratchFile(ino: Inode.scratch(nextScratch), parent: parent, name: name)
            nextScratch += 1
            s.ownerGroup = caller.accessGroups.first ?? Caller.defaultAccessGroup
            scratch[s.ino] = s
            return s
        }
    }

    /// What a directory's spelling means as attributes (empty for class directories).
    private func directoryAttributes(_ parent: Node, caller: Caller = .default) throws -> (ItemClass, Attributes)? {
        switch parent {
        case .classDirectory(let c) where c != .genericPassword && c != .internetPassword: return (c, [:])
        case .directory(let c, let spelling):
            if let attrs = PathCodec.parseDirectory(c, spelling) { return (c, attrs) }
            // A long directory name: take the attributes from one of its items.
            if let item = try items(inDirectory: c, spelling, caller: caller).first {
                var attrs = Attributes()
                for a in [Schema.service, Schema.server, Schema.protocolAttribute, Schema.port] where item.attributes[a] != nil {
                    attrs[a] = item.attributes[a]
                }
                return (c, attrs)
            }
            throw FSError(ENOENT)
        default: return nil
        }
    }

    public func lookup(parent: UInt64, name: String, caller: Caller) throws -> NodeStat {
        let parentNode = try node(parent)
        switch parentNode {
        case .root:
            guard let c = ItemClass(rawValue: name) else { throw FSError(ENOENT) }
            return directoryStat(Inode.classDirectory(c))
        case .classDirectory(let c) where c == .genericPassword || c == .internetPassword:
            if let ino = lock.withLock({ directoryInodes[c.rawValue + "/" + name] }), lock.withLock({ emptyDirectories.contains(ino) }) {
                return directoryStat(ino)
            }
            let exists = try attempt("lookup \(c)/\(name)") { () -> Bool in
                // A service directory exists when its service has an item: one index probe. (An
                // inet directory also names protocol and port, so its server's items are read.)
                if c == .genericPassword, let attrs = PathCodec.parseDirectory(c, name), let service = attrs[Schema.service] {
                    return try keychain.hasItems(c, grouping: service, caller: caller)
                }
                return try !items(inDirectory: c, name, caller: caller).isEmpty
            }
            guard exists else { throw FSError(ENOENT) }
            return directoryStat(directoryInode(c, name))
        case .classDirectory, .directory:
            if let s = scratchFile(parent: parent, name: name, caller: caller) { return scratchStat(s) }
            // Only hits come from the listing: a miss takes the full path (one index probe),
            // which also audits names of other access groups.
            if case .directory = parentNode, let cached = try cachedLookup(parent, name, caller: caller), let stat = cached {
                return stat
            }
            guard let (c, attrs) = try directoryAttributes(parentNode, caller: caller) else { throw FSError(ENOENT) }
            if c == .identity {
                let found = try attempt("lookup \(name)") { try keychain.identities(caller: caller) }
                guard let identity = found.first(where: { PathCodec.leaf(of: .identity, $0.certificate.attributes) == name }) else { throw FSError(ENOENT) }
                return identityStat(identity)
            }
            guard let item = try attempt("lookup \(name)", { try findItem(c, directoryAttributes: attrs, name: name, caller: caller) }) else {
                throw FSError(ENOENT)
            }
            return itemStat(item)
        case .item, .scratch:
            throw FSError(ENOTDIR)
        }
    }

    func scratchStat(_ s: ScratchFile) -> NodeStat {
        lock.withLock { NodeStat(ino: s.ino, isDirectory: false, size: s.data.count, modified: s.modified, created: s.modified) }
    }

    public func getattr(_ ino: UInt64, handle: UInt64?, caller: Caller) throws -> NodeStat {
        switch try node(ino) {
        case .root, .classDirectory, .directory: return directoryStat(ino)
        case .scratch(let s): return scratchStat(s)
        case .item(.identity, let id):
            return identityStat(try attempt("getattr identity \(id)") { try keychain.identity(certificateID: id, withData: false, caller: caller) })
        case .item(let c, let id):
            var stat = itemStat(try statItem(c, id, caller: caller))
            if let handle, let file = lock.withLock({ openFiles[handle] }), file.dirty, let buffer = file.buffer {
                stat.size = buffer.count
            }
            return stat
        }
    }

    // MARK: Listing

    public struct DirectoryEntry {
        public let name: String
        public let ino: UInt64
        public let isDirectory: Bool
    }

    public func list(_ ino: UInt64, caller: Caller) throws -> [DirectoryEntry] {
        var out = [DirectoryEntry(name: ".", ino: ino, isDirectory: true), DirectoryEntry(name: "..", ino: Inode.root, isDirectory: true)]
        switch try node(ino) {
        case .root:
            out += Inode.classes.map { DirectoryEntry(name: $0.rawValue, ino: Inode.classDirectory($0), isDirectory: true) }
        case .classDirectory(let c) where c == .genericPassword || c == .internetPassword:
            var seen = Set<String>()
            for item in try attempt("readdir \(c)", { try allItems(c, caller: caller) }) {
                guard let spelling = PathCodec.directory(of: c, item.attributes), seen.insert(spelling).inserted else { continue }
                out.append(DirectoryEntry(name: spelling, ino: directoryInode(c, spelling), isDirectory: true))
            }
            for d in lock.withLock({ emptyDirectories.compactMap { directories[$0].map { ($0, $1) } } }) where d.0 == c && !seen.contains(d.1) {
                out.append(DirectoryEntry(name: d.1, ino: directoryInode(c, d.1), isDirectory: true))
            }
        case .classDirectory(.identity):
            var seen = Set<String>()
            for identity in try attempt("readdir idnt", { try keychain.identities(caller: caller) }) {
                let leaf = PathCodec.leaf(of: .identity, identity.certificate.attributes)
                if seen.insert(leaf).inserted { out.append(DirectoryEntry(name: leaf, ino: Inode.item(.identity, id: identity.id), isDirectory: false)) }
            }
        case .classDirectory(let c):
            var seen = Set<String>()
            for item in try attempt("readdir \(c)", { try allItems(c, caller: caller) }) {
                let leaf = PathCodec.leaf(of: c, item.attributes)
                if seen.insert(leaf).inserted { out.append(DirectoryEntry(name: leaf, ino: Inode.item(c, id: item.id), isDirectory: false)) }
            }
            out += scratchEntries(ino, caller: caller)
        case .directory(let c, let spelling):
            for (name, stat) in try listing(ino, c, spelling, caller: caller).entries {
                out.append(DirectoryEntry(name: name, ino: stat.ino, isDirectory: false))
            }
            out += scratchEntries(ino, caller: caller)
        case .item, .scratch:
            throw FSError(ENOTDIR)
        }
        return out
    }

    /// A service/server directory's items as (name, stat), from the cache when nothing in the
    /// vault changed since it was made for these access groups.
    private func listing(_ ino: UInt64, _ c: ItemClass, _ spelling: String, caller: Caller) throws -> Listing {
        let stamp = try attempt("readdir") { try keychain.changeStamp() }
        if let cached = lock.withLock({ listings[ino] }), cached.stamp == stamp, cached.groups == caller.accessGroups {
            return cached
        }
        let entries = try attempt("readdir \(c)/\(spelling)") { try items(inDirectory: c, spelling, caller: caller) }
            .map { (name: PathCodec.leaf(of: c, $0.attributes), stat: itemStat($0)) }
        let made = Listing(stamp: stamp, groups: caller.accessGroups, entries: entries,
                           byName: Dictionary(entries.map { ($0.name, $0.stat) }, uniquingKeysWith: { first, _ in first }))
        lock.withLock {
            if listings.count > 256 { listings.removeAll() }
            listings[ino] = made
        }
        return made
    }

    /// A lookup answered from a still-valid listing of the directory, if there is one.
    private func cachedLookup(_ parent: UInt64, _ name: String, caller: Caller) throws -> NodeStat?? {
        guard let cached = lock.withLock({ listings[parent] }), cached.groups == caller.accessGroups,
              cached.stamp == (try attempt("lookup") { try keychain.changeStamp() }) else { return nil }
        return .some(cached.byName[name])
    }

    private func scratchEntries(_ parent: UInt64, caller: Caller?) -> [DirectoryEntry] {
        lock.withLock { scratch.values.filter { $0.parent == parent && $0.committed == nil } }
            .filter { file in caller.map { visible(file, to: $0) } ?? true }
            .map { DirectoryEntry(name: $0.name, ino: $0.ino, isDirectory: false) }
    }

    // MARK: Directories: mkdir, rmdir

    public func mkdir(parent: UInt64, name: String, caller: Caller) throws -> NodeStat {
        guard case .classDirectory(let c) = try node(parent), c == .genericPassword || c == .internetPassword else {
            throw FSError(EPERM)
        }
        guard PathCodec.parseDirectory(c, name) != nil else { throw FSError(EINVAL) }
        if (try? lookup(parent: parent, name: name, caller: caller)) != nil { throw FSError(EEXIST) }
        let ino = directoryInode(c, name)
        _ = lock.withLock { emptyDirectories.insert(ino) }
        return directoryStat(ino)
    }

    public func rmdir(parent: UInt64, name: String, caller: Caller) throws {
        guard case .classDirectory(let c) = try node(parent), c == .genericPassword || c == .internetPassword else {
            throw FSError(parent == Inode.root ? EPERM : ENOTDIR)
        }
        let stat = try lookup(parent: parent, name: name, caller: caller)
        if try !items(inDirectory: c, name, caller: caller).isEmpty || !scratchEntries(stat.ino, caller: nil).isEmpty { throw FSError(ENOTEMPTY) }
        _ = lock.withLock { emptyDirectories.remove(stat.ino) }
    }

    // MARK: Files: create, open, read, write, commit

    public struct Opened {
        public let handle: UInt64
        public let stat: NodeStat
    }

    private func register(_ file: OpenFile) -> UInt64 {
        lock.withLock {
            let h = nextHandle
            nextHandle += 1
            openFiles[h] = file
            return h
        }
    }

    public func create(parent: UInt64, name: String, flags: Int32, caller: Caller) throws -> Opened {
        let parentNode = try node(parent)
        switch parentNode {
        case .classDirectory(.identity), .directory(.identity, _): throw FSError(EPERM)
        case .root: throw FSError(EPERM)
        case .classDirectory(let c) where c == .genericPassword || c == .internetPassword: throw FSError(EPERM)
        case .item, .scratch: throw FSError(ENOTDIR)
        default: break
        }
        if PathCodec.isScratchName(name) {
            if lock.withLock({ scratch.values.contains { $0.parent == parent && $0.name == name && $0.committed == nil } }) {
                throw FSError(EEXIST)
            }
            let s = newScratch(parent: parent, name: name, caller: caller)
            let h = register(OpenFile(ino: s.ino, itemClass: nil, itemID: nil, scratch: s, caller: caller, append: flags & O_APPEND != 0))
            return Opened(handle: h, stat: scratchStat(s))
        }
        guard let (c, dirAttrs) = try directoryAttributes(parentNode, caller: caller) else { throw FSError(EPERM) }
        guard let key = PathCodec.parseLeaf(c, name, in: dirAttrs) else {
            // Not the canonical spelling of any item (bad escape, invalid UTF-8, long form).
            throw FSError(EINVAL)
        }
        if (try? lookup(parent: parent, name: name, caller: caller)) != nil { throw FSError(EEXIST) }
        var attributes = key
        if c == .key, case .string(let label)? = key[Schema.label] {
            // A key's primary key does not hold its label; tag it with its file name so two
            // keys written under different names are different items.
            attributes[Schema.named("applicationTag")] = .data(Array(label.utf8))
        }
        // The item is added when its bytes are committed (a certificate cannot even exist
        // empty); until then the name is a pending file.
        let s = newScratch(parent: parent, name: name, caller: caller)
        lock.withLock {
            s.pending = (c, attributes)
            if case .directory = parentNode { emptyDirectories.remove(parent) }
        }
        let h = register(OpenFile(ino: s.ino, itemClass: nil, itemID: nil, scratch: s, caller: caller, append: flags & O_APPEND != 0))
        return Opened(handle: h, stat: scratchStat(s))
    }

    public func open(_ ino: UInt64, flags: Int32, caller given: Caller) throws -> UInt64 {
        var caller = given
        // O_NONBLOCK: never prompt (kSecUseAuthenticationUIFail): EAGAIN when a prompt is needed.
        if flags & O_NONBLOCK != 0 { caller.authenticationUI = .fail }
        let access = flags & O_ACCMODE
        let writing = access == O_WRONLY || access == O_RDWR
        switch try node(ino) {
        case .root, .classDirectory, .directory: throw FSError(EISDIR)
        case .scratch(let s):
            guard visible(s, to: caller) else { throw FSError(ENOENT) }
            if flags & O_TRUNC != 0 { lock.withLock { s.data = [] } }
            return register(OpenFile(ino: ino, itemClass: nil, itemID: nil, scratch: s, caller: caller, append: flags & O_APPEND != 0))
        case .item(.identity, let id):
            if writing { throw FSError(EPERM) }
            _ = try audited(caller, item: id, "open-read") { try identityContent(id, caller: caller) }
            return register(OpenFile(ino: ino, itemClass: .identity, itemID: id, scratch: nil,
                                     caller: Self.approved(caller), append: false))
        case .item(let c, let id):
            // The access decision is taken here and bound to the handle: the item is visible to
            // this caller, its class key is available (lock state), and user presence is given
            // (which may prompt). Each later read goes through the store and the lock state again
            // and decrypts, but does not ask again.
            let needsData = writing && flags & O_TRUNC == 0
            let item = try audited(caller, item: id, flags & O_TRUNC != 0 && writing ? "open-truncate" : writing ? "open-write" : "open-read") {
                needsData ? try keychain.item(id: id, itemClass: c, withData: true, caller: caller)
                          : try keychain.authorizeRead(id: id, itemClass: c, caller: caller)
            }
            let file = OpenFile(ino: ino, itemClass: c, itemID: id, scratch: nil, caller: Self.approved(caller),
                                append: flags & O_APPEND != 0)
            if flags & O_TRUNC != 0 && writing {
                file.buffer = []
                file.dirty = true
            } else if writing {
                file.buffer = Self.content(c, item.data ?? [])
            }
            return register(file)
        }
    }

    /// A caller whose user-presence check already passed at open: the handle carries it.
    static func approved(_ caller: Caller) -> Caller {
        var c = caller
        c.presence = ApprovedAtOpen()
        c.authenticationUI = .allow
        return c
    }

    struct ApprovedAtOpen: PresenceVerifier {
        func verify(item: KeychainItem, flags: AccessControlFlags, caller: Caller) throws {}
    }

    private func openFile(_ handle: UInt64) throws -> OpenFile {
        guard let f = lock.withLock({ openFiles[handle] }) else { throw FSError(EBADF) }
        lock.withLock {
            // Another handle on the same new file committed it: this one now writes to the
            // item too (its bytes are loaded on its first write), not to the old pending file.
            if let s = f.scratch, let (c, id) = s.committed {
                f.scratch = nil
                f.itemClass = c
                f.itemID = id
                f.buffer = nil
                f.dirty = false
            }
        }
        return f
    }

    public func read(handle: UInt64, offset: Int, size: Int) throws -> [UInt8] {
        let file = try openFile(handle)
        let data: [UInt8]
        if let s = lock.withLock({ file.scratch }) {
            data = lock.withLock { s.data }
        } else if let buffer = lock.withLock({ file.buffer }), lock.withLock({ file.dirty }) {
            data = buffer
        } else if file.itemClass == .identity {
            data = try identityContent(file.itemID!, caller: file.caller)
        } else {
            // Every read goes through the store and the access check.
            let item = try attempt("read item \(file.itemID!)") {
                try keychain.item(id: file.itemID!, itemClass: file.itemClass!, withData: true, caller: file.caller)
            }
            data = Self.content(file.itemClass!, item.data ?? [])
        }
        guard offset < data.count else { return [] }
        return Array(data[offset..<min(data.count, offset + size)])
    }

    public func write(handle: UInt64, offset: Int, bytes: UnsafeRawBufferPointer) throws -> Int {
        let file = try openFile(handle)
        if let s = lock.withLock({ file.scratch }) {
            return try lock.withLock {
                if let failed = file.failed { throw FSError(failed) }
                let start = file.append ? s.data.count : offset
                // A pending item has the keychain's limit; editor scratch files a looser one.
                guard start + bytes.count <= Keychain.maxDataSize * (s.pending == nil ? 4 : 1) else {
                    if s.pending != nil { file.failed = EFBIG; s.data = [] }
                    throw FSError(EFBIG)
                }
                if s.data.count < start + bytes.count { s.data += [UInt8](repeating: 0, count: start + bytes.count - s.data.count) }
                s.data.replaceSubrange(start..<(start + bytes.count), with: bytes)
                s.modified = Date()
                file.dirty = true
                file.generation += 1
                return bytes.count
            }
        }
        if lock.withLock({ file.buffer == nil }) {
            let item = try attempt("load item \(file.itemID!)") {
                try keychain.item(id: file.itemID!, itemClass: file.itemClass!, withData: true, caller: file.caller)
            }
            lock.withLock { if file.buffer == nil { file.buffer = Self.content(file.itemClass!, item.data ?? []) } }
        }
        return try lock.withLock {
            if let failed = file.failed { throw FSError(failed) }
            var buffer = file.buffer!
            let start = file.append ? buffer.count : offset
            guard start + bytes.count <= Keychain.maxDataSize else {
                Log.debug("write to item \(file.itemID!) refused: over the size limit")
                // Drop what was buffered: the commit at close must not store a truncated secret.
                file.failed = EFBIG
                file.buffer = nil
                file.dirty = false
                throw FSError(EFBIG)
            }
            if buffer.count < start + bytes.count { buffer += [UInt8](repeating: 0, count: start + bytes.count - buffer.count) }
            buffer.replaceSubrange(start..<(start + bytes.count), with: bytes)
            file.buffer = buffer
            file.dirty = true
            file.written = true
            file.generation += 1
            return bytes.count
        }
    }

    /// Commits a handle's buffered writes as one SecItemUpdate. A failure leaves the old
    /// secret intact and is reported to flush/fsync (so close(2) sees it).
    public func commit(handle: UInt64, releasing: Bool = false) throws {
        let file = try openFile(handle)
        if let failed = lock.withLock({ file.failed }) {
            if releasing, let s = file.scratch, s.pending != nil { _ = lock.withLock { scratch.removeValue(forKey: s.ino) } }
            throw FSError(failed)
        }
        if let s = lock.withLock({ file.scratch }) {
            try commitPending(s, file: file, releasing: releasing)
            return
        }
        guard let (buffer, dirty, written, generation, itemClass, itemID) = lock.withLock({
            file.buffer.map { ($0, file.dirty, file.written, file.generation, file.itemClass!, file.itemID!) }
        }), dirty, written || releasing else { return }
        try audited(file.caller, item: itemID, "write") {
            try keychain.update(Query(itemClass, synchronizableAny: true, persistentReference: itemID),
                                attributes: [:], data: buffer, caller: file.caller)
        }
        lock.withLock { if file.generation == generation { file.dirty = false } }
        invalidate?(.inode(file.ino))
    }

    /// A file created through the mount becomes an item at the first commit that has bytes (or
    /// at release): SecItemAdd. For a certificate the add parses it: not a certificate is
    /// EINVAL, and nothing is stored.
    private func commitPending(_ s: ScratchFile, file: OpenFile, releasing: Bool) throws {
        guard let (c, key, data, dirty, generation) = lock.withLock({ () -> (ItemClass, Attributes, [UInt8], Bool, Int)? in
            // Unlinked while still being written: it never becomes an item.
            guard let (c, key) = s.pending, s.committed == nil, scratch[s.ino] != nil else { return nil }
            return (c, key, s.data, file.dirty, file.generation)
        }) else { return }
        guard dirty || releasing else { return }
        if data.isEmpty && !releasing { return }
        do {
            let item = try audited(file.caller, item: nil, "create") { try keychain.add(c, key, data: data, caller: file.caller) }
            lock.withLock {
                s.committed = (c, item.id)
                s.data = []
                // From now on this handle is an ordinary item handle: later writes update it.
                file.scratch = nil
                file.itemClass = c
                file.itemID = item.id
                // What this handle wrote is what it reads back; a write that landed during the
                // add is committed by the next flush as an update.
                file.buffer = s.data
                file.dirty = file.generation != generation
                file.written = file.dirty
                freshItems.insert(item.id)
            }
            invalidate?(.entry(parent: s.parent, name: s.name))
        } catch {
            if releasing { _ = lock.withLock { scratch.removeValue(forKey: s.ino) } }
            throw error
        }
    }

    public func release(handle: UInt64) {
        do { try commit(handle: handle, releasing: true) } catch {
            Log.warning("release: a buffered write was not committed (errno \((error as? FSError)?.errno ?? EIO))")
        }
        if let file = lock.withLock({ openFiles.removeValue(forKey: handle) }) {
            // direct_io keeps read(2) out of the page cache, but an mmap of the file still goes
            // through it: drop any such pages when the file is closed.
            invalidate?(.inode(file.ino))
        }
    }

    public func truncate(_ ino: UInt64, size: Int, handle: UInt64?, caller: Caller) throws {
        guard size <= Keychain.maxDataSize else { throw FSError(EFBIG) }
        switch try node(ino) {
        case .root, .classDirectory, .directory: throw FSError(EISDIR)
        case .scratch(let s):
            lock.withLock {
                if s.data.count > size { s.data.removeLast(s.data.count - size) } else { s.data += [UInt8](repeating: 0, count: size - s.data.count) }
            }
        case .item(let c, let id):
            if c == .identity { throw FSError(EPERM) }
            if let handle, let file = lock.withLock({ openFiles[handle] }), file.itemID == id {
                if lock.withLock({ file.buffer == nil }) {
                    let item = try attempt("load item \(id)") { try keychain.item(id: id, itemClass: c, withData: true, caller: caller) }
                    lock.withLock { if file.buffer == nil { file.buffer = item.data ?? [] } }
                }
                lock.withLock {
                    var b = file.buffer!
                    if b.count > size { b.removeLast(b.count - size) } else { b += [UInt8](repeating: 0, count: size - b.count) }
                    file.buffer = b
                    file.dirty = true
                    file.written = true
                    file.generation += 1
                }
                return
            }
            try attempt("truncate item \(id)") {
                var data = size == 0 ? [] : (try keychain.item(id: id, itemClass: c, withData: true, caller: caller).data ?? [])
                if data.count > size { data.removeLast(data.count - size) } else { data += [UInt8](repeating: 0, count: size - data.count) }
                try keychain.update(Query(c, synchronizableAny: true, persistentReference: id), attributes: [:], data: data, caller: caller)
            }
        }
    }

    // MARK: Unlink and rename

    public func unlink(parent: UInt64, name: String, caller: Caller) throws {
        if let s = scratchFile(parent: parent, name: name, caller: caller) {
            _ = lock.withLock { scratch.removeValue(forKey: s.ino) }
            return
        }
        let stat = try lookup(parent: parent, name: name, caller: caller)
        guard let (c, id) = Inode.decodeItem(stat.ino) else { throw FSError(EISDIR) }
        if c == .identity { throw FSError(EPERM) }
        try audited(caller, item: id, "delete") {
            try keychain.delete(Query(c, synchronizableAny: true, persistentReference: id), caller: caller)
        }
    }

    public func rename(parent: UInt64, name: String, newParent: UInt64, newName: String, flags: UInt32, caller: Caller) throws {
        let noReplace = flags & 1 != 0   // RENAME_NOREPLACE
        if flags & 2 != 0 { throw FSError(EINVAL) } // RENAME_EXCHANGE is not supported
        let sourceParent = try node(parent)
        let targetParent = try node(newParent)
        if case .root = sourceParent { throw FSError(EPERM) }
        if case .root = targetParent { throw FSError(EPERM) }
        func classOf(_ n: Node) -> ItemClass? {
            switch n {
            case .classDirectory(let c), .directory(let c, _): c
            default: nil
            }
        }
        guard let sourceClass = classOf(sourceParent), let targetClass = classOf(targetParent) else { throw FSError(ENOTDIR) }
        guard sourceClass == targetClass else { throw FSError(EXDEV) }
        if sourceClass == .identity { throw FSError(EPERM) }

        // A service/server directory: every item in it gets the new service/server.
        if case .classDirectory = sourceParent, sourceClass == .genericPassword || sourceClass == .internetPassword {
            try renameDirectory(sourceClass, from: name, to: newName, noReplace: noReplace, caller: caller)
            return
        }

        // Editor scratch files: in memory; one renamed onto a real name becomes that item.
        if let s = scratchFile(parent: parent, name: name, caller: caller) {
            if PathCodec.isScratchName(newName) {
                lock.withLock {
                    if let old = scratch.values.first(where: { $0.parent == newParent && $0.name == newName }) { scratch.removeValue(forKey: old.ino) }
                    s.parent = newParent
                    s.name = newName
                }
                return
            }
            let data = lock.withLock { s.data }
            try store(data, parent: targetParent, newParent: newParent, name: newName, noReplace: noReplace, caller: caller)
            _ = lock.withLock { scratch.removeValue(forKey: s.ino) }
            return
        }
        let source = try lookup(parent: parent, name: name, caller: caller)
        guard let (_, id) = Inode.decodeItem(source.ino) else { throw FSError(EISDIR) }
        if PathCodec.isScratchName(newName) {
            // An item cannot become an editor scratch file: that would take its secret out of
            // the keychain (and its access control) into daemon memory.
            access.audit?.record(caller, item: id, "rename-to-scratch", allowed: false, why: "EPERM")
            throw FSError(EPERM)
        }
        guard let (_, dirAttrs) = try directoryAttributes(targetParent, caller: caller),
              let key = PathCodec.parseLeaf(targetClass, newName, in: dirAttrs) else { throw FSError(EINVAL) }
        if !noReplace, lock.withLock({ freshItems.contains(id) }),
           let target = try? lookup(parent: newParent, name: newName, caller: caller), let (_, targetID) = Inode.decodeItem(target.ino), targetID != id {
            // `sed -i`, `cp --backup`-less editors: a fresh temp file renamed over an item. The
            // item keeps its attributes (protection class, comment, creation date) and gets the
            // new bytes; the temp item goes. One transaction.
            try audited(caller, item: targetID, "replace-data") {
                try keychain.replaceData(of: Query(targetClass, synchronizableAny: true, persistentReference: targetID),
                                         withDataOf: Query(sourceClass, synchronizableAny: true, persistentReference: id), caller: caller)
            }
            _ = lock.withLock { freshItems.remove(id) }
            invalidate?(.inode(target.ino))
            return
        }
        // A certificate or key is named by its label, which is not part of its primary key:
        // the item the new name denotes is found by name and replaced explicitly.
        var victim: Int64?
        if case .classDirectory = targetParent, let target = try? lookup(parent: newParent, name: newName, caller: caller),
           let (_, targetID) = Inode.decodeItem(target.ino), targetID != id {
            if noReplace { throw FSError(EEXIST) }
            victim = targetID
        }
        try audited(caller, item: id, "rename") {
            try keychain.rename(Query(sourceClass, synchronizableAny: true, persistentReference: id), to: key,
                                replacing: !noReplace, victim: victim, caller: caller)
        }
        if case .directory = targetParent { _ = lock.withLock { emptyDirectories.remove(newParent) } }
    }

    /// Stores bytes under a real name: a new item, or the existing item's new data.
    private func store(_ data: [UInt8], parent: Node, newParent: UInt64, name: String, noReplace: Bool, caller: Caller) throws {
        guard let (c, dirAttrs) = try directoryAttributes(parent, caller: caller),
              let key = PathCodec.parseLeaf(c, name, in: dirAttrs) else { throw FSError(EINVAL) }
        if let existing = try? lookup(parent: newParent, name: name, caller: caller), let (_, id) = Inode.decodeItem(existing.ino) {
            if noReplace { throw FSError(EEXIST) }
            try attempt("replace item \(id)") {
                try keychain.update(Query(c, synchronizableAny: true, persistentReference: id), attributes: [:], data: data, caller: caller)
            }
            invalidate?(.inode(existing.ino))
        } else {
            try attempt("store \(name)") { _ = try keychain.add(c, key, data: data, caller: caller) }
        }
    }

    private func renameDirectory(_ c: ItemClass, from: String, to: String, noReplace: Bool, caller: Caller) throws {
        guard let fromAttrs = PathCodec.parseDirectory(c, from) else { throw FSError(ENOENT) }
        guard let toAttrs = PathCodec.parseDirectory(c, to) else { throw FSError(EINVAL) }
        let moving = try items(inDirectory: c, from, caller: caller)
        let fromIno = directoryInode(c, from)
        if moving.isEmpty {
            guard lock.withLock({ emptyDirectories.contains(fromIno) }) else { throw FSError(ENOENT) }
        }
        if try !items(inDirectory: c, to, caller: caller).isEmpty {
            throw FSError(noReplace ? EEXIST : ENOTEMPTY)
        }
        if !moving.isEmpty {
            var query = Query(c, synchronizableAny: true)
            for (k, v) in fromAttrs { query.attributes[k] = v }
            try attempt("rename directory \(from)") { try keychain.update(query, attributes: toAttrs, caller: caller) }
        }
        lock.withLock {
            emptyDirectories.remove(fromIno)
            if moving.isEmpty {
                let key = c.rawValue + "/" + to
                let ino = directoryInodes[key] ?? { let i = nextDirectory; nextDirectory += 1; directoryInodes[key] = i; directories[i] = (c, to); return i }()
                emptyDirectories.insert(ino)
            }
        }
    }

    // MARK: Extended attributes

    public static let xattrPrefix = "user.keychain."

    private func itemForXattr(_ ino: UInt64, caller: Caller) throws -> KeychainItem? {
        guard case .item(let c, let id) = try node(ino) else { return nil }
        return try statItem(c, id, caller: caller)
    }

    /// The root directory's one attribute: where the control socket is, so that
    /// `keychainfs lock|unlock|status MOUNTPOINT` can find the daemon from the mount alone.
    public static let controlXattr = "user.keychainfs.control"
    public var controlSocketPath: String?

    public func listxattr(_ ino: UInt64, caller: Caller) throws -> [String] {
        if ino == Inode.root { return controlSocketPath == nil ? [] : [Self.controlXattr] }
        guard let item = try itemForXattr(ino, caller: caller) else { return [] }
        return item.attributes.keys.sorted().map { Self.xattrPrefix + $0.name }
    }

    public func getxattr(_ ino: UInt64, name: String, caller: Caller) throws -> [UInt8] {
        // Other namespaces (security.selinux, system.posix_acl_access, which ls asks for on
        // every entry) are simply absent: ENODATA, cheaply.
        if ino == Inode.root, name == Self.controlXattr, let path = controlSocketPath { return Array(path.utf8) }
        guard name.hasPrefix(Self.xattrPrefix) else { throw FSError(ENODATA) }
        guard let item = try itemForXattr(ino, caller: caller) else { throw FSError(ENODATA) }
        let attrName = String(name.dropFirst(Self.xattrPrefix.count))
        guard let attribute = try? Schema.attribute(named: attrName, in: item.itemClass), attribute.name == attrName,
              let value = item.attributes[attribute] else { throw FSError(ENODATA) }
        return AttributeText.render(attribute, value)
    }

    /// setxattr → SecItemUpdate of one attribute. A key attribute moves the file.
    public func setxattr(_ ino: UInt64, name: String, value: [UInt8], flags: Int32, caller: Caller) throws {
        guard name.hasPrefix(Self.xattrPrefix) else { throw FSError(EOPNOTSUPP) }
        guard let (c, id) = Inode.decodeItem(ino) else { throw FSError(EOPNOTSUPP) }
        if c == .identity { throw FSError(EPERM) }
        let item = try attempt("setxattr item \(id)") { try keychain.item(id: id, itemClass: c, withData: false, caller: caller) }
        let attrName = String(name.dropFirst(Self.xattrPrefix.count))
        let attribute: Attribute
        do {
            attribute = try Schema.attribute(named: attrName, in: c)
            guard attribute.name == attrName else { throw FSError(ENODATA) }
        } catch { throw FSError(ENODATA) }
        if flags & 1 != 0 && item.attributes[attribute] != nil { throw FSError(EEXIST) }     // XATTR_CREATE
        if flags & 2 != 0 && item.attributes[attribute] == nil { throw FSError(ENODATA) }    // XATTR_REPLACE
        let parsed = try attempt("setxattr \(attrName) on item \(id)") {
            try AttributeText.parse(attribute, value, currentProtection: item.accessibility)
        }
        let oldDirectory = PathCodec.directory(of: c, item.attributes)
        let oldLeaf = PathCodec.leaf(of: c, item.attributes)
        _ = lock.withLock { freshItems.remove(id) }
        try audited(caller, item: id, "set-\(attrName)") {
            try keychain.update(Query(c, synchronizableAny: true, persistentReference: id), attributes: [attribute: parsed], caller: caller)
        }
        if Schema.isPrimaryKey(attribute, in: c) || attribute == Schema.label {
            // The item's path changed: drop the kernel's cached entries for the old name.
            let parent = oldDirectory.map { directoryInode(c, $0) } ?? Inode.classDirectory(c)
            invalidate?(.entry(parent: parent, name: oldLeaf))
            if let oldDirectory { invalidate?(.entry(parent: Inode.classDirectory(c), name: oldDirectory)) }
        }
        invalidate?(.inode(ino))
    }

    public func removexattr(_ ino: UInt64, name: String, caller: Caller) throws {
        guard name.hasPrefix(Self.xattrPrefix) else { throw FSError(EOPNOTSUPP) }
        _ = try getxattr(ino, name: name, caller: caller)
        // Keychain attributes can be changed, not removed (Apple has no "remove" either).
        throw FSError(EPERM)
    }
}
