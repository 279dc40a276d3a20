import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import SystemPackage
import Synchronization

/// The filesystem face of a keychain: resolves inode numbers to nodes (Nodes/), keeps the
/// mount's tables (State/), and answers each filesystem operation by asking the node that
/// adopts it (KeychainFileSystem+Operations.swift, +Handles.swift, Rename.swift,
/// XattrNamespaces.swift). Keychain rules stay in the core; failures are converted to errno
/// once, by the session (ErrnoConversion).
public final class KeychainFileSystem: Sendable {
    public let uid: uid_t
    public let gid: gid_t
    let mountTime = Date()

    /// Who is calling, which groups that gives, prompts, and the audit log; and the door
    /// (`session(_:)`): the face holds no `Keychain` and reaches it only through a session.
    public let access: AccessLayer

    let directories = DirectoryTable()
    let listings = ListingCache()
    let memoryFiles = MemoryFiles()
    let openFiles = OpenFiles()
    let aliases = InodeAliases()
    /// Held per item while a handle's edits are replayed onto it (ItemCommitLocks.swift).
    let commits = ItemCommitLocks()

    private struct Hooks {
        var invalidate: (@Sendable (Invalidation) -> Void)?
        var replayer: ChangeReplayer?
        var controlSocketPath: String?
        var cacheSeconds: Double = 1.0
    }
    private let hooks = Mutex(Hooks())

    /// Called (off the request thread) when the kernel's cached view of a node went stale.
    public var invalidate: (@Sendable (Invalidation) -> Void)? {
        get { hooks.withLock { $0.invalidate } }
        set { hooks.withLock { $0.invalidate = newValue } }
    }

    /// The replay of changes made elsewhere to the mount's watchers, while the mount is served.
    var replayer: ChangeReplayer? {
        get { hooks.withLock { $0.replayer } }
        set { hooks.withLock { $0.replayer = newValue } }
    }

    /// Where the control socket is: the root's `user.keychainfs.control` xattr, so that
    /// `keychainfs lock|unlock|status MOUNTPOINT` finds the daemon from the mount alone.
    public var controlSocketPath: String? {
        get { hooks.withLock { $0.controlSocketPath } }
        set { hooks.withLock { $0.controlSocketPath = newValue } }
    }

    /// The kernel's entry and attribute cache lifetime (`-o cache`), set by the session: attribute
    /// reads may answer from rows read that recently (at most a second: RecentRows).
    public var cacheSeconds: Double {
        get { hooks.withLock { $0.cacheSeconds } }
        set { hooks.withLock { $0.cacheSeconds = newValue } }
    }

    public enum Invalidation: Sendable {
        /// The kernel's cached attributes and pages of an inode.
        case inode(UInt64)
        /// The kernel's cached attributes of an inode only (size, times): what a commit of
        /// bytes changes when no handle on the inode filled the page cache.
        case attributes(UInt64)
        case entry(parent: UInt64, name: String)
        /// The name an item no longer has after a request on the item itself changed its path
        /// (a setxattr of a key attribute). The request waits a bounded time for the kernel to
        /// drop it, so the old name is gone by the caller's next call (FuseSession).
        case nameLeft(parent: UInt64, name: String)
    }

    /// A mount over the access layer of its service (its own, or the one `keychainfs mount`
    /// joins): the same policy, presence ledger and audit as every face the service hosts.
    public init(access: AccessLayer, uid: uid_t = getuid(), gid: gid_t = getgid()) {
        self.uid = uid
        self.gid = gid
        self.access = access
        access.onDamagedRow { Log.warning("skipped a damaged row: \($0)") }
        access.onLock { [weak self] in self?.revokeAfterLock() }
        access.onCommit { [weak self] in self?.committed($0) }
        access.beforeWriterReturns { [weak self] in self?.beforeWriterReturns($0) }
    }

    /// The door for one request's caller (KeychainSession+Mount.swift: the mount's verbs).
    func session(_ caller: Caller) -> KeychainSession { access.session(caller) }

    func notify(_ what: Invalidation) { invalidate?(what) }

    // MARK: Inode → node

    func node(_ ino: UInt64) throws -> any Node {
        if ino == Inode.root { return RootNode() }
        if let top = TopLevel.directory(ino) { return top }
        if let (c, id) = aliases.target(of: ino) ?? Inode.decodeItem(ino) {
            return c == .identity ? IdentityNode(certificateID: id) : ItemNode(itemClass: c, id: id)
        }
        if let view = ViewFiles.file(ino) { return view }
        if Inode.isScratch(ino) {
            guard let file = memoryFiles.file(ino) else { throw Errno.noSuchFileOrDirectory }
            // An added pending item: the kernel may still use the inode it had for the name.
            if let (c, id) = file.state.withLock({ $0.added }) { return ItemNode(itemClass: c, id: id) }
            return MemoryFileNode(file: file)
        }
        if let (c, spelling) = directories.directory(ino) {
            return GroupDirectory(itemClass: c, spelling: spelling, ino: ino)
        }
        throw Errno.noSuchFileOrDirectory
    }

    // MARK: Stats

    func directoryStat(_ ino: UInt64) -> NodeStat {
        NodeStat(ino: ino, isDirectory: true, size: 0, modified: mountTime, created: mountTime)
    }

    func itemStat(_ item: KeychainItem) -> NodeStat {
        NodeStat(
            ino: Inode.item(item.itemClass, id: item.id), isDirectory: false,
            size: FileContent.length(item.itemClass, item.dataLength),
            modified: item.modificationDate ?? mountTime, created: item.creationDate ?? mountTime)
    }
}

/// What a file shows of an item's data. A certificate is stored as DER (Apple's value) and
/// shown as PEM, which is what openssl, curl and Python's ssl read; everything else is shown
/// byte for byte.
enum FileContent {
    static func of(_ itemClass: ItemClass, _ data: [UInt8]) -> [UInt8] {
        itemClass == .certificate && !data.isEmpty ? CertificateData.pem(data) : data
    }

    static func length(_ itemClass: ItemClass, _ dataLength: Int) -> Int {
        guard itemClass == .certificate, dataLength > 0 else { return dataLength }
        let b64 = (dataLength + 2) / 3 * 4
        return "-----BEGIN CERTIFICATE-----\n".utf8.count + b64 + (b64 + 63) / 64
            + "-----END CERTIFICATE-----\n".utf8.count
    }
}
