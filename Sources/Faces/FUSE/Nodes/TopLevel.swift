import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import SystemPackage

/// The root's directories, in inode order (`Inode.firstTopLevel` + index). A new top-level
/// view (say `/views`) is one file with a `TopLevelDirectory` and one line here, at the end:
/// the class directories keep the inode numbers `Inode.classDirectory` gives them.
enum TopLevel {
    static let directories: [any TopLevelDirectory] = [
        GroupedClassDirectory(itemClass: .genericPassword),
        GroupedClassDirectory(itemClass: .internetPassword),
        FlatClassDirectory(itemClass: .certificate),
        FlatClassDirectory(itemClass: .key),
        IdentityView(),
        ViewsDirectory(),
    ]

    static func inode(of name: String) -> UInt64 {
        Inode.firstTopLevel + UInt64(directories.firstIndex { $0.name == name }!)
    }

    static func directory(_ ino: UInt64) -> (any TopLevelDirectory)? {
        guard ino >= Inode.firstTopLevel, ino < Inode.firstTopLevel + UInt64(directories.count) else { return nil }
        return directories[Int(ino - Inode.firstTopLevel)]
    }

    static func directory(named name: String) -> (any TopLevelDirectory)? { directories.first { $0.name == name } }
}

/// `/`: the class directories and views.
struct RootNode: DirectoryNode, NodeLookuper, NodeReaddirer, NodeRmdirer {
    var ino: UInt64 { Inode.root }

    func lookup(_ name: String, in fs: KeychainFileSystem, caller: Caller) throws -> NodeStat {
        guard let top = TopLevel.directory(named: name) else { throw Errno.noSuchFileOrDirectory }
        return fs.directoryStat(top.ino)
    }

    func entries(in fs: KeychainFileSystem, caller: Caller) throws -> [DirectoryEntry] {
        TopLevel.directories.map { DirectoryEntry(name: $0.name, ino: $0.ino, isDirectory: true) }
    }

    /// The class directories are fixed.
    func rmdir(_ name: String, in fs: KeychainFileSystem, caller: Caller) throws { throw Errno.notPermitted }
}
