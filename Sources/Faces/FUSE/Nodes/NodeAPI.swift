import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import SystemPackage

// The FUSE face by node kind and operation, after go-fuse's fs/api.go: a node is made per
// request from its inode number (`KeychainFileSystem.node(_:)`), and says what it can do by the
// small protocols it adopts. An operation a node does not adopt gets the default stated on its
// protocol, decided once in KeychainFileSystem+Operations.swift. Nodes translate: every
// keychain rule is the core's, and a core failure is thrown as it is (converted to errno once,
// in ErrnoConversion).

/// What `stat` shows for a node.
public struct NodeStat: Sendable {
    public var ino: UInt64
    public var isDirectory: Bool
    public var size: Int
    public var modified: Date
    public var created: Date
    /// A name the kernel must not cache (a memory file: visible to its maker's group only,
    /// and gone without a trace when refused or unlinked).
    public var uncached = false
}

/// One name in a directory listing.
public struct DirectoryEntry: Sendable {
    public let name: String
    public let ino: UInt64
    public let isDirectory: Bool
}

/// What readdir answers for a directory handle: `.` and `..`, then the directory's entries.
/// The two dots are answered from the inodes, not put in front of the entries: a listing of
/// 10,000 names is served from the array it was made in (often the listing cache's own).
public struct DirectoryListing: Sendable {
    public let ino: UInt64
    public let parent: UInt64
    public let entries: [DirectoryEntry]

    public var count: Int { entries.count + 2 }

    public subscript(index: Int) -> DirectoryEntry {
        switch index {
        case 0: DirectoryEntry(name: ".", ino: ino, isDirectory: true)
        case 1: DirectoryEntry(name: "..", ino: parent, isDirectory: true)
        default: entries[index - 2]
        }
    }
}

/// A file handle made by open or create, and what the kernel is told of the file.
public struct Opened: Sendable {
    public let handle: UInt64
    public let stat: NodeStat
}

/// Every node: it has an inode number and a stat (getattr).
protocol Node: Sendable {
    var ino: UInt64 { get }
    var isDirectory: Bool { get }
    func stat(in fs: KeychainFileSystem, caller: Caller) throws -> NodeStat
}

/// A directory. File operations on it (open, truncate, unlink) answer EISDIR.
protocol DirectoryNode: Node {}

extension DirectoryNode {
    var isDirectory: Bool { true }
    func stat(in fs: KeychainFileSystem, caller: Caller) throws -> NodeStat { fs.directoryStat(ino) }
}

/// A directory of the root: a class directory or a view. Listed by the root in the order of
/// `TopLevel.directories`, which also gives its inode number.
protocol TopLevelDirectory: DirectoryNode {
    var name: String { get }
}

extension TopLevelDirectory {
    var ino: UInt64 { TopLevel.inode(of: name) }
}

/// A directory whose files are items of one class. Rename moves items between two such
/// directories of the same class (EXDEV across classes).
protocol ItemDirectory: DirectoryNode {
    var itemClass: ItemClass { get }
    /// The attributes the directory's path gives an item in it (service, server, protocol,
    /// port), or nil when no item can be a file directly in it (`/genp`, `/inet`).
    func keyAttributes(in fs: KeychainFileSystem, caller: Caller) throws -> Attributes?
}

/// lookup. Default: ENOENT in a directory, ENOTDIR in a file.
protocol NodeLookuper: Node {
    func lookup(_ name: String, in fs: KeychainFileSystem, caller: Caller) throws -> NodeStat
}

/// readdir. Default: a directory lists only `.` and `..`; a file is ENOTDIR.
protocol NodeReaddirer: Node {
    /// The names below `.` and `..`.
    func entries(in fs: KeychainFileSystem, caller: Caller) throws -> [DirectoryEntry]
}

/// create (a new file). Default: EPERM in a directory, ENOTDIR in a file.
protocol NodeCreater: Node {
    func create(_ name: String, flags: Int32, in fs: KeychainFileSystem, caller: Caller) throws -> Opened
}

/// mkdir. Default: EPERM.
protocol NodeMkdirer: Node {
    func mkdir(_ name: String, in fs: KeychainFileSystem, caller: Caller) throws -> NodeStat
}

/// rmdir. Default: ENOTDIR.
protocol NodeRmdirer: Node {
    func rmdir(_ name: String, in fs: KeychainFileSystem, caller: Caller) throws
}

/// unlink of this node (asked of the child the name resolves to). Default: EISDIR for a
/// directory, EPERM for a file that cannot be deleted (an identity view).
protocol NodeUnlinker: Node {
    func unlink(in fs: KeychainFileSystem, caller: Caller) throws
}

/// open. Default: EISDIR for a directory.
protocol NodeOpener: Node {
    func open(flags: Int32, in fs: KeychainFileSystem, caller: Caller) throws -> OpenFile
}

/// setattr(size) without an open handle. Default: EISDIR for a directory, EPERM for a file.
protocol NodeTruncater: Node {
    func truncate(to size: Int, in fs: KeychainFileSystem, caller: Caller) throws
}

/// A node whose xattrs are a keychain item's attributes (`user.keychain.*`, see
/// XattrNamespaces.swift). Nodes that do not adopt it have no keychain attributes.
protocol NodeWithItemAttributes: Node {
    /// The item whose attributes the node shows.
    func attributeItem(in fs: KeychainFileSystem, caller: Caller) throws -> KeychainItem
    /// The item an attribute change updates, or nil when the node's attributes are read-only
    /// (EPERM).
    var writableItem: (ItemClass, Int64)? { get }
}
