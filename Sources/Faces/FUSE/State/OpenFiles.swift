import Foundation
import Keychain
import KeychainAccess
import SystemPackage
import Synchronization

/// An open file handle: what it is open on, who opened it (the access decision taken at open
/// is bound to the handle: RELEASE carries no caller), and its buffered writes.
///
/// The life of an item handle's buffer, stated once:
///
///     clean (buffer nil, or the content as loaded) ──write/ftruncate──► dirty, written
///     open with O_TRUNC ──► dirty, not written: committed only at release, because the
///         shell's `> file` flushes once before its first write, and committing the empty
///         file then would lose the old secret if the write fails
///     dirty ──commit (flush, fsync, release)──► clean, unless a write landed meanwhile
///         (the generation moved: FLUSH is not serialised with WRITE)
///     any ──write past 1 MiB──► refused (EFBIG): the buffer is dropped and every later
///         commit fails with EFBIG, so the old secret stays intact
///
final class OpenFile: Sendable {
    enum Target: Sendable {
        /// An item (an identity is `.item(.identity, certificateID)`, read-only).
        case item(ItemClass, Int64)
        /// An editor scratch file or a pending item, in daemon memory.
        case memory(MemoryFile)
        /// A file of /views: the bytes generated at open, read-only.
        case generated([UInt8])
    }

    struct State {
        var target: Target
        /// Item handles: the file's content as this handle sees it; nil until a write needs it.
        var buffer: [UInt8]?
        var dirty = false
        var written = false
        var failed: Errno?
        var generation = 0

        /// Applies a write to an item handle's loaded buffer under the size rule.
        mutating func writeItem(_ bytes: UnsafeRawBufferPointer, at offset: Int, append: Bool) throws -> Int {
            if let failed { throw failed }
            var buffer = self.buffer ?? []
            let start = append ? buffer.count : offset
            guard start + bytes.count <= Keychain.maxDataSize else {
                // Drop what was buffered: the commit at close must not store a truncated secret.
                refuse(.fileTooLarge)
                throw Errno.fileTooLarge
            }
            FileBytes.write(bytes, into: &buffer, at: start)
            self.buffer = buffer
            touched()
            return bytes.count
        }

        mutating func truncateItem(to size: Int) {
            var buffer = self.buffer ?? []
            FileBytes.resize(&buffer, to: size)
            self.buffer = buffer
            touched()
        }

        mutating func touched() {
            dirty = true
            written = true
            generation += 1
        }

        mutating func refuse(_ errno: Errno) {
            failed = errno
            buffer = nil
            dirty = false
        }

        /// What a commit must store, if anything: the buffer of a dirty handle that was written
        /// to (or any dirty handle at release).
        func pendingCommit(releasing: Bool) -> (buffer: [UInt8], generation: Int)? {
            guard let buffer, dirty, written || releasing else { return nil }
            return (buffer, generation)
        }

        /// After a commit of `generation`: clean, unless a write landed meanwhile.
        mutating func committed(generation: Int) {
            if self.generation == generation { dirty = false }
        }
    }

    let ino: UInt64
    let caller: Caller
    let append: Bool
    let state: Mutex<State>

    init(ino: UInt64, target: Target, caller: Caller, append: Bool) {
        self.ino = ino
        self.caller = caller
        self.append = append
        self.state = Mutex(State(target: target))
    }

    /// The target, after following a pending item that another handle on the same new file
    /// added meanwhile: this handle then writes to the item too (its bytes are loaded on its
    /// first write), not to the old memory file.
    func currentTarget() -> Target {
        state.withLock { s in
            if case .memory(let file) = s.target, let (c, id) = file.state.withLock({ $0.added }) {
                s.target = .item(c, id)
                s.buffer = nil
                s.dirty = false
            }
            return s.target
        }
    }
}

/// The open handles of a mount by handle number.
final class OpenFiles: Sendable {
    private struct State {
        var files: [UInt64: OpenFile] = [:]
        var next: UInt64 = 1
    }

    private let state = Mutex(State())

    func register(_ file: OpenFile) -> UInt64 {
        state.withLock { s in
            let handle = s.next
            s.next += 1
            s.files[handle] = file
            return handle
        }
    }

    func file(_ handle: UInt64) throws -> OpenFile {
        guard let file = state.withLock({ $0.files[handle] }) else { throw Errno.badFileDescriptor }
        return file
    }

    func remove(_ handle: UInt64) -> OpenFile? { state.withLock { $0.files.removeValue(forKey: handle) } }
}
