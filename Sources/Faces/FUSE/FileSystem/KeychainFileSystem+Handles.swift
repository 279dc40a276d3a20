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
        switch file.currentTarget() {
        case .memory(let memory):
            return try file.state.withLock { s in
                if let failed = s.failed { throw failed }
                return try memory.state.withLock { m in
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
        case .item(let c, let id):
            if c == .identity { throw Errno.badFileDescriptor }
            try loadBuffer(of: file, itemClass: c, id: id)
            return try file.state.withLock { try $0.writeItem(bytes, at: offset, append: file.append) }
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
        // Unlinked while still being written: it never becomes an item.
        guard memoryFiles.contains(memory),
            let (data, dirty, generation) = file.state.withLock({ s in
                memory.state.withLock { m in m.added == nil ? (m.data, s.dirty, s.generation) : nil }
            })
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
