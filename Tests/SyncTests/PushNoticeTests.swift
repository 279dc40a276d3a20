import Foundation
@testable import KeychainSync
import Testing
import TestSupport

/// What a round that uploads asks of the server (issue 31's write path): one transaction that
/// stores the batch and records the device, a NOTIFY that says which seq it stored, and the rule
/// by which a device's cursor passes its own writes.
@Suite("SyncServer push notices")
struct PushNoticeTests {
    @Test("contiguousEnd: only stored seqs right after the cursor with no gap move it")
    func contiguousEnd() {
        #expect(PushOutcome.contiguousEnd(after: 4, [.stored(seq: 5), .stored(seq: 6)]) == 6)
        #expect(PushOutcome.contiguousEnd(after: 4, [.stored(seq: 6), .stored(seq: 5)]) == 6)
        // Another device's write between the cursor and the batch: the next pull reads it.
        #expect(PushOutcome.contiguousEnd(after: 4, [.stored(seq: 6), .stored(seq: 7)]) == nil)
        #expect(PushOutcome.contiguousEnd(after: 4, [.stored(seq: 5), .stored(seq: 7)]) == nil)
        // A repeat was stored by an earlier push, maybe at a seq behind others' writes.
        #expect(PushOutcome.contiguousEnd(after: 4, [.stored(seq: 5), .alreadyStored(seq: 2)]) == nil)
        // A conflict writes nothing and takes no seq.
        #expect(PushOutcome.contiguousEnd(after: 4, [.conflict(currentVersion: 3), .stored(seq: 5)]) == 5)
        #expect(PushOutcome.contiguousEnd(after: 4, [.conflict(currentVersion: 3)]) == nil)
        #expect(PushOutcome.contiguousEnd(after: 4, []) == nil)
        // Random batches: the answer is the last seq exactly when the stored seqs are cursor+1…
        for _ in 0..<2_000 {
            let cursor = Int64.random(in: 0..<100)
            let count = Int.random(in: 1..<6)
            let gap = Bool.random()
            var seqs = (0..<count).map { cursor + 1 + Int64($0) + (gap && $0 == count - 1 ? 1 : 0) }
            seqs.shuffle()
            let expected: Int64? = gap ? nil : cursor + Int64(count)
            #expect(PushOutcome.contiguousEnd(after: cursor, seqs.map { .stored(seq: $0) }) == expected)
        }
    }

    @Test("a push with a device records it in the same transaction, its cursor past its own writes")
    func pushTouchesDevice() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let (sync, group) = try serverWithGroup(server)
        let device = randomBytes(16), other = randomBytes(16)
        let first = try sync.push(
            group: group,
            [
                PushRequest(recordID: randomBytes(32), expectedVersion: 0, version: 1, blob: [1]),
                PushRequest(recordID: randomBytes(32), expectedVersion: 0, version: 1, blob: [2]),
            ], device: (device, 0))
        #expect(first == [.stored(seq: 1), .stored(seq: 2)])
        #expect(try cursors(sync, group) == [device: 2])
        // Another device writes seq 3; this one, still at 2, pushes seq 4: its cursor stays at 2
        // (seq 3 is not pulled yet).
        _ = try sync.push(
            group: group, [PushRequest(recordID: randomBytes(32), expectedVersion: 0, version: 1, blob: [3])],
            device: (other, 0))
        _ = try sync.push(
            group: group, [PushRequest(recordID: randomBytes(32), expectedVersion: 0, version: 1, blob: [4])],
            device: (device, 2))
        #expect(try cursors(sync, group) == [device: 2, other: 0])
        // A push into a group that is gone records nothing and says so.
        #expect(throws: SyncServerError.unknownGroup) {
            try sync.push(
                group: randomBytes(16),
                [PushRequest(recordID: randomBytes(32), expectedVersion: 0, version: 1, blob: [5])],
                device: (device, 0))
        }
        #expect(throws: SyncServerError.invalidArgument("a device id must be 1 to 64 bytes")) {
            try sync.push(group: group, [], device: ([], 0))
        }
        let state = try sync.groupState(group: group)
        #expect(state.lastSeq == 4 && state.purgedThrough == 0)
    }

    @Test("the NOTIFY says the highest seq stored; a repeat or a conflict notifies nobody")
    func noticeCarriesSeq() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let (writer, group) = try serverWithGroup(server)
        let watcher = try SyncServer(conninfo: server.conninfo)
        try watcher.listen(group: group)
        let id = randomBytes(32)
        _ = try writer.push(
            group: group,
            [
                PushRequest(recordID: id, expectedVersion: 0, version: 1, blob: [1]),
                PushRequest(recordID: randomBytes(32), expectedVersion: 0, version: 1, blob: [2]),
            ])
        #expect(try watcher.waitForNotice(timeout: .seconds(30)) == ChangeNotice(highestSeq: 2))
        _ = try writer.push(group: group, [PushRequest(recordID: id, expectedVersion: 0, version: 1, blob: [1])])
        #expect(try watcher.waitForNotice(timeout: .milliseconds(300)) == nil)
        // An older program's NOTIFY carries no number: the listener cannot skip its round.
        _ = try writer.connection.execute("SELECT pg_notify($1, '')", [.text(SyncServer.channel(group: group))])
        #expect(try watcher.waitForNotice(timeout: .seconds(30)) == ChangeNotice(highestSeq: nil))
    }

    private func cursors(_ sync: SyncServer, _ group: [UInt8]) throws -> [[UInt8]: Int64] {
        Dictionary(uniqueKeysWithValues: try sync.devices(group: group).map { ($0.device, $0.cursor) })
    }
}

/// `PGValue.byteaArray` (PostgreSQL's binary array format, written by hand) and the text arrays,
/// round-tripped through a real server: random batches, byte-exact.
@Suite("PGValue arrays")
struct PGArrayTests {
    @Test("1,000 random bytea[] batches (empty ones, empty elements, large ones) come back exact, in order")
    func byteaArrayRoundTrip() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let c = try PGConnection(conninfo: server.conninfo)
        for round in 0..<1_000 {
            let count = round % 50 == 0 ? 0 : Int.random(in: 1...12)
            let elements = (0..<count).map { _ in
                randomBytes(Bool.random() ? Int.random(in: 0...4) : Int.random(in: 0...3000))
            }
            let ints = (0..<count).map { _ in Int64.random(in: Int64.min...Int64.max) }
            let bools = (0..<count).map { _ in Bool.random() }
            let r = try c.execute(
                """
                SELECT b, i, f, n FROM unnest($1::bytea[], $2::bigint[], $3::boolean[])
                    WITH ORDINALITY AS t(b, i, f, n) ORDER BY n
                """, [.byteaArray(elements), .intArray(ints), .boolArray(bools)])
            #expect(r.rowCount == count)
            for k in 0..<min(r.rowCount, count) {
                #expect(try r.bytes(k, 0) == elements[k] && r.int64(k, 1) == ints[k] && r.bool(k, 2) == bools[k])
            }
        }
    }
}
