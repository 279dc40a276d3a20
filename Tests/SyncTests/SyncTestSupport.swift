import Foundation
import KeychainSync
import TestSupport

/// Random bytes for ids and blobs (the system generator: no seed to manage).
func randomBytes(_ count: Int) -> [UInt8] {
    var generator = SystemRandomNumberGenerator()
    return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
}

/// A value several threads fill in under a lock.
final class Locked<Value>: @unchecked Sendable {
    // @unchecked: `value` is only touched under `lock`.
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        try lock.withLock { try body(&value) }
    }
    var current: Value { lock.withLock { value } }
}

/// Runs `body(i)` on `count` threads of their own at once and waits up to `timeout` seconds for
/// all; returns what they threw (a thread still running at the deadline counts as an error).
func onThreads(_ count: Int, timeout: Double = 120, _ body: @escaping @Sendable (Int) throws -> Void) -> [String] {
    let failures = Locked<[String]>([])
    let done = DispatchSemaphore(value: 0)
    for i in 0..<count {
        let thread = Thread {
            do { try body(i) } catch { failures.withLock { $0.append("thread \(i): \(error)") } }
            done.signal()
        }
        thread.start()
    }
    let deadline = DispatchTime.now() + timeout
    for _ in 0..<count where done.wait(timeout: deadline) == .timedOut {
        failures.withLock { $0.append("a thread was still running after \(timeout) s") }
    }
    return failures.current
}

/// A server with the kcfs_sync schema and one group, connected as its superuser.
func serverWithGroup(_ server: PostgresServer) throws -> (SyncServer, [UInt8]) {
    let sync = try SyncServer(conninfo: server.conninfo)
    try sync.ensureSchema()
    let group = randomBytes(16)
    try sync.createGroup(group)
    return (sync, group)
}
