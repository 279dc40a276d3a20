import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import KeychainCrypto
import SystemPackage

// Operations on open handles: read, write, commit (flush, fsync, release). The handle's state
// machine is stated in State/OpenFiles.swift, a pending certificate's in State/MemoryFiles.swift.
extension KeychainFileSystem {
    /// `fillsPageCache`: the kernel asked in order to fill its page cache, not for a read(2).
    /// With `direct_io` that only happens for an `mmap` of the file (MAP_PRIVATE; the kernel
    /// refuses MAP_SHARED), whose faults the kernel sends without a lock owner, while every
    /// direct read carries its caller's (FUSE_READ_LOCKOWNER). Such a handle's release drops
    /// the file's cached pages; any other release leaves the kernel alone.
    /// Hands `reply` at most `size` bytes of the handle's content from `offset`. A read-only
    /// item handle's bytes are handed over where they are, in its guarded memory; other content
    /// is sliced into an array that is wiped once `reply` returns.
    public func read(
        handle: UInt64, offset: Int, size: Int, fillsPageCache: Bool = true, _ reply: (UnsafeRawBufferPointer) -> Void
    ) throws {
        let file = try openFiles.file(handle)
        if fillsPageCache { file.state.withLock { $0.pageCacheFilled = true } }
        var bytes: [UInt8]
        switch file.currentTarget() {
        case .memory(let memory):
            bytes = memory.state.withLock { FileBytes.slice($0.data, offset: offset, size: size) }
        case .generated(let generated):
            bytes = FileBytes.slice(generated, offset: offset, size: size)
        case .changes(let feed):
            bytes = try feed.read(size, through: session(feed.caller))
        case .item(let c, let id):
            // The handle serves what it decrypted at open (a snapshot: one committed state,
            // whole), until it is revoked (Revocation.swift).
            decideAgainIfDue(file, itemClass: c, id: id)
            let (guarded, sliced) = try file.state.withLock { s -> (GuardedBytes?, [UInt8]) in
                if let revoked = s.revoked { throw revoked }
                if let guarded = s.guarded { return (guarded, []) }
                return (nil, FileBytes.slice(s.view, offset: offset, size: size))
            }
            // The reply is written outside the handle's lock: the RELEASE of a `cat` arrives as
            // soon as the reply is read, and a lock held across the write(2) made it spin on one
            // CPU. The region outlives a release that drops it meanwhile: it is wiped and given
            // back when this reference goes too.
            if let guarded { return guarded.withSlice(offset: offset, size: size, reply) }
            bytes = sliced
        }
        bytes.withUnsafeBytes(reply)
        for i in bytes.indices { bytes[i] = 0 }
    }

    public func write(handle: UInt64, offset: Int, bytes: UnsafeRawBufferPointer, lockOwner: UInt64? = nil) throws
        -> Int
    {
        let file = try openFiles.file(handle)
        if case .memory(let memory) = file.currentTarget(),
            let written = try writeMemory(memory, of: file, offset: offset, bytes: bytes)
        {
            return written
        }
        // An item handle, or a pending certificate that was added (by this handle's or another's
        // commit) between choosing the target and writing: the bytes go to the item's view.
        guard case .item(let c, _) = file.currentTarget() else { throw Errno.ioError }
        if c == .identity { throw Errno.badFileDescriptor }
        return try file.state.withLock { s in
            // 0: the kernel named no owner (FUSE_WRITE_LOCKOWNER unset); any flush commits then.
            if let lockOwner, lockOwner != 0 { s.writers.insert(lockOwner) }
            return try s.writeItem(bytes, at: offset, append: file.append)
        }
    }

    /// A write to a memory file, decided under the handle's and the file's locks together; nil
    /// when the file is no longer this handle's target (it was added meanwhile).
    private func writeMemory(_ memory: MemoryFile, of file: OpenFile, offset: Int, bytes: UnsafeRawBufferPointer)
        throws -> Int?
    {
        try file.state.withLock { s in
            if let failed = s.failed { throw failed }
            guard case .memory(let target) = s.target, target === memory else { return nil }
            return try memory.state.withLock { m in
                guard m.added == nil else { return nil }
                let start = file.append ? m.data.count : offset
                guard start + bytes.count <= memory.sizeLimit else {
                    if memory.isPendingItem {
                        s.failed = .fileTooLarge
                        m.data = []
                    }
                    throw Errno.fileTooLarge
                }
                FileBytes.write(bytes, into: &m.data, at: start)
                m.modified = .now
                s.generation += 1
                return bytes.count
            }
        }
    }

    /// Commits a handle's edits as one SecItemUpdate (or a pending certificate's bytes as
    /// SecItemAdd). A failure leaves the stored secret intact and is reported to flush/fsync
    /// (so close(2) sees it).
    ///
    /// `flushOwner`: the lock owner of a FLUSH (close of one descriptor); see
    /// `OpenFile.State.pendingCommit`.
    public func commit(handle: UInt64, releasing: Bool = false, flushOwner: UInt64? = nil) throws {
        let file = try openFiles.file(handle)
        let target = file.currentTarget()
        let failed = file.state.withLock { $0.failed }
        if let failed, case .memory(let memory) = target {
            if releasing, memory.isPendingItem { forget(memory) }
            throw failed
        }
        switch target {
        case .memory(let memory):
            try commitPending(memory, file: file, releasing: releasing)
        case .generated, .changes:
            return
        case .item(let c, let id):
            // A refused handle may still have to put back what it had committed (refuse()).
            if let (edits, _) = file.state.withLock({ $0.pendingCommit(flushOwner: flushOwner) }) {
                try commitEdits(edits, of: file, itemClass: c, id: id)
            }
            if let failed { throw failed }
            // A create this handle made and wrote nothing to (touch, or a close before the
            // writes): its empty item is made durable now.
            if file.state.withLock({ $0.owesDurableCreate }) {
                try session(file.caller).makeCommitsDurable()
                file.state.withLock { $0.owesDurableCreate = false }
            }
        }
    }

    /// Replays a handle's edits onto the item as stored now, in one SecItemUpdate: another
    /// handle's commit since this handle's open is kept, except where this handle wrote. An
    /// item deleted meanwhile (by the CLI, another process) fails the commit with ENOENT, so
    /// the lost write is reported by close(2) rather than silent.
    ///
    /// When nothing was committed anywhere since the handle's snapshot (the vault's change stamp
    /// is the one recorded with it), the snapshot is what is stored and is not read back: that
    /// read was 8% of a durable write. Nor is it when the edits truncate to nothing (an open
    /// with O_TRUNC, then writes): what they make does not depend on what they start from, so
    /// the edits from the last such truncation are replayed on nothing. An item deleted
    /// meanwhile still fails: the update re-checks visibility and lock state itself.
    private func commitEdits(_ edits: [FileEdit], of file: OpenFile, itemClass c: ItemClass, id: Int64) throws {
        let emptied = edits.lastIndex { if case .truncate(0) = $0 { true } else { false } }
        let session = self.session(file.caller)
        let stored = try commits.withLock(item: id) { () -> [UInt8] in
            if let emptied {
                var content: [UInt8] = []
                for edit in edits[(emptied + 1)...] { edit.apply(to: &content) }
                return try session.write(id: id, itemClass: c) { _ in content }
            }
            let before = try? session.changeStamp()
            let (snapshot, snapshotStamp) = file.state.withLock { ($0.snapshot, $0.snapshotStamp) }
            let unchanged = before != nil && before == snapshotStamp
            return try session.write(id: id, itemClass: c, readFirst: !unchanged) { current in
                var content = unchanged ? snapshot : FileContent.of(c, current)
                for edit in edits { edit.apply(to: &content) }
                return content
            }
        }
        // The stamp after this commit is not recorded (another process may have committed
        // too): the handle's next commit reads the item back. One commit per handle (open,
        // write, close) is the common case.
        file.state.withLock { $0.committed(stored, editCount: edits.count, stamp: nil) }
        itemChanged(file.ino, by: file)
    }

    /// A pending certificate becomes an item at the first commit that has bytes: SecItemAdd,
    /// which parses it: not a certificate is EINVAL, nothing is stored, and the name is free.
    private func commitPending(_ memory: MemoryFile, file: OpenFile, releasing: Bool) throws {
        guard case .pendingItem(let c, let key) = memory.kind else { return }
        // Unlinked while still being written: it never becomes an item. (One decision: the
        // table, the handle and the file are read under their locks together.)
        guard
            let data = memoryFiles.whilePresent(
                memory, { memory.state.withLock { m in m.added == nil ? m.data : nil } }) ?? nil
        else { return }
        if data.isEmpty {
            // Nothing to add: a certificate cannot exist empty. The name lasts while a handle
            // is open on it (touch, then write), and goes at release.
            if releasing { forget(memory) }
            return
        }
        do {
            let item = try session(file.caller).create(c, key, data: data).item
            // Created through the mount: rsync's temp file `.c.XXXXXX`, written and closed, then
            // given c's label xattr before its rename (XattrNamespaces.swift).
            memoryFiles.markCreated(item.id)
            let (parent, name) = file.state.withLock { s in
                memory.state.withLock { m in
                    m.added = (c, item.id)
                    m.addedContent = m.data
                    // From now on this handle is an ordinary item handle: later writes update
                    // the item. What it wrote is what it reads back.
                    s.target = .item(c, item.id)
                    s.original = m.data
                    s.snapshot = m.data
                    s.view = m.data
                    s.edits = []
                    m.data = []
                    return (m.parent, m.name)
                }
            }
            notify(.entry(parent: parent, name: name))
        } catch {
            forget(memory)
            throw error
        }
    }

    /// A memory file that goes: out of the table, and its name out of the kernel's cache.
    func forget(_ memory: MemoryFile) {
        memoryFiles.remove(memory)
        let (parent, name) = memory.state.withLock { ($0.parent, $0.name) }
        notify(.entry(parent: parent, name: name))
    }

    public func release(handle: UInt64) {
        do { try commit(handle: handle, releasing: true) } catch {
            let errno = ErrnoConversion.errno(for: error, during: "release of handle \(handle)")
            Log.warning("release: a buffered write was not committed (\(errno))")
        }
        if let file = openFiles.remove(handle) {
            // A poll waiting on a change feed is let go.
            if case .changes(let feed) = file.state.withLock({ $0.target }) { feed.close() }
            // The handle's copy of the secret goes with it.
            let pageCacheFilled = file.state.withLock { s in
                s.dropContent()
                return s.pageCacheFilled
            }
            // direct_io keeps read(2) out of the page cache, but an mmap of the file still goes
            // through it: drop such pages when the handle that filled them is released (its
            // last mapping is gone by then). A handle that only read(2) sends nothing.
            if pageCacheFilled { notify(.inode(file.ino)) }
        }
    }
}
