import CPlatform
import FoundationEssentials
import Glibc
import Keychain

/// The process at the other end of a Unix socket, pinned when the connection is accepted
/// (docs/security.md, "The service's callers"): its pidfd, which the kernel took at
/// `connect()` (`SO_PEERPIDFD`, Linux 6.5+), and its `/proc/<pid>` directory opened while that
/// pidfd showed the process alive, so every later read names the same process even once its pid
/// is reused. Its executable is read once, here: a process that `execve`s later, another
/// process that sends on the same socket (a fork, a descriptor passed with `SCM_RIGHTS`), or a
/// message once the process is gone, are judged by `judge(sender:)` and never get more than this
/// executable's groups.
public final class PeerProcess: Sendable {
    public let pid: pid_t
    public let uid: uid_t
    /// The process as identified at accept.
    public let identity: ProcessIdentity
    /// Why this process's executable is not trusted with its groups (traced, started with
    /// `LD_PRELOAD`, …), or nil.
    public let taint: String?
    /// Why the pinned process may not be the program that connected (it does not hold its end
    /// of the connection close-on-exec: PeerProcess+OwnEnd.swift), when the face asked, or nil.
    public let ownEnd: String?
    /// Whether the pin is the kernel's (`SO_PEERPIDFD`) or, on an older kernel, a `pidfd_open`
    /// of the pid `SO_PEERCRED` gave (a pid reused between connect and accept would be pinned).
    public let pinnedByKernel: Bool
    private let pidfd: Int32
    private let directory: Int32

    /// Why a peer could not be pinned (it is gone, another user, no /proc).
    public struct Refusal: Error, CustomStringConvertible {
        public let description: String
    }

    /// Pins the peer of the connected socket `fd`, refusing another user's process (root's too:
    /// a service holds one user's secrets). `checkingOwnEnd`: for a protocol without a greeting
    /// (the ssh agent), whose first request may have been written before an `execve` that came
    /// before this pin: the pinned program must hold its end itself, close-on-exec.
    public static func pin(socket fd: Int32, uid expected: uid_t = getuid(), checkingOwnEnd: Bool = false)
        throws(Refusal) -> PeerProcess
    {
        var cred = kcfs_ucred()
        guard kcfs_peer_cred(fd, &cred) == 0, cred.pid > 0 else { throw Refusal(description: "no peer credentials") }
        guard cred.uid == expected else {
            throw Refusal(description: "pid \(cred.pid) is another user (uid \(cred.uid))")
        }
        var pidfd = kcfs_peer_pidfd(fd)
        let byKernel = pidfd >= 0
        // Only a kernel without SO_PEERPIDFD (before 6.5) falls back to the pid: on one that has
        // it, a failure means the peer is gone, and its pid may already be another process's.
        if pidfd < 0 {
            guard errno == ENOPROTOOPT else { throw Refusal(description: "pid \(cred.pid) is gone") }
            pidfd = kcfs_pidfd_open(cred.pid, 0)
        }
        guard pidfd >= 0 else { throw Refusal(description: "pid \(cred.pid) is gone") }
        let directory = open("/proc/\(cred.pid)", kcfs_o_path | O_DIRECTORY | O_CLOEXEC)
        // The directory was opened for the pinned process only if that process is still alive
        // now: a pid is not given to another process while the first is unreaped.
        guard directory >= 0, kcfs_pidfd_exited(pidfd) == 0 else {
            if directory >= 0 { close(directory) }
            close(pidfd)
            throw Refusal(description: "pid \(cred.pid) is gone")
        }
        guard let identity = ProcessIdentity.leader(cred.pid, in: directory, pidfsInode: pidfsInode(pidfd)),
            kcfs_pidfd_exited(pidfd) == 0
        else {
            close(directory)
            close(pidfd)
            // Its executable cannot be read: it is gone, or not dumpable (a hardened process that
            // did not open itself to the service, as ServiceClient does while connected).
            throw Refusal(description: "pid \(cred.pid) cannot be identified (gone, or not dumpable)")
        }
        return PeerProcess(
            pid: cred.pid, uid: cred.uid, identity: identity, taint: Self.taint(in: directory),
            ownEnd: checkingOwnEnd ? Self.ownEnd(of: fd, in: directory) : nil, byKernel: byKernel, pidfd: pidfd,
            directory: directory)
    }

    private init(
        pid: pid_t, uid: uid_t, identity: ProcessIdentity, taint: String?, ownEnd: String?, byKernel: Bool,
        pidfd: Int32, directory: Int32
    ) {
        self.pid = pid
        self.uid = uid
        self.identity = identity
        self.taint = taint
        self.ownEnd = ownEnd
        self.pinnedByKernel = byKernel
        self.pidfd = pidfd
        self.directory = directory
    }

    deinit {
        close(pidfd)
        close(directory)
    }

    private static func pidfsInode(_ pidfd: Int32) -> UInt64 {
        kcfs_is_pidfs(pidfd) != 0 ? UInt64(kcfs_fd_inode(pidfd)) : 0
    }

    public var isAlive: Bool { kcfs_pidfd_exited(pidfd) == 0 }

    /// The executable the pinned process runs now (nil once it is gone).
    public func executableNow() -> String? {
        let exe = ProcessIdentity.readLink(Array("exe".utf8CString), relativeTo: directory)
        return isAlive ? exe : nil
    }

    /// Who a message is judged as. `sender`: the pid the kernel attached to the message's
    /// bytes (`SCM_CREDENTIALS`; 0 when it attached none). The identities involved: the pinned
    /// process as it connected, and whoever else is in play; the caller gets the groups all of
    /// them have (`AccessLayer.caller(peer:)`), and `why` says why it is fewer than the pin's.
    public func judge(sender: pid_t) -> (identities: [ProcessIdentity], why: String?) {
        var identities = [identity]
        var why: [String] = []
        if sender != pid {
            if sender > 0, let other = ProcessIdentity.of(tid: sender) {
                identities.append(other)
                why.append("sent by \(other.description), not the connecting process")
            } else {
                why.append("sent by pid \(sender), which could not be identified")
            }
        }
        if !isAlive {
            why.append("the connecting process (pid \(pid)) is gone")
        } else if sender == pid {
            let now = executableNow()
            if now != identity.executable {
                let changed = ProcessIdentity(pid: pid, executable: now, startTime: identity.startTime ?? 0)
                identities.append(changed)
                why.append("exec'd \(changed.description) since it connected")
            }
        }
        return (identities, why.isEmpty ? nil : why.joined(separator: "; "))
    }

    /// Every process involved in one request whose bytes the kernel attributed to `senders`,
    /// the pinned process first, and why the caller is lessened (nil: it is the pinned process
    /// alone, alive, running what it ran at the pin, untainted). A lessened caller gets the
    /// default group only (`AccessLayer.caller(peer:lessened:)`): never the pinned executable's
    /// groups, whose program may no longer be the one speaking.
    public func judge(senders: Set<pid_t>) -> (identities: [ProcessIdentity], why: String?) {
        var identities = [identity]
        var why: [String] = []
        // No credentials at all (a sender the kernel could not name): only the pin, lessened.
        if senders.isEmpty { why.append("no sender credentials") }
        for sender in senders.sorted() {
            let (judged, reason) = judge(sender: sender)
            identities += judged.dropFirst()
            if let reason { why.append(reason) }
        }
        if let ownEnd { why.append(ownEnd) }
        if let taint { why.append(taint) }
        return (identities, why.isEmpty ? nil : why.joined(separator: "; "))
    }

    /// Why a process's executable should not speak for it: a tracer can run any code in it,
    /// and a preloaded or audit library runs its own code before the program's. Read once,
    /// at the pin, through the pinned directory.
    static func taint(in directory: Int32) -> String? {
        let tracer = ProcessIdentity.readSmall(Array("status".utf8CString), relativeTo: directory) {
            field("TracerPid:", in: $0)
        }
        if let tracer, tracer != 0 { return "traced by pid \(tracer)" }
        // A process that is not dumpable keeps its environment from us: nothing it says about
        // itself can be checked.
        let fd = openat(directory, "environ", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return "not dumpable (its environment cannot be read)" }
        defer { close(fd) }
        var environment = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 16384)
        while environment.count < 1 << 20 {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            environment += chunk[0..<n]
        }
        for entry in environment.split(separator: 0) {
            for name in ["LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH"]
            where entry.count > name.utf8.count + 1 && entry.starts(with: Array((name + "=").utf8)) {
                return "started with \(name)"
            }
        }
        return nil
    }
}
