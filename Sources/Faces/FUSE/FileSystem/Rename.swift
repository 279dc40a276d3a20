import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import SystemPackage

// rename: what moving a name means for the keychain.
// - a service/server directory: every item in it gets the new service/server;
// - an editor scratch file: renamed in memory, or onto a real name it becomes that item;
// - a fresh temp file (`sed -i`) onto an item: the item gets its bytes and keeps its attributes;
// - an item: SecItemUpdate of its key attributes, replacing the item the new name denotes.
extension KeychainFileSystem {
    public func rename(parent: UInt64, name: String, newParent: UInt64, newName: String, flags: UInt32, caller: Caller)
        throws
    {
        let noReplace = flags & 1 != 0  // RENAME_NOREPLACE
        if flags & 2 != 0 { throw Errno.invalidArgument }  // RENAME_EXCHANGE is not supported
        let sourceNode = try node(parent)
        let targetNode = try node(newParent)
        if sourceNode is RootNode || targetNode is RootNode { throw Errno.notPermitted }
        guard let source = sourceNode as? any ItemDirectory, let target = targetNode as? any ItemDirectory else {
            throw Errno.notDirectory
        }
        guard source.itemClass == target.itemClass else { throw Errno.improperLink }
        let itemClass = source.itemClass
        if itemClass == .identity { throw Errno.notPermitted }

        if let grouped = source as? GroupedClassDirectory {
            try grouped.renameDirectory(from: name, to: newName, noReplace: noReplace, in: self, caller: caller)
            return
        }
        if let memory = memoryFile(named: name, in: parent, caller: caller) {
            try renameMemoryFile(memory, to: target, newName: newName, noReplace: noReplace, caller: caller)
            return
        }
        guard let (_, id) = Inode.decodeItem(try lookup(parent: parent, name: name, caller: caller).ino) else {
            throw Errno.isDirectory
        }
        if PathCodec.isScratchName(newName) {
            // An item cannot become an editor scratch file: that would take its secret out of
            // the keychain (and its access control) into daemon memory.
            session(caller).refused(id, .renameToScratch, why: "EPERM")
            throw Errno.notPermitted
        }
        guard let dirAttrs = try target.keyAttributes(in: self, caller: caller),
            let key = PathCodec.parseLeaf(itemClass, newName, in: dirAttrs)
        else { throw Errno.invalidArgument }
        // The item the new name denotes matters only to a fresh temp file (whose bytes it gets)
        // and in /cert and /keys (where it is replaced by name): only then is it looked up.
        let existing =
            (!noReplace && memoryFiles.isFresh(id)) || target is FlatClassDirectory
            ? try? lookup(parent: newParent, name: newName, caller: caller) : nil
        let existingID = existing.flatMap { Inode.decodeItem($0.ino) }.map(\.1).flatMap { $0 == id ? nil : $0 }
        if !noReplace, memoryFiles.isFresh(id), let existing, let existingID {
            // `sed -i` and friends: a fresh temp file renamed over an item. The item keeps its
            // attributes (protection class, comment, creation date) and gets the new bytes; the
            // temp item goes. One transaction.
            try session(caller).replaceData(of: existingID, withDataOf: id, itemClass: itemClass)
            memoryFiles.forgetFresh(id)
            memoryFiles.forgetCreated(id)
            // The kernel now holds the temp's inode under the item's name: it stands for the
            // item from here on, so `cat f` right after `sed -i` finds it.
            aliases.alias(Inode.item(itemClass, id: id), replacing: id, to: itemClass, id: existingID)
            itemChanged(existing.ino)
            return
        }
        // A certificate or key is named by its label, which is not part of its primary key:
        // the item the new name denotes is found by name and replaced explicitly.
        var victim: Int64?
        if target is FlatClassDirectory, let existingID {
            if noReplace { throw Errno.fileExists }
            victim = existingID
        }
        try session(caller).rename(id: id, itemClass: itemClass, to: key, replacing: !noReplace, victim: victim)
        memoryFiles.forgetCreated(id)
        directories.unmarkEmpty(newParent)
        if parent != newParent, directories.directory(parent) != nil { directories.keep(parent) }
    }

    /// An editor scratch file renamed: to another scratch name it stays in memory; onto a real
    /// name its bytes are stored there (a new item, or the existing item's new data).
    private func renameMemoryFile(
        _ memory: MemoryFile, to target: any ItemDirectory, newName: String, noReplace: Bool,
        caller: Caller
    ) throws {
        if PathCodec.isScratchName(newName) {
            memoryFiles.move(memory, to: target.ino, name: newName)
            return
        }
        let data = memory.state.withLock { $0.data }
        guard let dirAttrs = try target.keyAttributes(in: self, caller: caller),
            let key = PathCodec.parseLeaf(target.itemClass, newName, in: dirAttrs)
        else { throw Errno.invalidArgument }
        let id: Int64
        if let existing = try? lookup(parent: target.ino, name: newName, caller: caller),
            let (_, existingID) = Inode.decodeItem(existing.ino)
        {
            if noReplace { throw Errno.fileExists }
            try session(caller).write(id: existingID, itemClass: target.itemClass) { _ in data }
            itemChanged(existing.ino)
            id = existingID
        } else {
            id = try session(caller).create(target.itemClass, key, data: data).item.id
        }
        // The kernel now holds the scratch file's inode under the new name: it stays an alias
        // of the item (as a pending certificate's does once added).
        memory.state.withLock {
            $0.added = (target.itemClass, id)
            $0.addedContent = []
            $0.data = []
        }
    }
}
