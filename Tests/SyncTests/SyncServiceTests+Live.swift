import Foundation
import KeychainSync
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension SyncServiceTests {
    @Test(
        "setup and join while both vaults are mounted: the running services sync at once; leave and a new group while mounted: the service seals for the new group"
    )
    func groupChangesWhileMounted() throws {
        try withSyncPeers(
            group: false, setup: { try $0.a.addGeneric("live.example", "ann", "a1", extra: ["--synchronizable"]) }
        ) { p in
            let a = p.a, b = p.b
            // The CLI joins the vaults the services hold.
            try p.setup()
            try p.joinByRecoveryCode()
            #expect(
                waitUntil(Self.propagation) { SyncPeers.read(b, SyncPeers.file(b, "live.example", "ann")) == "a1" },
                "the item B's join pulled is not in B's mount")
            try #require(try SyncPeers.write(a, SyncPeers.file(a, "live.example", "bob"), "b1"))
            #expect(
                waitUntil(Self.propagation) { SyncPeers.read(b, SyncPeers.file(b, "live.example", "bob")) == "b1" },
                "A's service did not push, or B's did not pull, after a join made while they ran: \(b.daemonLog.suffix(600))"
            )
            try #require(try SyncPeers.write(b, SyncPeers.file(b, "live.example", "cat"), "c1"))
            #expect(
                waitUntil(Self.propagation) { SyncPeers.read(a, SyncPeers.file(a, "live.example", "cat")) == "c1" },
                "B's change did not reach A")

            // B leaves and starts a new group (a new root key) while its service runs; then
            // changes an item through its mount: the service must seal it for the new group.
            let leave = try b.cli(["sync", "leave"] + b.unlockArgs)
            try #require(leave.status == 0, "leave: \(leave.summary)")
            let setup = try b.cli(["sync", "setup"] + b.unlockArgs + [p.uri], timeout: 60)
            try #require(setup.status == 0, "setup of a new group on B: \(setup.summary)")
            try #require(try SyncPeers.write(b, SyncPeers.file(b, "live.example", "dora"), "d1"))
            #expect(waitUntil(Self.propagation) { p.outbox(b) == 0 }, "B's outbox: \(p.status(b) ?? [:])")

            // A, unmounted (so only B's service is the one under test), joins the new group by
            // B's recovery code and pulls in a process of its own.
            try a.unmount()
            let aLeave = try a.cli(["sync", "leave"] + a.unlockArgs)
            try #require(aLeave.status == 0, "leave on A: \(aLeave.summary)")
            let code = try b.cli(["sync", "recovery-code"] + b.unlockArgs)
            try #require(code.status == 0, "\(code.summary)")
            let file = a.root + "/recovery-code-2"
            try Data(code.stdoutBytes).write(to: URL(fileURLWithPath: file))
            let join = try a.cli(["sync", "join"] + a.unlockArgs + [p.uri, "--recovery-code-file", file], timeout: 60)
            #expect(join.status == 0, "join of the new group on A: \(join.summary)")
            let now = try a.cli(["sync", "now"] + a.unlockArgs, timeout: 60)
            #expect(now.status == 0 && !now.stderr.contains("refused"), "sync now on A: \(now.summary)")
            let dora = try a.cli(["find-generic-password", "-s", "live.example", "-a", "dora", "-w"] + a.unlockArgs)
            #expect(
                dora.status == 0 && dora.stdout == "d1\n",
                "the item B's service uploaded after the new setup: \(dora.summary)")
        }
    }

    @Test(
        "B locked: a delete made on B while locked is journaled; A's new item waits; at unlock B pulls it and A loses the deleted one"
    )
    func lockedDeviceCatchesUpAtUnlock() throws {
        try withSyncPeers(setup: { p in
            try p.a.addGeneric("lock.example", "gone", "g", extra: ["--synchronizable"])
            try p.a.addGeneric("lock.example", "kept", "k", extra: ["--synchronizable"])
        }) { p in
            let a = p.a, b = p.b
            try #require(SyncPeers.read(b, SyncPeers.file(b, "lock.example", "gone")) == "g")
            let lock = try b.cli(["lock", b.mnt])
            try #require(lock.status == 0, "lock: \(lock.summary)")
            let delete = try b.cli(["delete-generic-password", "-s", "lock.example", "-a", "gone", "--vault", b.vault])
            #expect(delete.status == 0, "a delete on the locked B: \(delete.summary)")
            #expect(p.outbox(b) == 1, "the delete made while locked is not journaled: \(p.status(b) ?? [:])")
            try #require(try SyncPeers.write(a, SyncPeers.file(a, "lock.example", "late"), "l1"))
            #expect(waitUntil(Self.propagation) { p.outbox(a) == 0 }, "A did not upload")
            #expect(
                SyncPeers.read(a, SyncPeers.file(a, "lock.example", "gone")) == "g",
                "the delete left the locked B before its unlock")

            let unlock = try b.cli(["unlock", b.mnt, "--passphrase-file", b.passphraseFile])
            try #require(unlock.status == 0, "unlock: \(unlock.summary)")
            #expect(
                waitUntil(Self.propagation) { SyncPeers.read(b, SyncPeers.file(b, "lock.example", "late")) == "l1" },
                "B did not pull after its unlock: \(p.status(b) ?? [:])")
            #expect(
                waitUntil(Self.propagation) { SyncPeers.read(a, SyncPeers.file(a, "lock.example", "gone")) == nil },
                "the delete made on the locked B did not reach A: B's outbox \(p.outbox(b) ?? -1)")
            #expect(SyncPeers.read(a, SyncPeers.file(a, "lock.example", "kept")) == "k")
        }
    }

    @Test("a server that needs a password: each device reads it from ~/.pgpass, the services' engines too")
    func passwordFromPgpass() throws {
        let password = "pg-" + UUID().uuidString
        try withSyncPeers(
            serverPassword: password,
            setup: { try $0.a.addGeneric("pgpass.example", "ann", "a1", extra: ["--synchronizable"]) }
        ) { p in
            let a = p.a, b = p.b
            #expect(SyncPeers.read(b, SyncPeers.file(b, "pgpass.example", "ann")) == "a1")
            try #require(try SyncPeers.write(a, SyncPeers.file(a, "pgpass.example", "bob"), "b1"))
            #expect(
                waitUntil(Self.propagation) { SyncPeers.read(b, SyncPeers.file(b, "pgpass.example", "bob")) == "b1" },
                "A's change did not reach B through engines that log in with ~/.pgpass: \(p.status(a) ?? [:])")
            for box in [a, b] {
                #expect(!box.daemonLog.contains(password), "the password is in a daemon log")
                let status = try box.cli(["sync", "status", "--vault", box.vault])
                #expect(!status.stdout.contains(password), "the password is in sync status")
            }
        }
    }
}

extension SyncServiceTests {
    @Test(
        "a multi-user server prepared by its administrator (docs/sync-admin.sql): a device role syncs through the CLI and the mounts, and pairs"
    )
    func deviceRoleOnAdministeredServer() throws {
        let password = "alice-" + UUID().uuidString
        try withSyncPeers(
            serverPassword: "su-" + UUID().uuidString, login: ("alice", password),
            prepare: { server in
                try server.psql(SyncServer.adminSQL)
                try server.createRole("alice", password: password, memberOf: ["kcfs_sync_device"])
            },
            setup: { try $0.a.addGeneric("role.example", "ann", "a1", extra: ["--synchronizable"]) }
        ) { p in
            let a = p.a, b = p.b
            #expect(SyncPeers.read(b, SyncPeers.file(b, "role.example", "ann")) == "a1")
            try #require(try SyncPeers.write(a, SyncPeers.file(a, "role.example", "bob"), "b1"))
            #expect(
                waitUntil(Self.propagation) { SyncPeers.read(b, SyncPeers.file(b, "role.example", "bob")) == "b1" },
                "A's change did not reach B as the device role: \(p.status(a) ?? [:]) \(a.daemonLog.suffix(600))")
            let owner = try p.server.psql("SELECT owner FROM kcfs_sync.groups")
            #expect(owner.trimmingCharacters(in: .whitespacesAndNewlines) == "alice", "group owners: \(owner)")

            // B leaves and pairs back in: the rendezvous rows as the device role.
            let leave = try b.cli(["sync", "leave"] + b.unlockArgs)
            try #require(leave.status == 0, "leave: \(leave.summary)")
            let pairing = try Pairing(a)
            let (join, digits) = try Self.join(p, code: pairing.code)
            pairing.type(try #require(digits, "join showed no digits: \(join.stdoutSoFar) \(join.stderrSoFar)"))
            let paired = pairing.process.wait(timeout: 30)
            let joined = join.wait(timeout: 60)
            #expect(paired.status == 0 && joined.status == 0, "pair: \(paired.summary)\njoin: \(joined.summary)")
            try #require(try SyncPeers.write(a, SyncPeers.file(a, "role.example", "cid"), "c1"))
            #expect(
                waitUntil(Self.propagation) { SyncPeers.read(b, SyncPeers.file(b, "role.example", "cid")) == "c1" },
                "after pairing back in, A's change did not reach B's running service")
        }
    }
}

extension SyncServiceTests {
    @Test(
        "sync rotate on A while both are mounted: A's service seals for the new group; B, paired in again, has every change"
    )
    func rotateWhileMounted() throws {
        try withSyncPeers(setup: { try $0.a.addGeneric("rotate.example", "ann", "a1", extra: ["--synchronizable"]) }) {
            p in
            let a = p.a, b = p.b
            #expect(SyncPeers.read(b, SyncPeers.file(b, "rotate.example", "ann")) == "a1")
            let rotate = try a.cli(["sync", "rotate"] + a.unlockArgs, timeout: 60)
            try #require(rotate.status == 0, "rotate: \(rotate.summary)")
            try #require(try SyncPeers.write(a, SyncPeers.file(a, "rotate.example", "bob"), "b1"))
            #expect(waitUntil(Self.propagation) { p.outbox(a) == 0 }, "A's outbox after rotate: \(p.status(a) ?? [:])")

            let leave = try b.cli(["sync", "leave"] + b.unlockArgs)
            try #require(leave.status == 0, "leave: \(leave.summary)")
            let pairing = try Pairing(a)
            let (join, digits) = try Self.join(p, code: pairing.code)
            pairing.type(try #require(digits, "join showed no digits: \(join.stdoutSoFar) \(join.stderrSoFar)"))
            let paired = pairing.process.wait(timeout: 30)
            let joined = join.wait(timeout: 60)
            #expect(paired.status == 0 && joined.status == 0, "pair: \(paired.summary)\njoin: \(joined.summary)")
            #expect(!joined.stderr.contains("refused"), "join: \(joined.summary)")
            #expect(
                waitUntil(Self.propagation) { SyncPeers.read(b, SyncPeers.file(b, "rotate.example", "bob")) == "b1" },
                "what A's service uploaded after the rotation is not on B: \(p.status(b) ?? [:])")
            try #require(try SyncPeers.write(a, SyncPeers.file(a, "rotate.example", "cid"), "c1"))
            #expect(
                waitUntil(Self.propagation) { SyncPeers.read(b, SyncPeers.file(b, "rotate.example", "cid")) == "c1" },
                "A's next change did not reach B in the new group")
            let now = try b.cli(["sync", "now"] + b.unlockArgs, timeout: 60)
            #expect(now.status == 0 && now.stderr.isEmpty, "sync now on B: \(now.summary)")
        }
    }
}
