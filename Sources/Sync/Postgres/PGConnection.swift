import CPQ
import FoundationEssentials
import Glibc

#if canImport(Glibc)
    import Glibc
#endif

/// One libpq connection (`PGconn`). Not thread-safe and not Sendable: libpq allows one thread
/// at a time per connection, and a transaction or a LISTEN belongs to the connection, so each
/// thread that talks to the server opens its own. Closed by `close()` or when released.
public final class PGConnection {
    private var conn: OpaquePointer?
    /// The conninfo's password, scrubbed from every message this connection reports.
    private let secrets: [String]

    /// Connects (blocking) with `conninfo`, a `key=value` string or a `postgresql://` URI.
    /// libpq's own connect timeout is infinite: 10 s applies unless the conninfo sets one.
    /// `connectTimeout`: seconds, unless the connection string sets its own.
    public init(conninfo: String, connectTimeout: Int = 10) throws(PGError) {
        try Self.loadLibPQ()
        secrets = Self.passwords(in: conninfo)
        // expand_dbname: the conninfo in "dbname" is parsed as a whole connection string, and
        // its settings override the defaults listed before it.
        let keywords = ["connect_timeout", "fallback_application_name", "dbname"]
        let values = [String(connectTimeout), "keychainfs-sync", conninfo]
        let keywordPointers = keywords.map { UnsafePointer(strdup($0)) } + [nil]
        let valuePointers = values.map { UnsafePointer(strdup($0)) } + [nil]
        defer {
            for p in keywordPointers + valuePointers { free(UnsafeMutablePointer(mutating: p)) }
        }
        guard let c = kcfs_PQconnectdbParams(keywordPointers, valuePointers, 1) else {
            throw .connectionFailed(message: "libpq could not allocate a connection")
        }
        guard kcfs_PQstatus(c) == CONNECTION_OK else {
            let message = scrubSecrets(String(cString: kcfs_PQerrorMessage(c)), secrets: secrets)
            kcfs_PQfinish(c)
            throw PGError.connect(message.trimmingWhitespaceAndNewlines())
        }
        conn = c
        // Text results are decoded by type; hex is the only bytea text form PGResult reads.
        _ = kcfs_PQsetClientEncoding(c, "UTF8")
        // libpq prints the server's notices ("… already exists, skipping") and a dying server's
        // last words to stderr by default: a daemon's output is not the place; failures are
        // reported as PGError instead.
        kcfs_PQsetNoticeProcessor(c, { _, _ in }, nil)
        try execute("SET bytea_output = 'hex'")
    }

    deinit { close() }

    /// libpq is loaded on the first connection, not at start-up (Sources/CPQ/include/CPQ.h): a
    /// machine without libpq5 gets this error from sync's verbs, and every other verb runs.
    static func loadLibPQ() throws(PGError) {
        var message = [CChar](repeating: 0, count: 256)
        guard kcfs_pq_load(&message, message.count) == 0 else {
            let text = String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            throw .connectionFailed(message: "libpq (libpq.so.5, Debian's libpq5) could not be loaded: " + text)
        }
    }

    /// Ends the connection (PQfinish). Calls after it throw `.connectionLost`.
    public func close() {
        if let c = conn { kcfs_PQfinish(c) }
        conn = nil
    }

    /// The connection's socket (PQsocket), for a caller's own poll; -1 when closed.
    public var socket: Int32 { conn.map { kcfs_PQsocket($0) } ?? -1 }

    /// True while libpq considers the connection usable.
    public var isConnected: Bool { conn.map { kcfs_PQstatus($0) == CONNECTION_OK } ?? false }

    private func open() throws(PGError) -> OpaquePointer {
        guard let c = conn, kcfs_PQstatus(c) == CONNECTION_OK else { throw .connectionLost }
        return c
    }

    /// Runs one statement with `$1…` parameters (PQexecParams, text results).
    @discardableResult
    public func execute(_ sql: String, _ params: [PGValue] = []) throws(PGError) -> PGResult {
        let c = try open()
        let wire = params.map(\.wire)
        var types = wire.map(\.type), lengths = wire.map { Int32($0.bytes?.count ?? 0) }
        var formats = wire.map(\.format)
        // Each value in memory of its own, alive until PQexecParams returns (it copies them out).
        var values: [UnsafePointer<CChar>?] = wire.map { w in
            guard let bytes = w.bytes else { return nil }
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count + 1)
            bytes.withUnsafeBytes { source in
                if let base = source.baseAddress {
                    UnsafeMutableRawPointer(buffer).copyMemory(from: base, byteCount: source.count)
                }
            }
            buffer[bytes.count] = 0
            return UnsafePointer(buffer)
        }
        defer { for v in values { v.map { UnsafeMutablePointer(mutating: $0).deallocate() } } }
        let result = kcfs_PQexecParams(c, sql, Int32(params.count), &types, &values, &lengths, &formats, 0)
        return try finish(c, result)
    }

    /// Runs several `;`-separated statements without parameters (PQexec): an SQL script such as
    /// `SyncServer.adminSQL`. Returns the last statement's result.
    @discardableResult
    public func executeScript(_ sql: String) throws(PGError) -> PGResult {
        let c = try open()
        return try finish(c, kcfs_PQexec(c, sql))
    }

    private func finish(_ c: OpaquePointer, _ result: OpaquePointer?) throws(PGError) -> PGResult {
        guard let result else {
            if kcfs_PQstatus(c) == CONNECTION_BAD { throw .connectionLost }
            throw .connectionFailed(message: scrubSecrets(String(cString: kcfs_PQerrorMessage(c)), secrets: secrets))
        }
        defer { kcfs_PQclear(result) }
        let status = kcfs_PQresultStatus(result)
        if status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_EMPTY_QUERY {
            return try PGResult(result)
        }
        // A failure that left the connection bad (the server shut down or the socket broke) is a
        // lost connection, whatever the server's last words were (57P01 admin_shutdown…).
        if kcfs_PQstatus(c) == CONNECTION_BAD { throw .connectionLost }
        let state = kcfs_PQresultErrorField(result, kcfs_pg_diag_sqlstate).map { String(cString: $0) } ?? ""
        let primary = kcfs_PQresultErrorField(result, kcfs_pg_diag_message_primary).map { String(cString: $0) }
        let message = scrubSecrets(primary ?? String(cString: kcfs_PQresultErrorMessage(result)), secrets: secrets)
        if state == "28P01" || state == "28000" { throw .authenticationFailed(message: message) }
        throw .server(sqlState: state, message: message)
    }

    /// Runs `body` between BEGIN and COMMIT; on a throw (or a failed COMMIT) the transaction is
    /// rolled back, when the connection still lives, and the error rethrown.
    public func transaction<R>(_ body: () throws -> R) throws -> R {
        try execute("BEGIN")
        do {
            let value = try body()
            try execute("COMMIT")
            return value
        } catch {
            if let c = conn, kcfs_PQstatus(c) == CONNECTION_OK, kcfs_PQtransactionStatus(c) != PQTRANS_IDLE {
                _ = try? execute("ROLLBACK")
            }
            throw error
        }
    }

    /// `"name"` as an SQL identifier.
    public static func quoteIdentifier(_ name: String) -> String {
        "\"" + name.replacing("\"", with: "\"\"") + "\""
    }

    /// LISTEN on `channel`: its NOTIFYs are then returned by `waitForNotifications`.
    public func listen(_ channel: String) throws(PGError) {
        try execute("LISTEN " + Self.quoteIdentifier(channel))
    }

    public func unlisten(_ channel: String) throws(PGError) {
        try execute("UNLISTEN " + Self.quoteIdentifier(channel))
    }

    /// Waits for NOTIFYs on the channels this connection listens to: returns those heard (at
    /// least one), or none when `timeout` passed (nil: no limit) or `wakeFD` became readable.
    /// The caller drains `wakeFD`; this only polls it. Throws `.connectionLost` when the server
    /// went away (PQconsumeInput fails or the connection turns bad).
    public func waitForNotifications(timeout: Duration?, wakeFD: Int32? = nil) throws(PGError) -> [PGNotification] {
        let c = try open()
        let deadline = timeout.map { ContinuousClock.now + $0 }
        while true {
            // Notifications may already be queued, read along with an earlier statement's result.
            guard kcfs_PQconsumeInput(c) != 0 else { throw .connectionLost }
            let heard = drainNotifications(c)
            if !heard.isEmpty { return heard }
            let fd = kcfs_PQsocket(c)
            guard kcfs_PQstatus(c) == CONNECTION_OK, fd >= 0 else { throw .connectionLost }
            var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0)]
            if let wakeFD { fds.append(pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)) }
            var milliseconds: Int32 = -1
            if let deadline {
                let left = deadline - ContinuousClock.now
                if left <= .zero { return [] }
                let (seconds, attoseconds) = left.components
                let total = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
                milliseconds = Int32(clamping: total)
            }
            let ready = poll(&fds, nfds_t(fds.count), milliseconds)
            if ready < 0 {
                if errno == EINTR { continue }
                throw .connectionFailed(message: "poll: " + String(cString: strerror(errno)))
            }
            if ready == 0 { continue }  // the deadline check above returns
            if fds[0].revents != 0 {
                guard kcfs_PQconsumeInput(c) != 0 else { throw .connectionLost }
                let heard = drainNotifications(c)
                if !heard.isEmpty { return heard }
            }
            if fds.count > 1 && fds[1].revents != 0 { return [] }
        }
    }

    private func drainNotifications(_ c: OpaquePointer) -> [PGNotification] {
        var heard: [PGNotification] = []
        while let n = kcfs_PQnotifies(c) {
            heard.append(
                PGNotification(
                    channel: String(cString: n.pointee.relname), payload: String(cString: n.pointee.extra),
                    senderPID: n.pointee.be_pid))
            kcfs_PQfreemem(n)
        }
        return heard
    }

    /// The password values in a conninfo (key=value or URI), to scrub from messages.
    private static func passwords(in conninfo: String) -> [String] {
        var found: [String] = []
        var error: UnsafeMutablePointer<CChar>?
        if let options = kcfs_PQconninfoParse(conninfo, &error) {
            var option = options
            while let keyword = option.pointee.keyword {
                if String(cString: keyword) == "password", let value = option.pointee.val {
                    found.append(String(cString: value))
                }
                option += 1
            }
            kcfs_PQconninfoFree(options)
        }
        if let error { kcfs_PQfreemem(error) }
        return found
    }
}
