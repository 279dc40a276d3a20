import CFuse
import Foundation
import Keychain

/// Options of a mount, parsed from `-o`.
public struct MountOptions: Sendable {
    public var allowOther = false
    public var defaultPermissions = false
    public var debug = false
    /// Kernel cache lifetime of names and attributes. Changes made behind the kernel's back
    /// (the CLI, another process) become visible within this time; our own changes are
    /// invalidated explicitly.
    public var cacheSeconds: Double = 1.0
    public var fsname = "keychainfs"
    /// Lock the keychain after this many seconds without a request (nil: never).
    public var lockAfter: Double?
    /// Mount without unlocking: nothing is readable before the first `keychainfs unlock`.
    public var startLocked = false

    public init() {}
}

/// One FUSE session over a KeychainFileSystem, using libfuse's low-level (inode) API.
/// Each C callback finds the session through the request's userdata, calls the filesystem,
/// and sends exactly one reply.
public final class FuseSession: @unchecked Sendable {
    // @unchecked: `session` is set once before the loop starts; everything else is immutable
    // or belongs to the thread-safe filesystem.
    public let fs: KeychainFileSystem
    public let mountpoint: String
    let options: MountOptions
    private var session: OpaquePointer?
    private var directoryListings: [UInt64: [KeychainFileSystem.DirectoryEntry]] = [:]
    private let listingsLock = NSLock()
    private var nextListing: UInt64 = 1
    private let invalidations = DispatchQueue(label: "keychainfs.invalidate")

    public init(fs: KeychainFileSystem, mountpoint: String, options: MountOptions) {
        self.fs = fs
        self.mountpoint = mountpoint
        self.options = options
    }

    /// Mounts. After this returns the mount is live; call `run()` to serve it.
    public func mount() throws {
        var argv = ["keychainfs"]
        var opts = ["fsname=\(options.fsname)", "subtype=keychainfs"]
        if options.allowOther { opts.append("allow_other") }
        if options.defaultPermissions { opts.append("default_permissions") }
        argv += ["-o", opts.joined(separator: ",")]
        if options.debug { argv.append("-d") }
        var cArgs = argv.map { strdup($0) }
        defer { cArgs.forEach { free($0) } }
        var ops = FuseSession.makeOperations()
        let userdata = Unmanaged.passUnretained(self).toOpaque()
        let se = cArgs.withUnsafeMutableBufferPointer { buf -> OpaquePointer? in
            var args = kcfs_fuse_args_init(Int32(buf.count), buf.baseAddress)
            defer { fuse_opt_free_args(&args) }
            return fuse_session_new(&args, &ops, MemoryLayout<fuse_lowlevel_ops>.size, userdata)
        }
        guard let se else { throw FSError(EINVAL) }
        guard fuse_set_signal_handlers(se) == 0 else {
            fuse_session_destroy(se)
            throw FSError(EIO)
        }
        guard fuse_session_mount(se, mountpoint) == 0 else {
            fuse_remove_signal_handlers(se)
            fuse_session_destroy(se)
            throw FSError(EIO)
        }
        session = se
        fs.invalidate = { [weak self] what in self?.invalidate(what) }
    }

    /// Serves requests until unmounted or signalled (SIGTERM, SIGINT, SIGHUP), then unmounts.
    public func run() -> Int32 {
        guard let se = session else { return 1 }
        let rc = kcfs_session_loop_mt(se, 32)
        fs.invalidate = nil
        fuse_session_unmount(se)
        fuse_remove_signal_handlers(se)
        fuse_session_destroy(se)
        session = nil
        return rc
    }

    /// Tells the kernel a cached node or name is stale. Runs on its own queue: a notify
    /// sent from a request handler can deadlock against the kernel's inode lock.
    private func invalidate(_ what: KeychainFileSystem.Invalidation) {
        invalidations.async { [self] in
            guard let se = session else { return }
            switch what {
            case .inode(let ino): _ = fuse_lowlevel_notify_inval_inode(se, ino, 0, 0)
            case .entry(let parent, let name):
                _ = name.withCString { fuse_lowlevel_notify_inval_entry(se, parent, $0, strlen($0)) }
            }
        }
    }

    // MARK: Replies

    static func session(_ req: fuse_req_t?) -> FuseSession {
        Unmanaged<FuseSession>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
    }

    /// The caller of a request. Only the mounting user (and root) is served; the access
    /// layer decides what a process may see.
    func caller(_ req: fuse_req_t?, identify: Bool = false) throws -> Caller {
        let ctx = fuse_req_ctx(req)!.pointee
        if ctx.uid != fs.uid && ctx.uid != 0 { throw FSError(EACCES) }
        return try fs.access.caller(tid: ctx.pid, identify: identify)
    }

    func stat(_ s: NodeStat) -> stat {
        var st = Glibc.stat()
        st.st_ino = UInt(s.ino)
        st.st_mode = s.isDirectory ? (S_IFDIR | 0o700) : (S_IFREG | 0o600)
        st.st_nlink = s.isDirectory ? 2 : 1
        st.st_uid = fs.uid
        st.st_gid = fs.gid
        st.st_size = Int(s.size)
        st.st_blksize = 4096
        st.st_blocks = (s.size + 511) / 512
        let m = timespec(tv_sec: Int(s.modified.timeIntervalSince1970), tv_nsec: Int((s.modified.timeIntervalSince1970.truncatingRemainder(dividingBy: 1)) * 1e9))
        st.st_mtim = m
        st.st_ctim = m
        st.st_atim = m
        return st
    }

    func entry(_ s: NodeStat) -> fuse_entry_param {
        var e = fuse_entry_param()
        e.ino = s.ino
        e.generation = 1
        e.attr = stat(s)
        e.attr_timeout = timeout(s)
        e.entry_timeout = timeout(s)
        return e
    }

    /// How long the kernel may cache a node. Items are not cached at all while an access
    /// policy is in force: a cached entry would let one process see what only another may.
    func timeout(_ s: NodeStat) -> Double {
        !s.isDirectory && fs.access.hasPolicy ? 0 : options.cacheSeconds
    }

    /// Called on every request (the idle locker's clock).
    public var onRequest: (@Sendable () -> Void)?

    /// Runs `body`; on a thrown FSError replies with its errno.
    static func serve(_ req: fuse_req_t?, _ body: (FuseSession) throws -> Void) {
        let s = session(req)
        s.onRequest?()
        do { try body(s) } catch let e as FSError {
            fuse_reply_err(req, e.errno)
        } catch {
            fuse_reply_err(req, EIO)
        }
    }

    static func name(_ p: UnsafePointer<CChar>?) throws -> String {
        guard let p else { throw FSError(EINVAL) }
        // The FUSE kernel module passes names up to 1024 bytes; like any filesystem with
        // 255-byte names, say so rather than failing to find or parse them.
        guard strlen(p) <= PathCodec.maxComponentBytes else { throw FSError(ENAMETOOLONG) }
        // Names that are not UTF-8 cannot be the spelling of any item.
        guard let s = String(validatingCString: p) else { throw FSError(EINVAL) }
        return s
    }

    // MARK: The operations table

    static func makeOperations() -> fuse_lowlevel_ops {
        var ops = fuse_lowlevel_ops()
        ops.`init` = { _, conn in
            guard let conn else { return }
            // Whole secrets fit in one write request where the kernel allows it.
            conn.pointee.max_write = 1 << 20
            // O_TRUNC arrives with the open instead of as a separate truncate, so truncation is
            // buffered in the handle and committed (or dropped, on EFBIG) with its writes: a
            // failed `> file` must leave the old secret intact.
            if conn.pointee.capable & UInt32(FUSE_CAP_ATOMIC_O_TRUNC) != 0 {
                conn.pointee.want |= UInt32(FUSE_CAP_ATOMIC_O_TRUNC)
            }
        }
        ops.lookup = { req, parent, name in
            FuseSession.serve(req) { s in
                let n: String
                do { n = try FuseSession.name(name) } catch let e as FSError where e.errno == ENAMETOOLONG { throw e } catch { throw FSError(ENOENT) }
                var e = s.entry(try s.fs.lookup(parent: parent, name: n, caller: try s.caller(req)))
                fuse_reply_entry(req, &e)
            }
        }
        ops.forget = { req, _, _ in fuse_reply_none(req) }
        ops.forget_multi = { req, _, _ in fuse_reply_none(req) }
        ops.getattr = { req, ino, fi in
            FuseSession.serve(req) { s in
                let node = try s.fs.getattr(ino, handle: fi.map { $0.pointee.fh }, caller: try s.caller(req))
                var st = s.stat(node)
                fuse_reply_attr(req, &st, s.timeout(node))
            }
        }
        ops.setattr = { req, ino, attr, toSet, fi in
            FuseSession.serve(req) { s in
                let caller = try s.caller(req)
                if toSet & FUSE_SET_ATTR_SIZE != 0, let attr {
                    try s.fs.truncate(ino, size: Int(attr.pointee.st_size), handle: fi.map { $0.pointee.fh }, caller: caller)
                }
                // Mode, owner and times are fixed (0600/0700, the mounting user, cdat/mdat):
                // accepted and ignored so that cp -p, sed -i and editors do not fail.
                let node = try s.fs.getattr(ino, handle: fi.map { $0.pointee.fh }, caller: caller)
                var st = s.stat(node)
                fuse_reply_attr(req, &st, s.timeout(node))
            }
        }
        ops.mkdir = { req, parent, name, _ in
            FuseSession.serve(req) { s in
                var e = s.entry(try s.fs.mkdir(parent: parent, name: try FuseSession.name(name), caller: try s.caller(req)))
                fuse_reply_entry(req, &e)
            }
        }
        ops.rmdir = { req, parent, name in
            FuseSession.serve(req) { s in
                try s.fs.rmdir(parent: parent, name: try FuseSession.name(name), caller: try s.caller(req))
                fuse_reply_err(req, 0)
            }
        }
        ops.unlink = { req, parent, name in
            FuseSession.serve(req) { s in
                try s.fs.unlink(parent: parent, name: try FuseSession.name(name), caller: try s.caller(req, identify: true))
                fuse_reply_err(req, 0)
            }
        }
        ops.rename = { req, parent, name, newParent, newName, flags in
            FuseSession.serve(req) { s in
                try s.fs.rename(parent: parent, name: try FuseSession.name(name), newParent: newParent,
                                newName: try FuseSession.name(newName), flags: flags, caller: try s.caller(req, identify: true))
                fuse_reply_err(req, 0)
            }
        }
        ops.create = { req, parent, name, _, fi in
            FuseSession.serve(req) { s in
                guard let fi else { throw FSError(EINVAL) }
                let opened = try s.fs.create(parent: parent, name: try FuseSession.name(name), flags: fi.pointee.flags, caller: try s.caller(req, identify: true))
                fi.pointee.fh = opened.handle
                kcfs_fi_set_direct_io(fi, 1)
                var e = s.entry(opened.stat)
                if fuse_reply_create(req, &e, fi) != 0 { s.fs.release(handle: opened.handle) }
            }
        }
        ops.open = { req, ino, fi in
            FuseSession.serve(req) { s in
                guard let fi else { throw FSError(EINVAL) }
                fi.pointee.fh = try s.fs.open(ino, flags: fi.pointee.flags, caller: try s.caller(req, identify: true))
                // Plaintext never enters the page cache; every read reaches the daemon.
                kcfs_fi_set_direct_io(fi, 1)
                if fuse_reply_open(req, fi) != 0 { s.fs.release(handle: fi.pointee.fh) }
            }
        }
        ops.read = { req, _, size, off, fi in
            FuseSession.serve(req) { s in
                guard let fi else { throw FSError(EBADF) }
                var bytes = try s.fs.read(handle: fi.pointee.fh, offset: Int(off), size: size)
                bytes.withUnsafeBytes { _ = fuse_reply_buf(req, $0.baseAddress?.assumingMemoryBound(to: CChar.self), $0.count) }
                for i in bytes.indices { bytes[i] = 0 }
            }
        }
        ops.write = { req, _, buf, size, off, fi in
            FuseSession.serve(req) { s in
                guard let fi, let buf else { throw FSError(EBADF) }
                let n = try s.fs.write(handle: fi.pointee.fh, offset: Int(off), bytes: UnsafeRawBufferPointer(start: buf, count: size))
                fuse_reply_write(req, n)
            }
        }
        ops.flush = { req, _, fi in
            FuseSession.serve(req) { s in
                guard let fi else { throw FSError(EBADF) }
                try s.fs.commit(handle: fi.pointee.fh)
                fuse_reply_err(req, 0)
            }
        }
        ops.fsync = { req, _, _, fi in
            FuseSession.serve(req) { s in
                guard let fi else { throw FSError(EBADF) }
                try s.fs.commit(handle: fi.pointee.fh)
                fuse_reply_err(req, 0)
            }
        }
        ops.release = { req, _, fi in
            let s = FuseSession.session(req)
            if let fi { s.fs.release(handle: fi.pointee.fh) }
            fuse_reply_err(req, 0)
        }
        ops.opendir = { req, ino, fi in
            FuseSession.serve(req) { s in
                guard let fi else { throw FSError(EINVAL) }
                let entries = try s.fs.list(ino, caller: try s.caller(req))
                let handle = s.listingsLock.withLock { () -> UInt64 in
                    let h = s.nextListing
                    s.nextListing += 1
                    s.directoryListings[h] = entries
                    return h
                }
                fi.pointee.fh = handle
                fuse_reply_open(req, fi)
            }
        }
        ops.readdir = { req, _, size, off, fi in
            FuseSession.serve(req) { s in
                guard let fi, let entries = s.listingsLock.withLock({ s.directoryListings[fi.pointee.fh] }) else { throw FSError(EBADF) }
                var buffer = [CChar](repeating: 0, count: size)
                var used = 0
                var index = Int(off)
                while index < entries.count {
                    let entry = entries[index]
                    var st = Glibc.stat()
                    st.st_ino = UInt(entry.ino)
                    st.st_mode = entry.isDirectory ? S_IFDIR : S_IFREG
                    let needed = buffer.withUnsafeMutableBufferPointer { b in
                        entry.name.withCString { fuse_add_direntry(req, b.baseAddress! + used, size - used, $0, &st, off_t(index + 1)) }
                    }
                    if needed > size - used { break }
                    used += needed
                    index += 1
                }
                _ = buffer.withUnsafeBufferPointer { fuse_reply_buf(req, $0.baseAddress, used) }
            }
        }
        ops.releasedir = { req, _, fi in
            let s = FuseSession.session(req)
            if let fi { _ = s.listingsLock.withLock { s.directoryListings.removeValue(forKey: fi.pointee.fh) } }
            fuse_reply_err(req, 0)
        }
        ops.statfs = { req, _ in
            var st = statvfs()
            st.f_bsize = 4096
            st.f_frsize = 4096
            st.f_namemax = UInt(PathCodec.maxComponentBytes)
            fuse_reply_statfs(req, &st)
        }
        ops.getxattr = { req, ino, name, size in
            FuseSession.serve(req) { s in
                let value = try s.fs.getxattr(ino, name: try FuseSession.name(name), caller: try s.caller(req))
                if size == 0 {
                    fuse_reply_xattr(req, value.count)       // a size probe
                } else if size < value.count {
                    throw FSError(ERANGE)
                } else {
                    value.withUnsafeBytes { _ = fuse_reply_buf(req, $0.baseAddress?.assumingMemoryBound(to: CChar.self), $0.count) }
                }
            }
        }
        ops.listxattr = { req, ino, size in
            FuseSession.serve(req) { s in
                var bytes = [UInt8]()
                for name in try s.fs.listxattr(ino, caller: try s.caller(req)) { bytes += Array(name.utf8) + [0] }
                if size == 0 {
                    fuse_reply_xattr(req, bytes.count)
                } else if size < bytes.count {
                    throw FSError(ERANGE)
                } else {
                    bytes.withUnsafeBytes { _ = fuse_reply_buf(req, $0.baseAddress?.assumingMemoryBound(to: CChar.self), $0.count) }
                }
            }
        }
        ops.setxattr = { req, ino, name, value, size, flags in
            FuseSession.serve(req) { s in
                let bytes = value.map { [UInt8](UnsafeRawBufferPointer(start: $0, count: size)) } ?? []
                try s.fs.setxattr(ino, name: try FuseSession.name(name), value: bytes, flags: flags, caller: try s.caller(req, identify: true))
                fuse_reply_err(req, 0)
            }
        }
        ops.removexattr = { req, ino, name in
            FuseSession.serve(req) { s in
                try s.fs.removexattr(ino, name: try FuseSession.name(name), caller: try s.caller(req))
                fuse_reply_err(req, 0)
            }
        }
        ops.access = { req, _, _ in
            FuseSession.serve(req) { s in
                _ = try s.caller(req)
                fuse_reply_err(req, 0)
            }
        }
        return ops
    }
}
