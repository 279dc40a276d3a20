import Foundation
import KeychainSync
import Testing
import TestSupport

/// push and pull: bytes exact, the version rules, and the group's gap-free sequence under
/// concurrent writers and readers.
@Suite("SyncServer push and pull")
struct PushPullTests {
    @Test("a few hundred random records (0…64 KiB) come back byte for byte, in seq order")
    func roundTrip() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let (sync, group) = try serverWithGroup(server)
        var sizes = [0, 1, 65536, 65535, 2]
        while sizes.count < 300 { sizes.append(Int.random(in: 0...65536)) }
        let requests = sizes.map { size in
            PushRequest(
                recordID: randomBytes(32), expectedVersion: 0, version: Int64.random(in: 1...1_000_000),
                deleted: Bool.random(), blob: randomBytes(size))
        }
        var seq: Int64 = 0
        for start in stride(from: 0, to: requests.count, by: 37) {
            let batch = Array(requests[start..<min(start + 37, requests.count)])
            let outcomes = try sync.push(group: group, batch)
            #expect(outcomes == batch.indices.map { .stored(seq: seq + Int64($0) + 1) })
            seq += Int64(batch.count)
        }
        #expect(try sync.lastSeq(group: group) == 300)
        var pulled: [ServerRecord] = []
        var cursor: Int64 = 0
        while true {
            let page = try sync.pull(group: group, after: cursor, limit: 64)
            if page.isEmpty { break }
            pulled += page
            cursor = page.last!.seq
        }
        #expect(pulled.map(\.seq) == Array(1...300))
        #expect(pulled.count == requests.count)
        for (record, request) in zip(pulled, requests) {
            #expect(record.recordID == request.recordID)
            #expect(record.version == request.version && record.deleted == request.deleted)
            #expect(record.blob == request.blob, "blob of \(request.blob.count) bytes differs")
        }
        #expect(try sync.pull(group: group, after: 299, limit: 10).map(\.seq) == [300])
    }

    @Test("the same version and bytes again is alreadyStored; a stale expected version is a conflict")
    func versionRules() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let (sync, group) = try serverWithGroup(server)
        let id = randomBytes(32), blob = randomBytes(100)
        let first = PushRequest(recordID: id, expectedVersion: 0, version: 1, blob: blob)
        #expect(try sync.push(group: group, [first]) == [.stored(seq: 1)])
        #expect(try sync.push(group: group, [first]) == [.alreadyStored(seq: 1)])
        // Other bytes under the same version: not a repeat, and 0 is stale now.
        var other = first
        other.blob = randomBytes(100)
        #expect(try sync.push(group: group, [other]) == [.conflict(currentVersion: 1)])
        let second = PushRequest(recordID: id, expectedVersion: 1, version: 2, deleted: true, blob: [])
        #expect(
            try sync.push(group: group, [second, second, first]) == [
                .stored(seq: 2), .alreadyStored(seq: 2), .conflict(currentVersion: 2),
            ])
        #expect(try sync.lastSeq(group: group) == 2)
        let records = try sync.pull(group: group, after: 0, limit: 10)
        #expect(records == [ServerRecord(recordID: id, version: 2, seq: 2, deleted: true, blob: [])])
        // An unknown group and ids of the wrong size are refused, typed.
        #expect(throws: SyncServerError.unknownGroup) { try sync.push(group: randomBytes(16), [first]) }
        let sameVersion = PushRequest(recordID: id, expectedVersion: 2, version: 2, blob: [5])
        #expect(throws: SyncServerError.self) { try sync.push(group: group, [sameVersion]) }
        #expect(try sync.lastSeq(group: group) == 2)
        #expect(throws: SyncServerError.self) {
            try sync.push(group: group, [PushRequest(recordID: [1], expectedVersion: 0, version: 1, blob: [])])
        }
        #expect(throws: SyncServerError.self) { try sync.createGroup(randomBytes(15)) }
    }

    @Test("two writers creating the same record at once: exactly one stored, the other a conflict")
    func concurrentCreate() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let (_, group) = try serverWithGroup(server)
        let ids = (0..<60).map { _ in randomBytes(32) }
        let outcomes = Locked<[[PushOutcome]]>([[], []])
        let info = server.conninfo
        let failures = onThreads(2) { t in
            let sync = try SyncServer(conninfo: info)
            for id in ids {
                let o = try sync.push(
                    group: group, [PushRequest(recordID: id, expectedVersion: 0, version: 1, blob: [UInt8(t)])])
                outcomes.withLock { $0[t] += o }
            }
        }
        #expect(failures.isEmpty, "\(failures)")
        let all = outcomes.current
        #expect(all[0].count == ids.count && all[1].count == ids.count)
        for i in 0..<ids.count {
            let pair = [all[0][i], all[1][i]]
            let stored = pair.filter { if case .stored = $0 { true } else { false } }
            #expect(stored.count == 1, "record \(i): \(pair)")
            #expect(pair.contains(.conflict(currentVersion: 1)), "record \(i): \(pair)")
        }
        let sync = try SyncServer(conninfo: info)
        #expect(try sync.lastSeq(group: group) == Int64(ids.count))
    }

    @Test("4 writers × 200 records: seqs 1…800 without a gap, and a concurrent reader sees each once")
    func gapFree() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let (_, group) = try serverWithGroup(server)
        let info = server.conninfo
        let total: Int64 = 800
        let seen = Locked<[Int64]>([])
        let failures = onThreads(5, timeout: 300) { t in
            let sync = try SyncServer(conninfo: info)
            if t < 4 {
                for _ in 0..<200 {
                    let r = PushRequest(
                        recordID: randomBytes(32), expectedVersion: 0, version: 1, blob: randomBytes(64))
                    let o = try sync.push(group: group, [r])
                    guard case .stored = o.first else { throw HarnessError("not stored: \(o)") }
                }
                return
            }
            // The reader follows its cursor while the writers push, until it has seen all 800.
            var cursor: Int64 = 0
            let deadline = Date().addingTimeInterval(240)
            try sync.listen(group: group)
            while cursor < total && Date() < deadline {
                let page = try sync.pull(group: group, after: cursor, limit: 7)
                // Caught up: sleep until a push commits (bounded, in case its NOTIFY came before).
                if page.isEmpty { _ = try sync.waitForChange(timeout: .seconds(1)) }
                for record in page {
                    seen.withLock { $0.append(record.seq) }
                    cursor = record.seq
                }
            }
        }
        #expect(failures.isEmpty, "\(failures)")
        // Every seq exactly once, in order: a skipped row would leave a hole here for ever.
        #expect(seen.current == Array(1...total))
        let sync = try SyncServer(conninfo: info)
        let all = try sync.pull(group: group, after: 0, limit: 10_000)
        #expect(all.map(\.seq) == Array(1...total))
        #expect(Set(all.map(\.recordID)).count == Int(total))
    }

    @Test("tombstones older than the window are purged and purgedThrough rises to the last one")
    func purge() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let (sync, group) = try serverWithGroup(server)
        let live = randomBytes(32), dead = randomBytes(32), recent = randomBytes(32)
        _ = try sync.push(
            group: group,
            [
                PushRequest(recordID: live, expectedVersion: 0, version: 1, blob: [1]),
                PushRequest(recordID: dead, expectedVersion: 0, version: 1, deleted: true, blob: []),
            ])
        #expect(try sync.purgedThrough(group: group) == 0)
        // Age the rows written so far by an hour, as the superuser can.
        try server.psql("UPDATE kcfs_sync.records SET updated = updated - interval '1 hour'")
        _ = try sync.push(
            group: group, [PushRequest(recordID: recent, expectedVersion: 0, version: 1, deleted: true, blob: [])])
        try sync.purgeTombstones(group: group, olderThan: .seconds(600))
        #expect(try sync.purgedThrough(group: group) == 2)
        #expect(try sync.pull(group: group, after: 0, limit: 10).map(\.recordID) == [live, recent])
        try sync.purgeTombstones(group: group, olderThan: .seconds(600))
        #expect(try sync.purgedThrough(group: group) == 2)
        try sync.purgeTombstones(group: group, olderThan: .zero)
        #expect(try sync.purgedThrough(group: group) == 3)
        #expect(try sync.lastSeq(group: group) == 3)
    }

    @Test("devices: touched with their cursors; a deleted group takes its records and devices")
    func devicesAndDelete() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let (sync, group) = try serverWithGroup(server)
        let a = randomBytes(16), b = randomBytes(16)
        let before = Date().addingTimeInterval(-60)
        try sync.touchDevice(group: group, device: a, cursor: 0)
        try sync.touchDevice(group: group, device: b, cursor: 5)
        try sync.touchDevice(group: group, device: a, cursor: 9)
        let devices = try sync.devices(group: group)
        #expect(devices.count == 2)
        #expect(Dictionary(uniqueKeysWithValues: devices.map { ($0.device, $0.cursor) }) == [a: 9, b: 5])
        #expect(devices.allSatisfy { $0.lastSeen > before && $0.lastSeen < Date().addingTimeInterval(60) })
        #expect(throws: SyncServerError.unknownGroup) {
            try sync.touchDevice(group: randomBytes(16), device: a, cursor: 1)
        }
        _ = try sync.push(
            group: group, [PushRequest(recordID: randomBytes(32), expectedVersion: 0, version: 1, blob: [7])])
        try sync.deleteGroup(group)
        #expect(try !sync.groupExists(group))
        #expect(
            try server.psql("SELECT count(*) FROM kcfs_sync.records; SELECT count(*) FROM kcfs_sync.devices")
                == "0\n0\n")
    }
}
