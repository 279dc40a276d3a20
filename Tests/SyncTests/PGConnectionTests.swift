import Foundation
import Testing
import TestSupport

@testable import KeychainSync

#if canImport(Glibc)
    import Glibc
#endif

/// libpq wrapped: connecting, typed errors without secrets, parameters and results of every
/// kind, LISTEN/NOTIFY waits, and a server that goes away.
@Suite("PGConnection against a real PostgreSQL 15")
struct PGConnectionTests {
    @Test("a wrong password is authenticationFailed, and no message holds the password")
    func wrongPassword() throws {
        let server = try PostgresServer(password: "right-Pw-7781")
        defer { server.stop() }
        #expect(throws: Never.self) { try PGConnection(conninfo: server.conninfo) }
        let secret = "wr0ng-s3cret-4242"
        do {
            _ = try PGConnection(conninfo: server.conninfo(user: "postgres", password: secret))
            Issue.record("a wrong password was accepted")
        } catch .authenticationFailed(let message) {
            #expect(message.contains("password authentication failed"), "\(message)")
            #expect(!message.contains(secret), "\(message)")
        } catch {
            Issue.record("expected authenticationFailed, got \(error)")
        }
        // The same through a URI.
        do {
            _ = try PGConnection(conninfo: "postgresql://postgres:\(secret)@127.0.0.1:\(server.port)/postgres")
            Issue.record("a wrong password was accepted")
        } catch {
            guard case .authenticationFailed = error else { throw error }
            #expect(!"\(error)".contains(secret))
        }
    }

    @Test("nothing listening is connectionFailed, with the password scrubbed")
    func nothingListening() throws {
        let server = try PostgresServer()
        server.stop()
        let secret = "never-shown-9931"
        do {
            _ = try PGConnection(conninfo: server.conninfo(user: "postgres", password: secret))
            Issue.record("connected to a stopped server")
        } catch {
            guard case .connectionFailed(let message) = error else { throw error }
            #expect(message.contains("\(server.port)"), "\(message)")
            #expect(!message.contains(secret))
        }
    }

    @Test("secrets are scrubbed from libpq text in every spelling")
    func scrubbing() {
        let text = "x password=abc y password = 'a b\\'c' postgresql://u:pw@h/db PASSWORD=Q1 literal-s3"
        let out = scrubSecrets(text, secrets: ["literal-s3"])
        for secret in ["abc", "a b", "pw@", "Q1", "literal-s3"] { #expect(!out.contains(secret), "\(out)") }
        #expect(out.contains("postgresql://u:***@h/db"), "\(out)")
    }

    @Test("parameters of every kind go in and come back exact; server errors carry their SQLSTATE")
    func parametersAndResults() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let c = try PGConnection(conninfo: server.conninfo)
        for size in [0, 1, 2, 255, 4096, 65536, 200_000] {
            let bytes = randomBytes(size)
            let r = try c.execute(
                "SELECT $1::bytea, length($1::bytea), $2::text, $3::bigint, $4::boolean, $5::text IS NULL",
                [.bytes(bytes), .text("é ✓ \(size)"), .int(Int64.min + Int64(size)), .bool(size % 2 == 0), .null])
            #expect(r.rowCount == 1 && r.columns.count == 6)
            #expect(try r.bytes(0, 0) == bytes)
            #expect(try r.int64(0, 1) == Int64(size))
            #expect(try r.string(0, 2) == "é ✓ \(size)")
            #expect(try r.int64(0, 3) == Int64.min + Int64(size))
            #expect(try r.bool(0, 4) == (size % 2 == 0))
            #expect(try r.bool(0, 5))
        }
        let nulls = try c.execute("SELECT NULL::bytea AS b")
        #expect(nulls.isNull(0, 0) && nulls.column(named: "b") == 0)
        #expect(throws: PGError.self) { try nulls.bytes(0, 0) }
        do {
            try c.execute("SELECT * FROM no_such_table")
            Issue.record("a missing table was found")
        } catch {
            guard case .server(let state, let message) = error else { throw error }
            #expect(state == "42P01" && message.contains("no_such_table"), "\(state) \(message)")
        }
        // A failed transaction is rolled back and the connection stays usable.
        try c.execute("CREATE TABLE t (v bigint)")
        #expect(throws: PGError.self) {
            try c.transaction {
                try c.execute("INSERT INTO t VALUES (1)")
                try c.execute("INSERT INTO t VALUES ('x')")
            }
        }
        #expect(try c.execute("SELECT count(*) FROM t").int64(0, 0) == 0)
        try c.transaction { _ = try c.execute("INSERT INTO t VALUES (2)") }
        #expect(try c.execute("SELECT v FROM t").int64(0, 0) == 2)
        #expect(try c.executeScript("SELECT 1; SELECT 3").int64(0, 0) == 3)
    }

    @Test("a NOTIFY wakes a waiter; a timeout and the wake descriptor return empty")
    func notifications() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let listener = try PGConnection(conninfo: server.conninfo)
        let notifier = try PGConnection(conninfo: server.conninfo)
        try listener.listen("kcfs_test")
        #expect(listener.socket >= 0)
        try notifier.execute("SELECT pg_notify($1, $2)", [.text("kcfs_test"), .text("hello")])
        let heard = try listener.waitForNotifications(timeout: .seconds(30))
        #expect(heard.map(\.payload) == ["hello"] && heard.first?.channel == "kcfs_test")

        let clock = ContinuousClock()
        let start = clock.now
        #expect(try listener.waitForNotifications(timeout: .milliseconds(150)).isEmpty)
        #expect(clock.now - start >= .milliseconds(150))

        var pipeFDs: [Int32] = [0, 0]
        #expect(pipe(&pipeFDs) == 0)
        defer { close(pipeFDs[0]); close(pipeFDs[1]) }
        var byte: UInt8 = 1
        #expect(write(pipeFDs[1], &byte, 1) == 1)
        let woken = clock.now
        #expect(try listener.waitForNotifications(timeout: .seconds(30), wakeFD: pipeFDs[0]).isEmpty)
        #expect(clock.now - woken < .seconds(10))

        // A notification sent while the listener ran a statement is kept for the next wait.
        try notifier.execute("SELECT pg_notify('kcfs_test', 'queued')")
        try listener.execute("SELECT pg_sleep(0.05)")
        #expect(try listener.waitForNotifications(timeout: .seconds(30)).map(\.payload) == ["queued"])
    }

    @Test("a server restart is connectionLost, for a statement and for a waiter; a new connection works")
    func restart() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let c = try PGConnection(conninfo: server.conninfo)
        let waiter = try PGConnection(conninfo: server.conninfo)
        try waiter.listen("kcfs_test")
        try c.executeScript("CREATE TABLE kept (v bigint); INSERT INTO kept VALUES (7)")
        server.stop()
        #expect(throws: PGError.connectionLost) { try waiter.waitForNotifications(timeout: .seconds(30)) }
        try server.start()
        #expect(throws: PGError.connectionLost) { try c.execute("SELECT 1") }
        #expect(!c.isConnected)
        let again = try PGConnection(conninfo: server.conninfo)
        #expect(try again.execute("SELECT v FROM kept").int64(0, 0) == 7)
    }
}
