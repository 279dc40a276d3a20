import CPlatform
import FoundationEssentials
import Glibc
import Keychain
import KeychainAPI
import KeychainAccess
import KeychainCrypto
import KeychainFS
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Wakes the API's `watch` connections (issue 30): each registers a non-blocking pipe, and a
/// commit (`AccessLayer.onCommit`: this process's, and another process's once the host follows
/// them, `Keychain.followOtherProcesses`) writes one byte to each. The committing thread never blocks (a full pipe already
/// holds a wake-up); each connection's own thread reads the change log after the last change it
/// sent, so what it streams is what the log holds, in order, once.
final class ChangeFeed: Sendable {
    private let pipes = Mutex<[Int32: Int32]>([:])

    /// A wake-up pipe's (read, write) ends, registered; nil when no pipe can be made.
    func register() -> (read: Int32, write: Int32)? {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { return nil }
        for end in ends {
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
            _ = fcntl(end, F_SETFL, O_NONBLOCK)
        }
        pipes.withLock { $0[ends[0]] = ends[1] }
        return (ends[0], ends[1])
    }

    func unregister(_ ends: (read: Int32, write: Int32)) {
        pipes.withLock { _ = $0.removeValue(forKey: ends.read) }
        close(ends.read)
        close(ends.write)
    }

    func wake() {
        pipes.withLock { pipes in
            var one: UInt8 = 1
            for write in pipes.values { _ = Glibc.write(write, &one, 1) }
        }
    }
}

extension APIServer {
    /// A `watch` request: this connection streams the changes its caller may see (by the
    /// caller's access groups: `LoggedChange.visible`) until the client closes it or the
    /// service stops. Never a secret: the mount's paths of the items only.
    func serveWatch(_ client: Int32, since: Int64?, follow: Bool, peer: PeerProcess, senders: Set<pid_t>, holder: Bool)
    {
        func fail(_ status: KeychainStatus, _ message: String) {
            _ = try? Framing.send(client, APICodec.encode(.failure(status, message)))
        }
        let caller: Caller
        do {
            (caller, _) = try self.caller(of: peer, senders: senders, holder: holder)
        } catch let e as KeychainError {
            return fail(e.status, e.message)
        } catch {
            return fail(.io, "the caller could not be decided")
        }
        guard let wake = feed.register() else { return fail(.io, "cannot start a watch: no pipe") }
        defer { feed.unregister(wake) }
        Log.info("api: watch by \(peer.identity.description) from \(since.map(String.init) ?? "now")")
        var after: Int64
        do { after = try since ?? keychain.lastLoggedChange() } catch let e as KeychainError {
            return fail(e.status, e.message)
        } catch {
            return fail(.io, "the change log could not be read")
        }
        var first = true
        while true {
            do {
                var page: ChangeLogPage
                repeat {
                    page = try keychain.changeLog(after: after, limit: 500)
                    let shown = page.changes.compactMap { $0.visible(to: caller.canSee(accessGroup:)) }.map(Self.wire)
                    after = page.changes.last?.seq ?? after
                    if first || !shown.isEmpty {
                        try Framing.send(client, APICodec.encode(.changes(last: after, shown)))
                        first = false
                    }
                } while page.changes.count == 500
                if !follow { return }
            } catch let e as KeychainError {
                return fail(e.status, e.message)
            } catch {
                return  // the client went away
            }
            var fds = [
                pollfd(fd: client, events: Int16(POLLIN), revents: 0),
                pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0),
            ]
            while poll(&fds, 2, -1) < 0 && errno == EINTR {}
            // The client says nothing more on a watch: anything (its close) ends it.
            if fds[0].revents != 0 { return }
            var drain = [UInt8](repeating: 0, count: 64)
            while read(wake.read, &drain, drain.count) > 0 {}
        }
    }

    static func wire(_ change: LoggedChange) -> WireChange {
        let (path, oldPath) = ChangePaths.paths(of: change)
        return WireChange(
            seq: change.seq, kind: change.kind, itemClass: change.itemClass, id: change.id, path: path, oldPath: oldPath
        )
    }
}
