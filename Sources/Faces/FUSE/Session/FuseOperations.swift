import CFuse
import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import SystemPackage

extension FuseSession {
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
            if FuseSession.replayLookup(req, parent, name) { return }
            FuseSession.serve(req, "lookup", parent) { s in
                let n: String
                do { n = try FuseSession.name(name) } catch Errno.fileNameTooLong { throw Errno.fileNameTooLong } catch
                {
                    throw Errno.noSuchFileOrDirectory
                }
                var e = s.entry(try s.fs.lookup(parent: parent, name: n, caller: try s.caller(req)))
                fuse_reply_entry(req, &e)
            }
        }
        ops.forget = { req, _, _ in fuse_reply_none(req) }
        ops.forget_multi = { req, _, _ in fuse_reply_none(req) }
        ops.getattr = { req, ino, fi in
            if FuseSession.replayAttributes(req, ino) { return }
            FuseSession.serve(req, "getattr", ino) { s in
                let node = try s.fs.getattr(ino, handle: fi.map { $0.pointee.fh }, caller: try s.caller(req))
                var st = s.stat(node)
                fuse_reply_attr(req, &st, s.timeout(node))
            }
        }
        ops.setattr = { req, ino, attr, toSet, fi in
            if FuseSession.replayAttributes(req, ino) { return }
            FuseSession.serve(req, "setattr", ino) { s in
                let caller = try s.caller(req)
                if toSet & FUSE_SET_ATTR_SIZE != 0, let attr {
                    try s.fs.truncate(
                        ino, size: Int(attr.pointee.st_size), handle: fi.map { $0.pointee.fh }, caller: caller)
                }
                // Mode, owner and times are fixed (0600/0700, the mounting user, cdat/mdat):
                // accepted and ignored so that cp -p, sed -i and editors do not fail.
                let node = try s.fs.getattr(ino, handle: fi.map { $0.pointee.fh }, caller: caller)
                var st = s.stat(node)
                fuse_reply_attr(req, &st, s.timeout(node))
            }
        }
        ops.mkdir = { req, parent, name, _ in
            if FuseSession.replayMake(req) { return }
            FuseSession.serve(req, "mkdir", parent) { s in
                var e = s.entry(
                    try s.fs.mkdir(parent: parent, name: try FuseSession.name(name), caller: try s.caller(req)))
                fuse_reply_entry(req, &e)
            }
        }
        // An item has one path and is a regular file: no symlinks, no device or fifo nodes
        // (EPERM, as link(2) gets from the kernel), rather than libfuse's ENOSYS.
        ops.symlink = { req, _, parent, _ in FuseSession.serve(req, "symlink", parent) { _ in throw Errno.notPermitted }
        }
        ops.mknod = { req, parent, name, mode, _ in
            if FuseSession.replayMake(req) { return }
            FuseSession.serve(req, "mknod", parent) { s in
                // mknod(S_IFREG) (mode & S_IFMT == S_IFREG) is another way to make an empty regular file, as on ext4.
                guard mode & 0o170000 == 0o100000 else { throw Errno.notPermitted }
                let opened = try s.fs.create(
                    parent: parent, name: try FuseSession.name(name), flags: O_WRONLY | O_EXCL,
                    caller: try s.caller(req, identify: true))
                s.fs.release(handle: opened.handle)
                // A certificate cannot exist empty: the pending name went with its handle.
                if opened.stat.uncached { throw Errno.invalidArgument }
                var e = s.entry(opened.stat)
                fuse_reply_entry(req, &e)
            }
        }
        ops.rmdir = { req, parent, name in
            if FuseSession.replayDone(req) { return }
            FuseSession.serve(req, "rmdir", parent) { s in
                try s.fs.rmdir(parent: parent, name: try FuseSession.name(name), caller: try s.caller(req))
                fuse_reply_err(req, 0)
            }
        }
        ops.unlink = { req, parent, name in
            if FuseSession.replayDone(req) { return }
            FuseSession.serve(req, "unlink", parent) { s in
                try s.fs.unlink(
                    parent: parent, name: try FuseSession.name(name), caller: try s.caller(req, identify: true))
                fuse_reply_err(req, 0)
            }
        }
        ops.rename = { req, parent, name, newParent, newName, flags in
            if FuseSession.replayDone(req) { return }
            FuseSession.serve(req, "rename", parent) { s in
                try s.fs.rename(
                    parent: parent, name: try FuseSession.name(name), newParent: newParent,
                    newName: try FuseSession.name(newName), flags: flags, caller: try s.caller(req, identify: true))
                fuse_reply_err(req, 0)
            }
        }
        ops.create = { req, parent, name, _, fi in
            FuseSession.serve(req, "create", parent) { s in
                guard let fi else { throw Errno.invalidArgument }
                let opened = try s.fs.create(
                    parent: parent, name: try FuseSession.name(name), flags: fi.pointee.flags,
                    caller: try s.caller(req, identify: true))
                fi.pointee.fh = opened.handle
                kcfs_fi_set_direct_io(fi, 1)
                var e = s.entry(opened.stat)
                if fuse_reply_create(req, &e, fi) != 0 { s.fs.release(handle: opened.handle) }
            }
        }
        ops.open = { req, ino, fi in
            if FuseSession.replayOpen(req, fi) { return }
            FuseSession.serve(req, "open", ino) { s in
                guard let fi else { throw Errno.invalidArgument }
                let flags = fi.pointee.flags
                fi.pointee.fh = try s.fs.open(ino, flags: flags, caller: try s.caller(req, identify: true))
                // Plaintext never enters the page cache; every read reaches the daemon.
                kcfs_fi_set_direct_io(fi, 1)
                // A read-only handle has nothing to commit at close(2): no FLUSH request for it
                // (its RELEASE still comes, and does what a FLUSH would have).
                if flags & O_ACCMODE == O_RDONLY && flags & O_TRUNC == 0 { kcfs_fi_set_noflush(fi, 1) }
                if fuse_reply_open(req, fi) != 0 { s.fs.release(handle: fi.pointee.fh) }
            }
        }
        ops.read = { req, ino, size, off, fi in
            FuseSession.serve(req, "read", ino) { s in
                guard let fi else { throw Errno.badFileDescriptor }
                // A read without a lock owner is the kernel filling its page cache (KeychainFileSystem.read).
                try s.fs.read(
                    handle: fi.pointee.fh, offset: Int(off), size: size, fillsPageCache: fi.pointee.lock_owner == 0
                ) { _ = fuse_reply_buf(req, $0.baseAddress?.assumingMemoryBound(to: CChar.self), $0.count) }
            }
        }
        ops.write = { req, ino, buf, size, off, fi in
            FuseSession.serve(req, "write", ino) { s in
                guard let fi, let buf else { throw Errno.badFileDescriptor }
                let n = try s.fs.write(
                    handle: fi.pointee.fh, offset: Int(off), bytes: UnsafeRawBufferPointer(start: buf, count: size),
                    lockOwner: fi.pointee.lock_owner)
                fuse_reply_write(req, n)
            }
        }
        ops.flush = { req, ino, fi in
            if FuseSession.replayHandle(req, fi) { return }
            FuseSession.serve(req, "flush", ino) { s in
                guard let fi else { throw Errno.badFileDescriptor }
                try s.fs.commit(handle: fi.pointee.fh, flushOwner: fi.pointee.lock_owner)
                fuse_reply_err(req, 0)
            }
        }
        ops.fsync = { req, ino, _, fi in
            if FuseSession.replayHandle(req, fi) { return }
            FuseSession.serve(req, "fsync", ino) { s in
                guard let fi else { throw Errno.badFileDescriptor }
                try s.fs.commit(handle: fi.pointee.fh)
                fuse_reply_err(req, 0)
            }
        }
        ops.release = { req, _, fi in
            if FuseSession.replayHandle(req, fi) { return }
            let s = FuseSession.session(req)
            if let fi { s.fs.release(handle: fi.pointee.fh) }
            fuse_reply_err(req, 0)
        }
        // poll(2): a change feed (/views/changes) is ready when a change is there to read, and
        // tells the kernel at the next commit otherwise; every other file is always ready.
        ops.poll = { req, ino, fi, ph in
            FuseSession.serve(req, "poll", ino) { s in s.poll(req, fi, ph) }
        }
        ops.opendir = { req, ino, fi in
            FuseSession.serve(req, "opendir", ino) { s in
                guard let fi else { throw Errno.invalidArgument }
                fi.pointee.fh = s.openListing(try s.fs.list(ino, caller: try s.caller(req)))
                fuse_reply_open(req, fi)
            }
        }
        ops.readdir = { req, ino, size, off, fi in
            FuseSession.serve(req, "readdir", ino) { s in
                guard let fi, let listing = s.listing(fi.pointee.fh) else { throw Errno.badFileDescriptor }
                var buffer = [CChar](repeating: 0, count: size)
                var used = 0
                var index = Int(off)
                while index < listing.count {
                    let entry = listing[index]
                    var st = Glibc.stat()
                    st.st_ino = UInt(entry.ino)
                    st.st_mode = entry.isDirectory ? S_IFDIR : S_IFREG
                    let needed = buffer.withUnsafeMutableBufferPointer { b in
                        entry.name.withCString {
                            fuse_add_direntry(req, b.baseAddress! + used, size - used, $0, &st, off_t(index + 1))
                        }
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
            if let fi { s.closeListing(fi.pointee.fh) }
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
            if FuseSession.replayNoAttributes(req, listing: false) { return }
            FuseSession.serve(req, "getxattr", ino) { s in
                let value = try s.fs.getxattr(ino, name: try FuseSession.name(name), caller: try s.caller(req))
                if size == 0 {
                    fuse_reply_xattr(req, value.count)  // a size probe
                } else if size < value.count {
                    throw Errno.outOfRange
                } else {
                    value.withUnsafeBytes {
                        _ = fuse_reply_buf(req, $0.baseAddress?.assumingMemoryBound(to: CChar.self), $0.count)
                    }
                }
            }
        }
        ops.listxattr = { req, ino, size in
            if FuseSession.replayNoAttributes(req, listing: true) { return }
            FuseSession.serve(req, "listxattr", ino) { s in
                var bytes = [UInt8]()
                for name in try s.fs.listxattr(ino, caller: try s.caller(req)) { bytes += Array(name.utf8) + [0] }
                if size == 0 {
                    fuse_reply_xattr(req, bytes.count)
                } else if size < bytes.count {
                    throw Errno.outOfRange
                } else {
                    bytes.withUnsafeBytes {
                        _ = fuse_reply_buf(req, $0.baseAddress?.assumingMemoryBound(to: CChar.self), $0.count)
                    }
                }
            }
        }
        ops.setxattr = { req, ino, name, value, size, flags in
            FuseSession.serve(req, "setxattr", ino) { s in
                let bytes = value.map { [UInt8](UnsafeRawBufferPointer(start: $0, count: size)) } ?? []
                try s.fs.setxattr(
                    ino, name: try FuseSession.name(name), value: bytes, flags: flags,
                    caller: try s.caller(req, identify: true))
                fuse_reply_err(req, 0)
            }
        }
        ops.removexattr = { req, ino, name in
            FuseSession.serve(req, "removexattr", ino) { s in
                try s.fs.removexattr(ino, name: try FuseSession.name(name), caller: try s.caller(req))
                fuse_reply_err(req, 0)
            }
        }
        ops.access = { req, ino, _ in
            if FuseSession.replayDone(req) { return }
            FuseSession.serve(req, "access", ino) { s in
                _ = try s.caller(req)
                fuse_reply_err(req, 0)
            }
        }
        return ops
    }
}
