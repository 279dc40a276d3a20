import Foundation
import KeychainSync
import Testing
import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// Wake-ups by LISTEN/NOTIFY, a server that restarts, and the pairing rendezvous.
@Suite("SyncServer changes and rendezvous")
struct ChangesAndRendezvousTests {
    @Test("a push from another connection wakes waitForChange; timeouts and the wake fd return false")
    func listenWakes() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let (writer, group) = try serverWithGroup(server)
        let watcher = try SyncServer(conninfo: server.conninfo)
        try watcher.listen(group: group)
        let clock = ContinuousClock()

        // From another thread, while the watcher waits (the NOTIFY is queued for a listener
        // whenever it commits: no ordering between the two threads is needed).
        let info = server.conninfo
        let failures = onThreads(1) { _ in
            let pusher = try SyncServer(conninfo: info)
            _ = try pusher.push(
                group: group, [PushRequest(recordID: randomBytes(32), expectedVersion: 0, version: 1, blob: [1])])
        }
        let started = clock.now
        #expect(try watcher.waitForChange(timeout: .seconds(30)))
        #expect(clock.now - started < .seconds(30))
        #expect(failures.isEmpty, "\(failures)")

        // Nothing more: a timeout. A push that only conflicts or repeats notifies nobody.
        let id = randomBytes(32)
        _ = try writer.push(group: group, [PushRequest(recordID: id, expectedVersion: 0, version: 1, blob: [2])])
        #expect(try watcher.waitForChange(timeout: .seconds(30)))
        _ = try writer.push(
            group: group,
            [
                PushRequest(recordID: id, expectedVersion: 0, version: 1, blob: [2]),
                PushRequest(recordID: id, expectedVersion: 5, version: 6, blob: [3]),
            ])
        let quiet = clock.now
        #expect(try !watcher.waitForChange(timeout: .milliseconds(300)))
        #expect(clock.now - quiet >= .milliseconds(300))

        // Another group's pushes do not wake this one's watcher.
        let otherGroup = randomBytes(16)
        try writer.createGroup(otherGroup)
        _ = try writer.push(group: otherGroup, [PushRequest(recordID: id, expectedVersion: 0, version: 1, blob: [4])])
        #expect(try !watcher.waitForChange(timeout: .milliseconds(300)))

        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        var byte: UInt8 = 0
        #expect(write(fds[1], &byte, 1) == 1)
        let woken = clock.now
        #expect(try !watcher.waitForChange(timeout: .seconds(30), wakeFD: fds[0]))
        #expect(clock.now - woken < .seconds(10))
    }

    @Test("a server restart is connectionLost; a new SyncServer then finds the data")
    func restart() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let (sync, group) = try serverWithGroup(server)
        let blob = randomBytes(1000)
        _ = try sync.push(
            group: group, [PushRequest(recordID: randomBytes(32), expectedVersion: 0, version: 1, blob: blob)])
        let watcher = try SyncServer(conninfo: server.conninfo)
        try watcher.listen(group: group)
        server.stop()
        #expect(throws: SyncServerError.postgres(.connectionLost)) { try watcher.waitForChange(timeout: .seconds(30)) }
        #expect(throws: SyncServerError.self) { try SyncServer(conninfo: server.conninfo) }
        try server.start()
        #expect(throws: SyncServerError.postgres(.connectionLost)) { try sync.lastSeq(group: group) }
        let again = try SyncServer(conninfo: server.conninfo)
        try again.checkSchema()
        #expect(try again.pull(group: group, after: 0, limit: 10).map(\.blob) == [blob])
    }

    @Test("rendezvous: offer, answer, deliver, take once; expired, unknown and used are refused")
    func rendezvous() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let (offerer, _) = try serverWithGroup(server)
        let answerer = try SyncServer(conninfo: server.conninfo)
        let id = randomBytes(32), offer = randomBytes(300), answer = randomBytes(200), payload = randomBytes(5000)

        try offerer.rendezvousOffer(id: id, offer: offer, expiresIn: .seconds(600))
        #expect(throws: SyncServerError.rendezvousExists) {
            try offerer.rendezvousOffer(id: id, offer: [1], expiresIn: .seconds(600))
        }
        try offerer.rendezvousListen(id: id)
        let nothing = try offerer.rendezvousPoll(id: id)
        #expect(nothing.answer == nil && nothing.payload == nil)
        #expect(throws: SyncServerError.rendezvousNotAnswered) {
            try offerer.rendezvousDeliver(id: id, payload: payload)
        }
        #expect(try answerer.rendezvousTake(id: id) == nil)  // nothing delivered yet

        #expect(try answerer.rendezvousAnswer(id: id, answer: answer) == offer)
        #expect(throws: SyncServerError.rendezvousUsed) { try answerer.rendezvousAnswer(id: id, answer: [9]) }
        #expect(try offerer.waitForChange(timeout: .seconds(30)))
        let answered = try offerer.rendezvousPoll(id: id)
        #expect(answered.answer == answer && answered.payload == nil)

        try answerer.rendezvousListen(id: id)
        try offerer.rendezvousDeliver(id: id, payload: payload)
        #expect(throws: SyncServerError.rendezvousUsed) { try offerer.rendezvousDeliver(id: id, payload: [1]) }
        #expect(try answerer.waitForChange(timeout: .seconds(30)))
        #expect(try answerer.rendezvousTake(id: id) == payload)
        #expect(throws: SyncServerError.rendezvousUsed) { try answerer.rendezvousTake(id: id) }
        #expect(throws: SyncServerError.rendezvousUsed) { try offerer.rendezvousPoll(id: id) }
        // Taken: the bytes are gone from the server.
        let left = try server.psql(
            "SELECT length(offer), length(answer), length(payload), taken FROM kcfs_sync.rendezvous")
        #expect(left == "0\t0\t0\tt\n")

        #expect(throws: SyncServerError.rendezvousUnknown) {
            try answerer.rendezvousAnswer(id: randomBytes(32), answer: [1])
        }
        #expect(throws: SyncServerError.rendezvousUnknown) { try answerer.rendezvousTake(id: randomBytes(32)) }
        #expect(throws: SyncServerError.rendezvousUnknown) { try answerer.rendezvousPoll(id: randomBytes(32)) }

        let late = randomBytes(32)
        try offerer.rendezvousOffer(id: late, offer: [1], expiresIn: .milliseconds(1))
        // Expire it for certain, without sleeping: as the superuser, move its expiry back.
        try server.psql(
            "UPDATE kcfs_sync.rendezvous SET expires = now() - interval '1 second' WHERE id <> '\\x\(hex(id))'")
        #expect(throws: SyncServerError.rendezvousExpired) { try answerer.rendezvousAnswer(id: late, answer: [2]) }
        #expect(throws: SyncServerError.rendezvousExpired) { try offerer.rendezvousPoll(id: late) }
        #expect(throws: SyncServerError.rendezvousExpired) { try answerer.rendezvousTake(id: late) }
        #expect(throws: SyncServerError.self) {
            try offerer.rendezvousOffer(id: [1, 2], offer: [], expiresIn: .seconds(1))
        }
    }
}

func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
