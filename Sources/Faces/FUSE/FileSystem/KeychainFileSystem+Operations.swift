import Foundation
import Keychain
import KeychainAccess
import SystemPackage

// Each filesystem operation: resolve the node, ask it if it adopts the operation's protocol
// (Nodes/NodeAPI.swift), else answer the protocol's stated default.
extension KeychainFileSystem {
    public func lookup(parent: UInt64, name: String, caller: Caller) throws -> NodeStat {
        let node = try node(parent)
        guard let lookuper = node as? any NodeLookuper else {
            throw node.isDirectory ? Errno.noSuchFileOrDirectory : Errno.notDirectory
        }
        return try lookuper.lookup(name, in: self, caller: caller)
    }

    /// getattr. With a handle whose writes are not committed yet, the size is the buffer's.
    public func getattr(_ ino: UInt64, handle: UInt64?, caller: Caller) throws -> NodeStat {
        var stat = try node(ino).stat(in: self, caller: caller)
        if let handle, let file = try? openFiles.file(handle),
            let size = file.state.withLock({ $0.dirty ? $0.buffer?.count : nil })
        {
            stat.size = size
        }
        return stat
    }

    /// readdir: `.`, `..`, then the node's entries.
    public func list(_ ino: UInt64, caller: Caller) throws -> [DirectoryEntry] {
        let node = try node(ino)
        guard node.isDirectory else { throw Errno.notDirectory }
        let entries = try (node as? any NodeReaddirer)?.entries(in: self, caller: caller) ?? []
        return [
            DirectoryEntry(name: ".", ino: ino, isDirectory: true),
            DirectoryEntry(name: "..", ino: Inode.root, isDirectory: true),
        ]
            + entries
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
    }

    /// setattr(size). Through a handle of the same item, the truncation is buffered with the
    /// handle's writes (committed or dropped with them); otherwise it is one update.
    public func truncate(_ ino: UInt64, size: Int, handle: UInt64?, caller: Caller) throws {
        guard size <= Keychain.maxDataSize else { throw Errno.fileTooLarge }
        let node = try node(ino)
        if let item = node as? ItemNode, let handle, let file = try? openFiles.file(handle),
            case .item(_, let id) = file.currentTarget(), id == item.id
        {
            try loadBuffer(of: file, itemClass: item.itemClass, id: id)
            file.state.withLock { $0.truncateItem(to: size) }
            return
        }
        guard let truncater = node as? any NodeTruncater else {
            throw node.isDirectory ? Errno.isDirectory : Errno.notPermitted
        }
        try truncater.truncate(to: size, in: self, caller: caller)
    }
}
