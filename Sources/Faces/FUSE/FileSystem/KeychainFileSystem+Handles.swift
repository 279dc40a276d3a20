import Foundation
import Keychain
import KeychainAccess
import SystemPackage

// Operations on open handles: read, write, commit (flush, fsync, release). The handle's state
// machine is stated in State/OpenFiles.swift, a pending item's in State/MemoryFiles.swift.
extension KeychainFileSystem {
    public func read(handle: UInt64, offset: Int, size: Int) throws -> [UInt8] {
        let file = try openFiles.file(handle)
        let data: [UInt8]
        switch file.currentTarget() {
        case .memory(let memory):
            data = memory.state.withLock { $0.data }
        case .generated(let bytes):
            data = bytes
        case .item(let c, let id):
            if let buffered = file.state.withLock({ $0.dirty ? $0.buffer : nil }) {
                data = buffered
            } else if c == .identity {
                data = try keychain.identityBundle(certificateID: id, caller: file.caller)
            } else {
                // Every read goes through the store and the access check.
                data = FileContent.of(
                    c, try keychain.item(id: id, itemClass: c, withData: true, caller: file.caller).data ?? [])
            }
        }
        return FileBytes.slice(data, offset: offset, size: size)
    }

    public func write(handle: UInt64, offset: Int, bytes: UnsafeRawBufferPointer) throws -> Int {
        let file = try openFiles.file(handle)
        if case .memory(let memory) = file.currentTarget(),
            let written = try writeMemory(memory, of: file, offset: offset, bytes: bytes)
        {
            return written
        }
        // An item handle, or a pending item that was added (by this handle's or another's
        // commit) between choosing the target and writing: the bytes go to the item's buffer.
        guard case .item(let c, let id) = file.currentTarget() else { throw Errno.ioError }
        if c == .identity { throw Errno.badFileDescriptor }
        try loadBuffer(of: file, itemClass: c, id: id)
        return try file.state.withLock { try $0.writeItem(bytes, at: offset, append: file.append) }
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
                s.dirty = true
                s.generation += 1
                return bytes.count
            }
        }
    }

    /// Loads an item handle's buffer with the file's current content, if it has none yet.
    func loadBuffer(of file: OpenFile, itemClass: ItemClass, id: Int64) throws {
        guard file.state.withLock({ $0.buffer == nil }) else { return }
        let item = try keychain.item(id: id, itemClass: itemClass, withData: true, caller: file.caller)
        file.state.withLock { s in
            if s.buffer == nil { s.buffer = FileContent.of(itemClass, item.data ?? []) }
        }
    }

    /// Commits a handle's buffered writes as one SecItemUpdate (or a pending item's bytes as
    /// SecItemAdd). A failure leaves the old secret intact and is reported to flush/fsync (so
    /// close(2) sees it).
    public func commit(handle: UInt64, releasing: Bool = false) throws {
        let file = try openFiles.file(handle)
        let target = file.currentTarget()
        if let failed = file.state.withLock({ $0.failed }) {
            if releasing, case .memory(let memory) = target, memory.isPendingItem { memoryFiles.remove(memory) }
            throw failed
        }
        switch target {
        case .memory(let memory):
            try commitPending(memory, file: file, releasing: releasing)
        case .generated:
            return
        case .item(let c, let id):
            guard let (buffer, generation) = file.state.withLock({ $0.pendingCommit(releasing: releasing) }) else {
                return
            }
            try audited(file.caller, item: id, .write) {
                _ = try keychain.update(
                    Query(c, synchronizableAny: true, persistentReference: id),
                    attributes: [:], data: buffer, caller: file.caller)
            }
            file.state.withLock { $0.committed(generation: generation) }
            notify(.inode(file.ino))
        }
    }

    /// A pending item becomes an item at the first commit that has bytes (or at release):
    /// SecItemAdd. For a certificate the add parses it: not a certificate is EINVAL, and
    /// nothing is stored.
    private func commitPending(_ memory: MemoryFile, file: OpenFile, releasing: Bool) throws {
        guard case .pendingItem(let c, let key) = memory.kind else { return }
        // Unlinked while still being written: it never becomes an item. (One decision: the
        // table, the handle and the file are read under their locks together.)
        guard
            let (data, dirty, generation) = memoryFiles.whilePresent(
                memory,
                {
                    file.state.withLock { s in
                        memory.state.withLock { m in m.added == nil ? (m.data, s.dirty, s.generation) : nil }
                    }
                }) ?? nil
        else { return }
        guard dirty || releasing else { return }
        if data.isEmpty && !releasing { return }
        do {
            let item = try audited(file.caller, item: nil, .create) {
                try keychain.add(c, key, data: data, caller: file.caller)
            }
            let (parent, name) = file.state.withLock { s in
                memory.state.withLock { m in
                    m.added = (c, item.id)
                    // From now on this handle is an ordinary item handle: later writes update
                    // the item. What it wrote is what it reads back; a write that landed during
                    // the add is committed by the next flush as an update.
                    s.target = .item(c, item.id)
                    s.buffer = m.data
                    s.dirty = s.generation != generation
                    s.written = s.dirty
                    m.data = []
                    return (m.parent, m.name)
                }
            }
            memoryFiles.markFresh(item.id)
            notify(.entry(parent: parent, name: name))
        } catch {
            if releasing { memoryFiles.remove(memory) }
            throw error
        }
    }

    public func release(handle: UInt64) {
        do { try commit(handle: handle, releasing: true) } catch {
            let errno = ErrnoConversion.errno(for: error, during: "release of handle \(handle)")
            Log.warning("release: a buffered write was not committed (\(errno))")
        }
        if let file = openFiles.remove(handle) {
            // direct_io keeps read(2) out of the page cache, but an mmap of the file still goes
            // through it: drop any such pages when the file is closed.
            notify(.inode(file.ino))
        }
    }
}
