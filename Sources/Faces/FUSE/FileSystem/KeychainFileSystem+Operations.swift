import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import SystemPackage

// Each filesystem operation: resolve the node, ask it if it adopts the operation's protocol
// (Nodes/NodeAPI.swift), else answer the protocol's stated default.
extension KeychainFileSystem {
    public func lookup(parent: UInt64, name: String, caller: Caller) throws -> NodeStat {
        let node = try node(parent)
        // The usual parents, cast to their own types: no conformance lookup (a protocol cast is
        // one per request, in the runtime's conformance cache).
        if let directory = node as? GroupDirectory { return try directory.lookup(name, in: self, caller: caller) }
        if let directory = node as? GroupedClassDirectory {
            return try directory.lookup(name, in: self, caller: caller)
        }
        guard let lookuper = node as? any NodeLookuper else {
            throw node.isDirectory ? Errno.noSuchFileOrDirectory : Errno.notDirectory
        }
        return try lookuper.lookup(name, in: self, caller: caller)
    }

    /// getattr. While a handle holds uncommitted edits, the size is its view's (the kernel's
    /// fstat does not name the handle, so any handle on the inode counts).
    public func getattr(_ ino: UInt64, handle: UInt64?, caller: Caller) throws -> NodeStat {
        var stat: NodeStat
        do { stat = try node(ino).stat(in: self, caller: caller) } catch {
            // Unlinked or replaced while open: the open handles still have it.
            guard let orphan = openFiles.orphanStat(of: ino, for: caller) else { throw error }
            return orphan
        }
        if let handle, let file = try? openFiles.file(handle),
            let size = file.state.withLock({ $0.dirty ? $0.view.count : nil })
        {
            stat.size = size
        } else if let size = openFiles.uncommittedSize(of: stat.ino) {
            stat.size = size
        }
        return stat
    }

    /// readdir: `.`, `..`, then the node's entries.
    public func list(_ ino: UInt64, caller: Caller) throws -> DirectoryListing {
        let node = try node(ino)
        guard node.isDirectory else { throw Errno.notDirectory }
        let entries =
            try (node as? GroupDirectory)?.entries(in: self, caller: caller)
            ?? (node as? any NodeReaddirer)?.entries(in: self, caller: caller) ?? []
        return DirectoryListing(ino: ino, parent: Inode.root, entries: entries)
    }

    public func mkdir(parent: UInt64, name: String, caller: Caller) throws -> NodeStat {
        guard let mkdirer = try node(parent) as? any NodeMkdirer else { throw Errno.notPermitted }
        return try mkdirer.mkdir(name, in: self, caller: caller)
    }

    public func rmdir(parent: UInt64, name: String, caller: Caller) throws {
        guard let rmdirer = try node(parent) as? any NodeRmdirer else { throw Errno.notDirectory }
        try rmdirer.rmdir(name, in: self, caller: caller)
    }

    public func create(parent: UInt64, name: String, flags: Int32, caller: Caller) throws -> Opened {
        let node = try node(parent)
        guard let creater = node as? any NodeCreater else {
            throw node.isDirectory ? Errno.notPermitted : Errno.notDirectory
        }
        return try creater.create(name, flags: flags, in: self, caller: caller)
    }

    public func open(_ ino: UInt64, flags: Int32, caller: Caller) throws -> UInt64 {
        let node = try node(ino)
        // An item, nearly always: a cast to the type itself needs no conformance lookup.
        if let item = node as? ItemNode {
            return openFiles.register(try item.open(flags: flags, in: self, caller: caller))
        }
        guard let opener = node as? any NodeOpener else { throw Errno.isDirectory }
        return openFiles.register(try opener.open(flags: flags, in: self, caller: caller))
    }

    /// unlink: a memory file by its name, else the node the name resolves to.
    public func unlink(parent: UInt64, name: String, caller: Caller) throws {
        if let file = memoryFile(named: name, in: parent, caller: caller) {
            memoryFiles.remove(file)
            return
        }
        let child = try node(try lookup(parent: parent, name: name, caller: caller).ino)
        guard let unlinker = child as? any NodeUnlinker else {
            throw child.isDirectory ? Errno.isDirectory : Errno.notPermitted
        }
        try unlinker.unlink(in: self, caller: caller)
        // A service directory stays when its last item goes this way (a shell may sit in it).
        if directories.directory(parent) != nil { directories.keep(parent) }
    }

    /// setattr(size). Through a handle of the same item (ftruncate), the truncation is one of
    /// the handle's edits, committed with them by its next flush; otherwise it is one update.
    public func truncate(_ ino: UInt64, size: Int, handle: UInt64?, caller: Caller) throws {
        guard size <= Keychain.maxDataSize else { throw Errno.fileTooLarge }
        let node = try node(ino)
        if let item = node as? ItemNode, let handle, let file = try? openFiles.file(handle),
            case .item(_, let id) = file.currentTarget(), id == item.id
        {
            try file.state.withLock { try $0.truncateItem(to: size) }
            return
        }
        guard let truncater = node as? any NodeTruncater else {
            throw node.isDirectory ? Errno.isDirectory : Errno.notPermitted
        }
        try truncater.truncate(to: size, in: self, caller: caller)
    }
}
