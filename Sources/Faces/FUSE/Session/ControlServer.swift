import CPlatform
import FoundationEssentials
import Glibc
import SystemPackage
import Synchronization
import Keychain
import KeychainAccess
import KeychainCrypto
import KeychainStore

/// The daemon's control socket: `keychainfs lock|unlock|status MOUNTPOINT` talk to it.
/// A Unix stream socket (0600, in a 0700 directory) that only the mounting user (or root)
/// may use, checked with SO_PEERCRED on every connection. The CLI finds it through the
/// mount itself: the root directory's xattr `user.keychainfs.control` holds its path.
///
/// Protocol: one request line, `status`, `lock`, `unlock` followed by the passphrase bytes up
/// to EOF, or `quiesce` (`keychainfs unmount` is about to unmount: the mount's replays to its
/// watchers pause for two seconds, so that the replay thread's calls do not make the mount
/// busy); one reply line, `ok <state> <since>` or `error <OSStatus> <message>`.
/// Every answer is given after the daemon's buffered audit lines are written, so once
/// `keychainfs status MOUNTPOINT` returns, the log holds a line for every access answered
/// before it.
public final class ControlServer: Sendable {
    public let path: String
    let access: AccessLayer
    var audit: AuditLog? { access.audit }
    let uid: uid_t
    /// The listening socket: made in init, closed once by stop().
    private let listener: Int32
    /// What `quiesce` does: the mount's replays paused (KeychainFileSystem.pauseReplays).
    private let quiesceHook = Mutex<(@Sendable () -> Void)?>(nil)
    public var onQuiesce: (@Sendable () -> Void)? {
        get { quiesceHook.withLock { $0 } }
        set { quiesceHook.withLock { $0 = newValue } }
    }

    public init(path: String, access: AccessLayer, uid: uid_t = getuid()) throws {
        self.path = path
        self.access = access
        self.uid = uid
        let dir = KeychainPaths.parent(of: path)
        try FileManager.default.createDirectory(
            atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        // The directory may have existed (a /tmp fallback): it must be ours, private, and not
        // a symlink, or another user could sit between the CLI and the daemon.
        var st = stat()
        guard lstat(dir, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR, st.st_uid == uid, st.st_mode & 0o077 == 0 else {
            let found =
                (st.st_mode & S_IFMT) == S_IFLNK
                ? "a symlink" : "mode \(String(st.st_mode & 0o7777, radix: 8)), owner uid \(st.st_uid)"
            throw KeychainError(
                .io,
                "the control socket's directory \(dir) must be a directory of uid \(uid) with mode 0700 (no access for others), not a symlink; it is \(found): fix it with 'chmod 700 \(dir)' or remove it"
            )
        }
        unlink(path)
        Self.removeStaleSockets(in: dir)
        let listener = try UnixSocket.listen(at: path, backlog: 8)
        self.listener = listener
    }

    /// Serves connections on a thread of its own until `stop()`.
    public func start() {
        Threads.detach { [self] in
            while true {
                let client = accept(listener, nil, nil)
                if client < 0 {
                    if errno == EINTR { continue }
                    return
                }
                handle(client)
                close(client)
            }
        }
    }

    public func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        unlink(path)
    }

    private func handle(_ client: Int32) {
        // A client that connects and says nothing must not block lock/unlock for others.
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var cred = kcfs_ucred()
        guard kcfs_peer_cred(client, &cred) == 0, cred.uid == uid || cred.uid == 0 else {
            reply(client, "error \(KeychainStatus.authFailed.rawValue) not the mounting user")
            return
        }
        var request = [UInt8]()
        var byte: UInt8 = 0
        while read(client, &byte, 1) == 1 && byte != 10 && request.count < 64 { request.append(byte) }
        let command = String(decoding: request, as: UTF8.self)
        let who = ProcessIdentity.of(tid: cred.pid)?.description ?? "pid \(cred.pid)"
        let session = access.serviceSession(describedAs: who + " (control socket)", via: "control")
        do {
            switch command {
            case "status": break
            case "quiesce": onQuiesce?()
            case "lock":
                session.lock()
                Log.info("locked by pid \(cred.pid)")
            case "unlock":
                var secret = [UInt8]()
                var chunk = [UInt8](repeating: 0, count: 4096)
                while true {
                    let n = chunk.withUnsafeMutableBytes { read(client, $0.baseAddress, $0.count) }
                    if n <= 0 || secret.count > 4096 { break }
                    secret += chunk[0..<n]
                }
                Sodium.wipe(&chunk)
                defer { Sodium.wipe(&secret) }
                try session.unlock(passphrase: try SecureBytes(copying: secret))
                Log.info("unlocked by pid \(cred.pid)")
            default:
                reply(client, "error \(KeychainStatus.param.rawValue) unknown request")
                return
            }
            reply(client, "ok " + Self.describe(access.lockState))
        } catch let e as KeychainError {
            Log.info("unlock by pid \(cred.pid) failed: \(e.status.name)")
            reply(client, "error \(e.status.rawValue) \(e.message)")
        } catch {
            // The type only: a raw error value could carry a library's internals.
            reply(client, "error \(KeychainStatus.io.rawValue) internal failure (\(type(of: error)))")
        }
    }

    static func describe(_ state: LockState) -> String {
        switch state {
        case .neverUnlocked: "locked never-unlocked"
        case .locked(let since): "locked " + AttributeText.iso8601(since)
        case .unlocked(let since): "unlocked " + AttributeText.iso8601(since)
        }
    }

    private func reply(_ client: Int32, _ line: String) {
        audit?.flush()
        _ = (line + "\n").withCString { write(client, $0, strlen($0)) }
    }

    /// The control sockets of daemons that died without cleaning up (kill -9, a crash): a
    /// `ctl-<pid>.sock` nobody listens on any more (connect is refused) is removed. One that
    /// answers belongs to a live daemon and stays.
    static func removeStaleSockets(in dir: String) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: dir) else { return }
        for name in names where name.hasPrefix("ctl-") && name.hasSuffix(".sock") {
            let path = dir + "/" + name
            do { close(try UnixSocket.connect(to: path)) } catch {
                if error == .connectionRefused { unlink(path) }
            }
        }
    }

    /// The client side, used by the CLI.
    public static func request(socket path: String, _ command: String, payload: SecureBytes? = nil) throws -> String {
        let fd = try UnixSocket.connect(to: path)
        defer { close(fd) }
        // Only hand a passphrase to a daemon of our own user (or root).
        var cred = kcfs_ucred()
        guard kcfs_peer_cred(fd, &cred) == 0, cred.uid == getuid() || cred.uid == 0 else {
            throw Errno.notPermitted
        }
        _ = (command + "\n").withCString { write(fd, $0, strlen($0)) }
        payload?.withUnsafeBytes { _ = write(fd, $0.baseAddress, $0.count) }
        shutdown(fd, Int32(SHUT_WR))
        var reply = [UInt8]()
        var byte: UInt8 = 0
        while read(fd, &byte, 1) == 1 && byte != 10 { reply.append(byte) }
        return String(decoding: reply, as: UTF8.self)
    }
}

/// `-o lock_after=SECONDS`: locks the keychain after that long without a filesystem request.
///
/// Without waking meanwhile (issue 30): one check is pending at a time, due exactly when the
/// keychain would have been idle that long since the last request *and* the last unlock (an
/// unlock after a long quiet spell must not be undone a second later); a request only notes its
/// time, and a check that finds a later request sleeps again until that one's due time. A check
/// that locks, or finds the keychain locked, schedules nothing: the next unlock does.
public final class IdleLocker: Sendable {
    let access: AccessLayer
    let seconds: Double
    private let lastActivity = Mutex(Date())
    /// Whether a check is scheduled.
    private let checkPending = Mutex(false)
    private let worker = SerialWorker(name: "kcfs-idle-lock")

    public init(access: AccessLayer, seconds: Double) {
        self.access = access
        self.seconds = seconds
    }

    public func touch() { lastActivity.withLock { $0 = Date() } }

    public func start() {
        access.onUnlock { [weak self] in
            guard let self else { return }
            schedule(after: seconds)
        }
        schedule(after: seconds)
    }

    private func schedule(after delay: Double) {
        let first = checkPending.withLock { pending in
            defer { pending = true }
            return !pending
        }
        if first { worker.after(seconds: delay) { [weak self] in self?.check() } }
    }

    private func check() {
        checkPending.withLock { $0 = false }
        guard case .unlocked(let since) = access.lockState else { return }
        let idle = Date().timeIntervalSince(max(lastActivity.withLock { $0 }, since))
        guard idle >= seconds else {
            schedule(after: seconds - idle)
            return
        }
        access.serviceSession(describedAs: "keychainfs (idle \(Int(idle)) s)", via: "service").lock()
        Log.info("locked after \(Int(idle)) s idle")
    }
}
