import Synchronization

/// How many connections a socket face serves at once (a thread and a few descriptors each):
/// past the limit a new one is refused at accept, so no client can exhaust the service.
public final class ConnectionLimit: Sendable {
    public let limit: Int
    private let open = Mutex(0)

    public init(_ limit: Int) { self.limit = limit }

    /// Takes a place for a new connection; false when all are taken.
    public func admit() -> Bool {
        open.withLock { n in
            guard n < limit else { return false }
            n += 1
            return true
        }
    }

    /// Gives back the place of a connection that ended.
    public func release() { open.withLock { $0 -= 1 } }
}
