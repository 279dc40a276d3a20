import Dispatch
import FoundationEssentials
import Glibc
import Keychain
import KeychainAPI
import KeychainAccess
import KeychainFS
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A mount a running service took on for `keychainfs mount` (docs/service.md, "Joining a running
/// service"): a `keychainfs serve` (or a service the Secret Service's activation started) mounts
/// its vault itself, over the access layer, audit log and lock state its other faces use, so
/// the mount is one more face of the one keychain, not a second copy of it. One at a time; it
/// ends when unmounted (`keychainfs unmount`, `fusermount3 -u`), and the service unmounts it
/// when it stops.
final class JoinedMount: Sendable {
    private struct Live {
        var mountpoint: String
        var session: FuseSession
        var control: ControlServer?
        var finished: DispatchSemaphore
    }
    private let live = Mutex<Live?>(nil)
    let keychain: Keychain
    let access: AccessLayer
    let idle: IdleLocker?

    init(keychain: Keychain, access: AccessLayer, idle: IdleLocker?) {
        self.keychain = keychain
        self.access = access
        self.idle = idle
    }

    /// Mounts on `request.mountpoint` and serves it on a thread of its own; returns once the
    /// mount is live. The CLI has checked the directory (empty, or `-o nonempty`) as for a
    /// mount of its own.
    func mount(_ request: MountRequest) throws {
        if let other = live.withLock({ $0?.mountpoint }) {
            throw KeychainError(
                .duplicateItem,
                "vault \(keychain.path) is already mounted on \(other) by a keychainfs service (pid \(getpid()))")
        }
        let fs = KeychainFileSystem(access: access)
        var options = MountOptions()
        options.allowOther = request.allowOther
        options.defaultPermissions = request.defaultPermissions
        options.debug = request.debug
        options.cacheSeconds = Double(request.cacheMilliseconds) / 1000
        options.fsname = keychain.path
        // `lock|unlock|status MOUNTPOINT` find the service through the mount's root xattr.
        let control = try? ControlServer(
            path: ServiceLocator.directory() + "/ctl-\(getpid()).sock", access: access)
        fs.controlSocketPath = control?.path
        control?.onQuiesce = { [weak fs] in fs?.pauseReplays() }
        let session = FuseSession(fs: fs, mountpoint: request.mountpoint, options: options)
        if let idle { session.onRequest = { idle.touch() } }
        session.warmUp()
        do { try session.mount() } catch {
            throw KeychainError(
                .io, "cannot mount on \(request.mountpoint) (is /dev/fuse usable, and fusermount3 installed?)")
        }
        control?.start()
        let finished = DispatchSemaphore(value: 0)
        live.withLock {
            $0 = Live(mountpoint: request.mountpoint, session: session, control: control, finished: finished)
        }
        Log.info("mounted \(keychain.path) on \(request.mountpoint) (joined the running service)")
        Threads.detach { [self] in
            let rc = session.run()
            control?.stop()
            live.withLock { $0 = nil }
            Log.info("unmounted \(request.mountpoint)" + (rc == 0 ? "" : " (the FUSE loop ended with \(rc))"))
            finished.signal()
        }
    }

    /// Unmounts (lazily: a process still in the directory keeps it until it leaves) and waits up
    /// to 5 s for the loop to end: the service is stopping.
    func unmount() {
        guard let (mountpoint, finished) = live.withLock({ $0.map { ($0.mountpoint, $0.finished) } }) else {
            return
        }
        do {
            _ = try ChildProcess.runQuietly("/usr/bin/fusermount3", arguments: ["fusermount3", "-u", "-z", mountpoint])
        } catch {
            Log.error("cannot run fusermount3 to unmount \(mountpoint): \(error)")
            return
        }
        if finished.wait(timeout: .now() + 5) == .timedOut {
            Log.error("\(mountpoint): the FUSE loop did not end within 5 s of the unmount")
        }
    }
}
