import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import SystemPackage

/// A file that is an item: `/genp/<service>/<account>`, `/inet/…/<account>`, `/cert/<label>`,
/// `/keys/<label>`. Its content is the item's data (a certificate shown as PEM), its xattrs the
/// item's attributes; open decides access once and binds it to the handle.
struct ItemNode: NodeOpener, NodeUnlinker, NodeTruncater, NodeWithItemAttributes {
    let itemClass: ItemClass
    let id: Int64
    var ino: UInt64 { Inode.item(itemClass, id: id) }
    var isDirectory: Bool { false }
    var writableItem: (ItemClass, Int64)? { (itemClass, id) }
    var query: Query { Query(itemClass, synchronizableAny: true, persistentReference: id) }

    func stat(in fs: KeychainFileSystem, caller: Caller) throws -> NodeStat {
        fs.itemStat(try attributeItem(in: fs, caller: caller))
    }

    /// The attributes as of a moment ago, unless this daemon changed something since: at most
    /// the kernel's cache lifetime (`-o cache`, and never more than a second), the window in
    /// which the kernel's own caches show changes made elsewhere.
    func attributeItem(in fs: KeychainFileSystem, caller: Caller) throws -> KeychainItem {
        try fs.session(caller).attributes(id: id, itemClass: itemClass, recentWithin: fs.cacheSeconds)
    }

    /// The access decision is taken here and bound to the handle: the item is visible to this
    /// caller, its class key is available (lock state), and user presence is given (which may
    /// prompt; O_NONBLOCK never prompts: EAGAIN). The content is decrypted once, into the
    /// handle (its snapshot: OpenFiles.swift); each read re-checks only the class key.
    /// O_TRUNC empties the file as on ext4, committed by the handle's first flush.
    func open(flags: Int32, in fs: KeychainFileSystem, caller given: Caller) throws -> OpenFile {
        var caller = given
        if flags & O_NONBLOCK != 0 { caller.authenticationUI = .fail }
        let access = flags & O_ACCMODE
        let writing = access == O_WRONLY || access == O_RDWR
        let truncating = writing && flags & O_TRUNC != 0
        let operation: AuditOperation = truncating ? .openTruncate : writing ? .openWrite : .openRead
        // Taken before the read: a commit in between leaves the stamp behind, never ahead.
        // Not for O_TRUNC: its handle's edits start with the truncation, which the commit
        // replays on nothing, so the stamp would never be read (it cost a reading-connection
        // query per durable `> file`, ~3 % of its CPU). Truncating an item that is empty
        // records the truncation too, committed only with the handle's writes
        // (`deferredTruncation`): two such writers leave one whole value, never a mix.
        let session = fs.session(caller)
        let stamp = writing && !truncating ? try? session.changeStamp() : nil
        let (item, granted) = try session.open(id: id, itemClass: itemClass, as: operation)
        let file = OpenFile(
            ino: ino, target: .item(itemClass, id), caller: granted, append: flags & O_APPEND != 0,
            accessibility: item.accessibility, openedStat: fs.itemStat(item))
        let content = FileContent.of(itemClass, item.data ?? [])
        if writing {
            try file.state.withLock { s in
                s.original = content
                s.snapshot = s.original
                s.snapshotStamp = stamp
                s.view = s.original
                if truncating { try s.truncateAtOpen() }
            }
        } else {
            // A reader's copy lives in guarded memory (the PEM of a certificate is a second
            // array, the plain data shares the decrypted one).
            try file.state.withLock { try $0.holdReadOnly(content, madeFrom: item.data) }
        }
        return file
    }

    func unlink(in fs: KeychainFileSystem, caller: Caller) throws {
        try fs.session(caller).delete(query)
    }

    func truncate(to size: Int, in fs: KeychainFileSystem, caller: Caller) throws {
        try fs.commits.withLock(item: id) {
            _ = try fs.session(caller).write(id: id, itemClass: itemClass, readFirst: size != 0) { current in
                var data = size == 0 ? [] : FileContent.of(itemClass, current)
                FileBytes.resize(&data, to: size)
                return data
            }
        }
    }
}

/// An editor scratch file or a pending item (MemoryFiles.swift): bytes in daemon memory,
/// visible only to processes in its maker's access group.
struct MemoryFileNode: NodeOpener, NodeTruncater {
    let file: MemoryFile
    var ino: UInt64 { file.ino }
    var isDirectory: Bool { false }

    func stat(in fs: KeychainFileSystem, caller: Caller) throws -> NodeStat { file.stat() }

    func open(flags: Int32, in fs: KeychainFileSystem, caller: Caller) throws -> OpenFile {
        guard file.isVisible(to: caller) else { throw Errno.noSuchFileOrDirectory }
        if flags & O_TRUNC != 0 { file.state.withLock { $0.data = [] } }
        return OpenFile(ino: ino, target: .memory(file), caller: caller, append: flags & O_APPEND != 0)
    }

    func truncate(to size: Int, in fs: KeychainFileSystem, caller: Caller) throws {
        file.state.withLock { FileBytes.resize(&$0.data, to: size) }
    }
}
