import CFuse
import CPlatform
import Dispatch
import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import KeychainStore
import SystemPackage
import Synchronization

/// One FUSE session over a KeychainFileSystem, using libfuse's low-level (inode) API. Each C
/// callback (FuseOperations.swift) finds the session through the request's userdata, calls the
/// filesystem, and sends exactly one reply; a failure is converted to errno here, in `serve`.
public final class FuseSession: Sendable {
    public let fs: KeychainFileSystem
    public let mountpoint: String
    let options: MountOptions

    /// A libfuse session pointer: used by the loop thread and by the invalidation worker, and
    /// libfuse serialises what it does with it.
    struct SessionHandle: @unchecked Sendable { let pointer: OpaquePointer }

    private struct State {
        var session: SessionHandle?
        var onRequest: (@Sendable () -> Void)?
        /// Directory listings made at opendir, by directory handle, until releasedir.
        var listings: [UInt64: DirectoryListing] = [:]
        var nextListing: UInt64 = 1
    }
    private let state = Mutex(State())
    /// The invalidation queue (`invalidate`): its own thread, started at the first page or name
    /// invalidation, so one that waits for a kernel lock delays no other work. A SerialWorker,
    /// not a DispatchQueue: that would wake the daemon every second for good (SerialWorker).
    private let invalidations = SerialWorker(name: "kcfs-invalidate")
    /// The thread that replays changes made elsewhere to the mount's watchers (ChangeReplayer).
    let replayer: ChangeReplayer

    deinit { invalidations.stop() }

    public init(fs: KeychainFileSystem, mountpoint: String, options: MountOptions) {
        self.fs = fs
        self.mountpoint = mountpoint
        self.options = options
        replayer = ChangeReplayer(fs: fs, mountpoint: mountpoint)
        fs.cacheSeconds = options.cacheSeconds
    }

    /// Called on every request (the idle locker's clock).
    public var onRequest: (@Sendable () -> Void)? {
        get { state.withLock { $0.onRequest } }
        set { state.withLock { $0.onRequest = newValue } }
    }

    /// Worker threads at most, and every one made is kept (`maxIdleWorkers` is the same number).
    /// More workers than CPUs: a request that waits for the user (a presence prompt through
    /// pinentry, at most 4 at once) holds its worker until answered, and eight writers at once
    /// each hold one through a durable commit; two more serve the rest of the mount meanwhile.
    /// Ten workers and the daemon's other threads stay within the memory test's bound of 17.
    static let maxWorkers: UInt32 = 10
    /// Idle workers kept; libfuse ends a worker that finds more than this many idle. It is
    /// `maxWorkers`, so no worker ever ends. Why: on one CPU the reader a reply wakes usually
    /// preempts the worker that sent it before that worker is back in libfuse's loop, and libfuse
    /// counts it busy until then. With 32 workers and 10 kept idle, a plain open+read+close loop
    /// piled preempted workers up until none looked free, libfuse started another, and the surplus
    /// ended moments later: ~1,500 threads started and ended per 20,000 cycles (a thread's start,
    /// its 1 MiB request buffer mapped and unmapped, its exit), ~10 % of the daemon's CPU. (With 4
    /// kept idle, eight writers made the pool start and end a thread for about every third close;
    /// a new thread also starts with an empty caller cache, `IdentityCache` being per thread.)
    static let maxIdleWorkers: UInt32 = maxWorkers
    /// glibc malloc arenas at most. By default glibc gives each new thread its own arena (up to
    /// 8 per CPU), each holding on to the memory its thread freed: RSS grew with the number of
    /// workers that ever ran (27 → 473 MiB over three full scans of 100,000 items). Two arenas
    /// for two threads that allocate at once is the machine's CPU count here; more buys
    /// nothing on a 2-CPU machine but fragments.
    static let mallocArenas: Int32 = 2

    /// Mounts. After this returns the mount is live; call `run()` to serve it.
    public func mount() throws {
        // Before the workers exist: a thread picks its arena at its first allocation.
        _ = kcfs_malloc_arena_max(Self.mallocArenas)
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
        guard let se else { throw Errno.invalidArgument }
        guard fuse_set_signal_handlers(se) == 0 else {
            fuse_session_destroy(se)
            throw Errno.ioError
        }
        guard fuse_session_mount(se, mountpoint) == 0 else {
            fuse_remove_signal_handlers(se)
            fuse_session_destroy(se)
            throw Errno.ioError
        }
        state.withLock { $0.session = SessionHandle(pointer: se) }
        fs.invalidate = { [weak self] what in self?.invalidate(what) }
        fs.replayer = replayer
    }

    /// Serves requests until unmounted or signalled (SIGTERM, SIGINT, SIGHUP), then unmounts.
    public func run() -> Int32 {
        guard let se = state.withLock({ $0.session })?.pointer else { return 1 }
        let rc = kcfs_session_loop_mt_bounded(se, Self.maxWorkers, Self.maxIdleWorkers)
        // Pending replays are dropped and their writers released at once; a call in progress
        // fails as the mount goes.
        fs.replayer = nil
        replayer.stop()
        fs.invalidate = nil
        state.withLock { $0.session = nil }
        // Polls waiting on change feeds: let go (a notification needs the session).
        for feed in fs.openFiles.changeFeeds() { feed.close() }
        fuse_session_unmount(se)
        // An invalidation that read the session before it was cleared may still be using it:
        // let the queue finish before the session is freed.
        invalidations.sync()
        fuse_remove_signal_handlers(se)
        fuse_session_destroy(se)
        return rc
    }

    /// Tells the kernel a cached node or name is stale.
    ///
    /// Attributes alone are dropped at once, on the calling thread, so the notice is in place
    /// before the request that changed them is answered (a `stat` right after `close(2)` returns
    /// asks the daemon again). The kernel handles it (`fuse_reverse_inval_inode` with a negative
    /// offset) under the connection's `killsb` read lock and the inode's spinlock only: no inode
    /// or page lock that a request in flight could hold. Pages and names go on their own queue:
    /// a page or entry invalidation sent from a request handler can deadlock against the
    /// kernel's inode and page locks.
    ///
    /// The name an item left by a setxattr on it (`.nameLeft`) also goes on the queue, but the
    /// request waits for it up to `nameLeftWait`, so a `stat` of the old name right after the
    /// setxattr returns finds it gone. The wait cannot be unbounded: the kernel's entry
    /// invalidation locks the parent directory (and nothing else: not the file), and a rename(2)
    /// or unlink(2) of the same file holds that lock while it waits for the file's inode lock,
    /// which the setxattr holds until it is answered. Past the bound the request is answered
    /// anyway, the rename goes on, the queued invalidation completes after it, and until then
    /// the old name may still answer (for the cache lifetime at most). Requests that hold the
    /// directory while the daemon serves them (lookup, readdir, create, unlink) only delay it.
    private func invalidate(_ what: KeychainFileSystem.Invalidation) {
        if case .attributes(let ino) = what {
            guard let se = state.withLock({ $0.session })?.pointer else { return }
            _ = fuse_lowlevel_notify_inval_inode(se, ino, -1, 0)
            return
        }
        guard case .nameLeft(let parent, let name) = what else {
            invalidations.async { [self] in
                guard let se = state.withLock({ $0.session })?.pointer else { return }
                switch what {
                case .inode(let ino), .attributes(let ino): _ = fuse_lowlevel_notify_inval_inode(se, ino, 0, 0)
                case .entry(let parent, let name), .nameLeft(let parent, let name): Self.dropEntry(se, parent, name)
                }
            }
            return
        }
        let done = DispatchSemaphore(value: 0)
        invalidations.async { [self] in
            defer { done.signal() }
            guard let se = state.withLock({ $0.session })?.pointer else { return }
            Self.dropEntry(se, parent, name)
        }
        if done.wait(timeout: .now() + Self.nameLeftWait) == .timedOut {
            Log.debug("a moved item's old name was not dropped within 100 ms (a rename of it at the same moment?)")
        }
    }

    /// How long a request waits for the kernel to drop the name it left (see `invalidate`).
    static let nameLeftWait = DispatchTimeInterval.milliseconds(100)

    private static func dropEntry(_ se: OpaquePointer, _ parent: UInt64, _ name: String) {
        _ = name.withCString { fuse_lowlevel_notify_inval_entry(se, parent, $0, strlen($0)) }
    }

    // MARK: poll(2)

    /// A FUSE poll handle, kept until the next commit or the handle's release.
    struct PollHandle: @unchecked Sendable { let pointer: OpaquePointer }

    func poll(_ req: fuse_req_t?, _ fi: UnsafeMutablePointer<fuse_file_info>?, _ ph: OpaquePointer?) {
        guard let fi, let feed = fs.changeFeed(handle: fi.pointee.fh) else {
            if let ph { fuse_pollhandle_destroy(ph) }
            fuse_reply_poll(req, UInt32(POLLIN | POLLOUT | POLLRDNORM | POLLWRNORM))
            return
        }
        // The waiter first, then the check: a commit in between notifies, never lost.
        if let ph {
            let handle = PollHandle(pointer: ph)
            feed.wait { [weak self] notify in
                // Under the session's lock: run() clears it before the session is destroyed.
                self?.state.withLock { s in
                    if notify && s.session != nil { _ = fuse_lowlevel_notify_poll(handle.pointer) }
                }
                fuse_pollhandle_destroy(handle.pointer)
            }
        }
        fuse_reply_poll(req, feed.ready(through: fs.session(feed.caller)) ? UInt32(POLLIN | POLLRDNORM) : 0)
    }

    // MARK: Directory handles

    func openListing(_ listing: DirectoryListing) -> UInt64 {
        state.withLock { s in
            let handle = s.nextListing
            s.nextListing += 1
            s.listings[handle] = listing
            return handle
        }
    }

    func listing(_ handle: UInt64) -> DirectoryListing? { state.withLock { $0.listings[handle] } }

    /// Before the mount is announced: the file system's first listing set-up
    /// (`KeychainFileSystem.warmUp`), and a directory handle's, made and dropped.
    public func warmUp() {
        fs.warmUp()
        let handle = openListing(DirectoryListing(ino: Inode.root, parent: Inode.root, entries: []))
        _ = listing(handle).map { [CChar](repeating: 0, count: $0.count) }
        closeListing(handle)
    }

    func closeListing(_ handle: UInt64) { _ = state.withLock { $0.listings.removeValue(forKey: handle) } }

    // MARK: Requests

    static func session(_ req: fuse_req_t?) -> FuseSession {
        Unmanaged<FuseSession>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
    }

    /// The caller of a request. Only the mounting user (and root) is served; the access
    /// layer decides what a process may see.
    func caller(_ req: fuse_req_t?, identify: Bool = false) throws -> Caller {
        let ctx = fuse_req_ctx(req)!.pointee
        if ctx.uid != fs.uid && ctx.uid != 0 { throw Errno.permissionDenied }
        return try fs.access.caller(tid: ctx.pid, identify: identify)
    }

    /// Runs `body`, which replies on success. A failure is answered with its errno, converted
    /// in one place (ErrnoConversion): the core's status through the status table, anything
    /// unexpected logged with the operation and inode, then EIO.
    static func serve(
        _ req: fuse_req_t?, _ operation: StaticString, _ ino: UInt64, _ body: (FuseSession) throws -> Void
    ) {
        let s = session(req)
        s.onRequest?()
        do { try body(s) } catch {
            fuse_reply_err(req, ErrnoConversion.errno(for: error, during: "\(operation) of inode \(ino)").rawValue)
        }
    }

    static func name(_ p: UnsafePointer<CChar>?) throws -> String {
        guard let p else { throw Errno.invalidArgument }
        // The FUSE kernel module passes names up to 1024 bytes; like any filesystem with
        // 255-byte names, say so rather than failing to find or parse them.
        guard strlen(p) <= PathCodec.maxComponentBytes else { throw Errno.fileNameTooLong }
        // Names that are not UTF-8 cannot be the spelling of any item.
        guard let s = String(validatingCString: p) else { throw Errno.invalidArgument }
        return s
    }

    // MARK: Stat conversion

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
        let seconds = s.modified.timeIntervalSince1970
        let m = timespec(tv_sec: Int(seconds), tv_nsec: Int(seconds.truncatingRemainder(dividingBy: 1) * 1e9))
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
        s.uncached || (!s.isDirectory && fs.access.hasPolicy) ? 0 : options.cacheSeconds
    }
}
