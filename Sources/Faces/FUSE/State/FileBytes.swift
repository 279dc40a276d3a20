import FoundationEssentials
import Glibc

/// The byte edits every file kind shares: a write at an offset (zero-filling a gap, as POSIX
/// says a write past the end does) and a resize (truncate or zero-extend).
enum FileBytes {
    static func write(_ bytes: UnsafeRawBufferPointer, into buffer: inout [UInt8], at start: Int) {
        if buffer.count < start + bytes.count {
            buffer += [UInt8](repeating: 0, count: start + bytes.count - buffer.count)
        }
        buffer.replaceSubrange(start..<(start + bytes.count), with: bytes)
    }

    static func resize(_ buffer: inout [UInt8], to size: Int) {
        if buffer.count > size {
            buffer.removeLast(buffer.count - size)
        } else {
            buffer += [UInt8](repeating: 0, count: size - buffer.count)
        }
    }

    /// At most `size` bytes of `data` from `offset`: what a read(2) returns.
    static func slice(_ data: [UInt8], offset: Int, size: Int) -> [UInt8] {
        guard offset < data.count else { return [] }
        return Array(data[offset..<min(data.count, offset + size)])
    }

    /// Overwrites the storage of `bytes` itself, however many arrays share it (a decrypted
    /// value handed out inside an immutable `KeychainItem`): `wipe` on a shared array would
    /// copy it first and overwrite only the copy. Only for values nothing else still reads.
    static func wipeShared(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { p in
            if let base = p.baseAddress { memset(UnsafeMutableRawPointer(mutating: base), 0, p.count) }
        }
    }

    /// Overwrites a copy of a secret before letting it go. An array with no storage of its
    /// own (never filled: a read-only handle's `view`) has nothing to overwrite, and asking it
    /// for mutable bytes would first give it storage (an allocation per release).
    static func wipe(_ buffer: inout [UInt8]) {
        guard buffer.capacity > 0 else { return }
        buffer.withUnsafeMutableBytes { p in
            if let base = p.baseAddress { memset(base, 0, p.count) }
        }
        buffer = []
    }
}
