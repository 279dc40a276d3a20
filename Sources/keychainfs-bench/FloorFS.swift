import CFuse
import Foundation

/// The floor: the least a FUSE filesystem with keychainfs's shape can cost. In memory,
/// libfuse low-level API, the same operations table shape as `FuseSession` (a multithreaded
/// loop of up to 16 workers without clone_fd; keychainfs's keeps all of its 10; the same
/// 1.0 s entry/attr timeouts, `direct_io` on every open,
/// `access` and `flush` answered, FOPEN_NOFLUSH on read-only opens, getxattr answering ENODATA except for
/// `user.keychain.account`), and the same layout depth and names:
/// `/genp/<service>/<account>` holding 12-byte files, plus the empty `inet cert keys idnt`.
/// Whatever keychainfs costs above this is its own work (store, crypto, path codec).
///
/// With `commits` it is the durable floor: the FLUSH (or fsync) of a handle that truncated or
/// wrote a file answers only after a durable SQLite commit (`FloorCommits`), as keychainfs's
/// FLUSH answers after its item's update is durable.
///
/// The operations table is built in a function of this file, never as top-level code in
/// main.swift (field notes: such closures are main-actor isolated and trap on the first
/// request).
final class FloorFS: @unchecked Sendable {
    // @unchecked: `nodes`, `listings`, `nextListing` are guarded by `lock`; `session` is set
    // before the loop starts.
    final class Node {
        let ino: UInt64
        let isDirectory: Bool
        var data: [UInt8]
        /// Truncations and writes so far, and how many of them a durable commit holds (durable
        /// floor only): a FLUSH answers once every change made before it is durable, whichever
        /// handle's commit made it so.
        var changes: UInt64 = 0
        var durableChanges: UInt64 = 0
        var children: [String: UInt64] = [:]
        var order: [(String, UInt64)] = []
        init(ino: UInt64, isDirectory: Bool, data: [UInt8] = []) {
            self.ino = ino; self.isDirectory = isDirectory; self.data = data
        }
    }

    static let timeout = 1.0
    static let xattrName = "user.keychain.account"

    private let lock = NSLock()
    private var nodes: [UInt64: Node] = [:]
    private var names: [UInt64: String] = [:]
    private var listings: [UInt64: [(String, UInt64, Bool)]] = [:]
    private var nextListing: UInt64 = 1
    private var nextIno: UInt64 = 2
    private var session: OpaquePointer?
    let uid = getuid(), gid = getgid()
    let mtime = Date()
    let commits: FloorCommits?

    /// `directories`: service name → the (account, 12-byte content) pairs it holds;
    /// `commits`: the durable floor's SQLite commits, nil for the floor.
    init(directories: [(String, [(String, [UInt8])])], commits: FloorCommits? = nil) {
        self.commits = commits
        let root = Node(ino: 1, isDirectory: true)
        nodes[1] = root
        var genp: Node?
        for cls in ["genp", "inet", "cert", "keys", "idnt"] {
            let d = add(cls, isDirectory: true, to: root)
            if cls == "genp" { genp = d }
        }
        for (service, files) in directories {
            let dir = add(service, isDirectory: true, to: genp!)
            for (name, content) in files { _ = add(name, isDirectory: false, to: dir, data: content) }
        }
    }

    private func add(_ name: String, isDirectory: Bool, to parent: Node, data: [UInt8] = []) -> Node {
        let n = Node(ino: nextIno, isDirectory: isDirectory, data: data)
        nextIno += 1
        nodes[n.ino] = n
        names[n.ino] = name
        parent.children[name] = n.ino
        parent.order.append((name, n.ino))
        return n
    }

    func node(_ ino: UInt64) -> Node? { lock.withLock { nodes[ino] } }

    func stat(_ n: Node) -> stat {
        var st = Glibc.stat()
        st.st_ino = UInt(n.ino)
        st.st_mode = n.isDirectory ? (S_IFDIR | 0o700) : (S_IFREG | 0o600)
        st.st_nlink = n.isDirectory ? 2 : 1
        st.st_uid = uid
        st.st_gid = gid
        st.st_size = n.isDirectory ? 0 : lock.withLock { n.data.count }
        st.st_blksize = 4096
        st.st_blocks = (st.st_size + 511) / 512
        let t = timespec(tv_sec: Int(mtime.timeIntervalSince1970), tv_nsec: 0)
        st.st_mtim = t; st.st_ctim = t; st.st_atim = t
        return st
    }

    func entry(_ n: Node) -> fuse_entry_param {
        var e = fuse_entry_param()
        e.ino = n.ino
        e.generation = 1
        e.attr = stat(n)
        e.attr_timeout = Self.timeout
        e.entry_timeout = Self.timeout
        return e
    }

    // MARK: Mount and serve

    func mount(_ mountpoint: String) throws {
        let argv = ["kcfs-floor", "-o", "fsname=kcfs-floor,subtype=kcfsfloor"]
        var cArgs = argv.map { strdup($0) }
        defer { cArgs.forEach { free($0) } }
        var ops = FloorFS.makeOperations()
        let userdata = Unmanaged.passUnretained(self).toOpaque()
        let se = cArgs.withUnsafeMutableBufferPointer { buf -> OpaquePointer? in
            var args = kcfs_fuse_args_init(Int32(buf.count), buf.baseAddress)
            defer { fuse_opt_free_args(&args) }
            return fuse_session_new(&args, &ops, MemoryLayout<fuse_lowlevel_ops>.size, userdata)
        }
        guard let se else { throw BenchError("fuse_session_new failed") }
        guard fuse_set_signal_handlers(se) == 0 else {
            fuse_session_destroy(se)
            throw BenchError("fuse_set_signal_handlers failed")
        }
        guard fuse_session_mount(se, mountpoint) == 0 else {
            fuse_remove_signal_handlers(se)
            fuse_session_destroy(se)
            throw BenchError("cannot mount the floor on \(mountpoint)")
        }
        session = se
    }

    func run() -> Int32 {
        guard let se = session else { return 1 }
        let rc = kcfs_session_loop_mt(se, 16)
        fuse_session_unmount(se)
        fuse_remove_signal_handlers(se)
        fuse_session_destroy(se)
        session = nil
        return rc
    }

    /// The durable floor's FLUSH and fsync: a durable commit when the file changed since a
    /// commit last covered it (0 or EIO); the floor's: nothing (0).
    func commitIfDirty(_ ino: UInt64) -> Int32 {
        guard let commits, let n = node(ino) else { return 0 }
        let (changes, durable) = lock.withLock { (n.changes, n.durableChanges) }
        guard changes != durable else { return 0 }
        guard commits.commit() else { return EIO }
        lock.withLock { n.durableChanges = max(n.durableChanges, changes) }
        return 0
    }

    /// `user.floor.commits` on the durable floor's root: "COMMITS CLOSES" so far, so the bench
    /// can tell how many closes a commit held.
    static let commitsXattrName = "user.floor.commits"

    static func of(_ req: fuse_req_t?) -> FloorFS {
        Unmanaged<FloorFS>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
    }

    /// The same per-request caller check keychainfs makes (the mounting user or root).
    static func callerAllowed(_ req: fuse_req_t?, _ fs: FloorFS) -> Bool {
        let ctx = fuse_req_ctx(req)!.pointee
        return ctx.uid == fs.uid || ctx.uid == 0
    }

    // MARK: The operations table

    static func makeOperations() -> fuse_lowlevel_ops {
        var ops = fuse_lowlevel_ops()
        ops.`init` = { _, conn in
            guard let conn else { return }
            conn.pointee.max_write = 1 << 20
        }
        ops.lookup = { req, parent, name in
            let fs = FloorFS.of(req)
            guard FloorFS.callerAllowed(req, fs) else { fuse_reply_err(req, EACCES); return }
            guard let name, let s = String(validatingCString: name),
                let p = fs.node(parent), p.isDirectory,
                let ino = fs.lock.withLock({ p.children[s] }), let n = fs.node(ino)
            else {
                fuse_reply_err(req, ENOENT); return
            }
            var e = fs.entry(n)
            fuse_reply_entry(req, &e)
        }
        ops.forget = { req, _, _ in fuse_reply_none(req) }
        ops.forget_multi = { req, _, _ in fuse_reply_none(req) }
        ops.getattr = { req, ino, _ in
            let fs = FloorFS.of(req)
            guard let n = fs.node(ino) else { fuse_reply_err(req, ENOENT); return }
            var st = fs.stat(n)
            fuse_reply_attr(req, &st, FloorFS.timeout)
        }
        ops.setattr = { req, ino, attr, toSet, _ in
            let fs = FloorFS.of(req)
            guard let n = fs.node(ino) else { fuse_reply_err(req, ENOENT); return }
            if toSet & FUSE_SET_ATTR_SIZE != 0, let attr {
                let size = Int(attr.pointee.st_size)
                fs.lock.withLock {
                    if n.data.count > size {
                        n.data.removeLast(n.data.count - size)
                    } else {
                        n.data += [UInt8](repeating: 0, count: size - n.data.count)
                    }
                    n.changes += 1
                }
            }
            var st = fs.stat(n)
            fuse_reply_attr(req, &st, FloorFS.timeout)
        }
        ops.open = { req, ino, fi in
            let fs = FloorFS.of(req)
            guard FloorFS.callerAllowed(req, fs) else { fuse_reply_err(req, EACCES); return }
            guard let fi, let n = fs.node(ino) else { fuse_reply_err(req, ENOENT); return }
            guard !n.isDirectory else { fuse_reply_err(req, EISDIR); return }
            let access = fi.pointee.flags & O_ACCMODE
            if fi.pointee.flags & O_TRUNC != 0 && (access == O_WRONLY || access == O_RDWR) {
                fs.lock.withLock {
                    n.data = []
                    n.changes += 1
                }
            }
            fi.pointee.fh = ino
            kcfs_fi_set_direct_io(fi, 1)
            // As keychainfs: no FLUSH for a read-only handle, so a cycle is the same requests.
            if access == O_RDONLY && fi.pointee.flags & O_TRUNC == 0 { kcfs_fi_set_noflush(fi, 1) }
            fuse_reply_open(req, fi)
        }
        ops.read = { req, ino, size, off, _ in
            let fs = FloorFS.of(req)
            guard let n = fs.node(ino) else { fuse_reply_err(req, EBADF); return }
            let bytes = fs.lock.withLock { () -> [UInt8] in
                let o = Int(off)
                guard o < n.data.count else { return [] }
                return Array(n.data[o..<min(n.data.count, o + size)])
            }
            bytes.withUnsafeBytes {
                _ = fuse_reply_buf(req, $0.baseAddress?.assumingMemoryBound(to: CChar.self), $0.count)
            }
        }
        ops.write = { req, ino, buf, size, off, _ in
            let fs = FloorFS.of(req)
            guard let buf, let n = fs.node(ino) else { fuse_reply_err(req, EBADF); return }
            fs.lock.withLock {
                let start = Int(off)
                if n.data.count < start + size { n.data += [UInt8](repeating: 0, count: start + size - n.data.count) }
                n.data.replaceSubrange(start..<(start + size), with: UnsafeRawBufferPointer(start: buf, count: size))
                n.changes += 1
            }
            fuse_reply_write(req, size)
        }
        ops.flush = { req, ino, _ in fuse_reply_err(req, FloorFS.of(req).commitIfDirty(ino)) }
        ops.fsync = { req, ino, _, _ in fuse_reply_err(req, FloorFS.of(req).commitIfDirty(ino)) }
        ops.release = { req, _, _ in fuse_reply_err(req, 0) }
        ops.opendir = { req, ino, fi in
            let fs = FloorFS.of(req)
            guard FloorFS.callerAllowed(req, fs) else { fuse_reply_err(req, EACCES); return }
            guard let fi, let n = fs.node(ino), n.isDirectory else { fuse_reply_err(req, ENOTDIR); return }
            fs.lock.withLock {
                var entries: [(String, UInt64, Bool)] = [(".", ino, true), ("..", 1, true)]
                for (name, child) in n.order { entries.append((name, child, fs.nodes[child]!.isDirectory)) }
                let h = fs.nextListing
                fs.nextListing += 1
                fs.listings[h] = entries
                fi.pointee.fh = h
            }
            fuse_reply_open(req, fi)
        }
        ops.readdir = { req, _, size, off, fi in
            let fs = FloorFS.of(req)
            guard let fi, let entries = fs.lock.withLock({ fs.listings[fi.pointee.fh] }) else {
                fuse_reply_err(req, EBADF); return
            }
            var buffer = [CChar](repeating: 0, count: size)
            var used = 0
            var index = Int(off)
            while index < entries.count {
                let (name, ino, isDir) = entries[index]
                var st = Glibc.stat()
                st.st_ino = UInt(ino)
                st.st_mode = isDir ? S_IFDIR : S_IFREG
                let needed = buffer.withUnsafeMutableBufferPointer { b in
                    name.withCString {
                        fuse_add_direntry(req, b.baseAddress! + used, size - used, $0, &st, off_t(index + 1))
                    }
                }
                if needed > size - used { break }
                used += needed
                index += 1
            }
            _ = buffer.withUnsafeBufferPointer { fuse_reply_buf(req, $0.baseAddress, used) }
        }
        ops.releasedir = { req, _, fi in
            let fs = FloorFS.of(req)
            if let fi { _ = fs.lock.withLock { fs.listings.removeValue(forKey: fi.pointee.fh) } }
            fuse_reply_err(req, 0)
        }
        ops.statfs = { req, _ in
            var st = statvfs()
            st.f_bsize = 4096
            st.f_frsize = 4096
            st.f_namemax = 255
            fuse_reply_statfs(req, &st)
        }
        ops.getxattr = { req, ino, name, size in
            let fs = FloorFS.of(req)
            guard FloorFS.callerAllowed(req, fs) else { fuse_reply_err(req, EACCES); return }
            let value: String
            if ino == 1, let commits = fs.commits, let name, String(cString: name) == FloorFS.commitsXattrName {
                let totals = commits.totals
                value = "\(totals.commits) \(totals.closes)"
            } else {
                guard let name, String(cString: name) == FloorFS.xattrName,
                    let n = fs.node(ino), !n.isDirectory, let itemName = fs.lock.withLock({ fs.names[ino] })
                else {
                    fuse_reply_err(req, ENODATA); return
                }
                value = itemName
            }
            let bytes = Array(value.utf8)
            if size == 0 {
                fuse_reply_xattr(req, bytes.count)
            } else if size < bytes.count {
                fuse_reply_err(req, ERANGE)
            } else {
                bytes.withUnsafeBytes {
                    _ = fuse_reply_buf(req, $0.baseAddress?.assumingMemoryBound(to: CChar.self), $0.count)
                }
            }
        }
        ops.listxattr = { req, ino, size in
            let fs = FloorFS.of(req)
            let bytes: [UInt8] =
                (fs.node(ino).map { !$0.isDirectory } ?? false) ? Array(FloorFS.xattrName.utf8) + [0] : []
            if size == 0 {
                fuse_reply_xattr(req, bytes.count)
            } else if size < bytes.count {
                fuse_reply_err(req, ERANGE)
            } else {
                bytes.withUnsafeBytes {
                    _ = fuse_reply_buf(req, $0.baseAddress?.assumingMemoryBound(to: CChar.self), $0.count)
                }
            }
        }
        ops.access = { req, _, _ in
            let fs = FloorFS.of(req)
            fuse_reply_err(req, FloorFS.callerAllowed(req, fs) ? 0 : EACCES)
        }
        return ops
    }
}
