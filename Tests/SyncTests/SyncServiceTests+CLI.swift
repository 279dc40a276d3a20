import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension SyncServiceTests {
    /// `keychainfs sync pair` on A in the background, its stdin a FIFO the test writes the
    /// digits into (opened read-write by the shell, so neither side blocks on opening it).
    struct Pairing {
        let process: Spawned
        let fifo: String
        let code: String

        init(_ box: TestSandbox, sourceLocation: SourceLocation = #_sourceLocation) throws {
            let bin = try requireBinary(sourceLocation: sourceLocation)
            fifo = box.root + "/pair-stdin-\(UUID().uuidString.prefix(8))"
            try #require(mkfifo(fifo, 0o600) == 0, "mkfifo: \(errno)", sourceLocation: sourceLocation)
            process = try box.spawn(
                "/bin/sh",
                ["-c", "exec 3<>\"$1\"; shift; exec \"$@\" <&3 3<&-", "sh", fifo, bin, "sync", "pair"]
                    + box.unlockArgs)
            var found: String?
            let process = self.process
            _ = waitUntil(30) {
                found = process.stdoutSoFar.split(separator: "\n").first { $0.hasPrefix("pairing code: ") }.map {
                    String($0.dropFirst("pairing code: ".count))
                }
                return found != nil || !process.isRunning
            }
            code = try #require(
                found, "sync pair printed no code: \(process.stdoutSoFar) \(process.stderrSoFar)",
                sourceLocation: sourceLocation)
        }

        /// Types `digits` and a newline on A.
        func type(_ digits: String) {
            let fd = open(fifo, O_WRONLY | O_NONBLOCK)
            guard fd >= 0 else { return }
            _ = Array((digits + "\n").utf8).withUnsafeBufferPointer { write(fd, $0.baseAddress, $0.count) }
            close(fd)
        }
    }

    /// `sync join URI CODE` on B in the background; the six digits it shows (nil: none within 30 s).
    static func join(_ p: SyncPeers, code: String) throws -> (Spawned, String?) {
        let bin = try requireBinary()
        let join = try p.b.spawn(bin, ["sync", "join"] + p.b.unlockArgs + [p.uri, code])
        let prefix = "type these digits on the other device: "
        var digits: String?
        _ = waitUntil(30) {
            digits = join.stdoutSoFar.split(separator: "\n").first { $0.hasPrefix(prefix) }.map {
                String($0.dropFirst(prefix.count))
            }
            return digits != nil || !join.isRunning
        }
        return (join, digits)
    }

    @Test(
        "sync pair on A and sync join on B: wrong digits refuse both and B stays out; the right digits pair and B has A's items; a code is one-time"
    )
    func pairingThroughTheCLI() throws {
        try withSyncPeers(group: false, mount: false) { p in
            let a = p.a, b = p.b
            try a.addGeneric("pair.example", "ann", "a-secret", extra: ["--synchronizable"])
            try p.setup()

            // Wrong digits typed on A.
            let wrong = try Pairing(a)
            let (refusedJoin, shown) = try Self.join(p, code: wrong.code)
            let sas = try #require(
                shown, "join showed no digits: \(refusedJoin.stdoutSoFar) \(refusedJoin.stderrSoFar)")
            #expect(sas.count == 6 && sas.allSatisfy(\.isNumber), "digits: \(sas)")
            let other = String(sas.dropLast()) + (sas.last == "0" ? "1" : "0")
            wrong.type(other)
            let aRefused = wrong.process.wait(timeout: 30)
            let bRefused = refusedJoin.wait(timeout: 30)
            #expect(aRefused.status != 0 && !aRefused.timedOut, "pair with wrong digits: \(aRefused.summary)")
            #expect(
                bRefused.status != 0 && bRefused.stderr.contains("refused"),
                "join after wrong digits: \(bRefused.summary)")
            #expect(p.status(b)?["group"] is NSNull, "B joined anyway: \(p.status(b) ?? [:])")
            // The code is spent.
            let reuse = try b.cli(["sync", "join"] + b.unlockArgs + [p.uri, wrong.code], timeout: 30)
            #expect(reuse.status != 0 && reuse.stderr.contains("used"), "the code again: \(reuse.summary)")
            #expect(p.status(b)?["group"] is NSNull)

            // The right digits.
            let right = try Pairing(a)
            let (join, digits) = try Self.join(p, code: right.code)
            right.type(try #require(digits, "join showed no digits: \(join.stdoutSoFar) \(join.stderrSoFar)"))
            let paired = right.process.wait(timeout: 30)
            let joined = join.wait(timeout: 60)
            #expect(paired.status == 0, "sync pair: \(paired.summary)")
            #expect(joined.status == 0 && joined.stdout.contains("joined sync group"), "sync join: \(joined.summary)")
            let found = try b.cli(["find-generic-password", "-s", "pair.example", "-a", "ann", "-w"] + b.unlockArgs)
            #expect(found.status == 0 && found.stdout == "a-secret\n", "B after pairing: \(found.summary)")
            #expect(p.status(b)?["group"] as? String == p.status(a)?["group"] as? String)
            // A used code stays used after a successful pairing too.
            let again = try b.cli(["sync", "join"] + b.unlockArgs + [p.uri, right.code], timeout: 30)
            #expect(again.status != 0, "the code a second time: \(again.summary)")
        }
    }

    @Test(
        "sync status (human and JSON), sync leave then no group; sync setup with a password in the URI is refused and writes nothing"
    )
    func statusLeaveAndRefusedSetup() throws {
        try withSyncPeers(group: false, mount: false) { p in
            let a = p.a, b = p.b
            for uri in [
                p.uri + " password=hunter2-secret",
                "postgresql://postgres:hunter2-secret@127.0.0.1:\(p.server.port)/postgres",
            ] {
                let r = try a.cli(["sync", "setup"] + a.unlockArgs + [uri])
                #expect(r.status != 0, "setup with a password: \(r.summary)")
                #expect(r.stderr.contains("password") && r.stderr.contains(".pgpass"), "message: \(r.stderr)")
                #expect(
                    !r.stderr.contains("hunter2") && !r.stdout.contains("hunter2"), "the password echoed: \(r.summary)")
            }
            #expect(p.status(a)?["group"] is NSNull, "a refused setup joined a group")
            let schema = try p.server.psql("SELECT count(*) FROM pg_namespace WHERE nspname = 'kcfs_sync'")
            #expect(schema.trimmingCharacters(in: .whitespacesAndNewlines) == "0", "a refused setup wrote the server")

            let none = try a.cli(["sync", "status", "--vault", a.vault])
            #expect(none.status == 0 && none.stdout == "this vault is in no sync group\n", "\(none.summary)")

            try a.addGeneric("status.example", "sam", "x", extra: ["--synchronizable"])
            try p.setup()
            try p.joinByRecoveryCode()
            let json = try #require(p.status(a), "sync status --json failed")
            let group = try #require(json["group"] as? String)
            #expect(group.count == 32 && group.allSatisfy(\.isHexDigit), "group: \(group)")
            #expect(json["server"] as? String == p.uri)
            #expect(json["outbox"] as? Int == 0 && json["cursor"] is Int, "\(json)")
            #expect(json["lastPush"] is String && json["joined"] is String, "\(json)")
            let human = try a.cli(["sync", "status", "--vault", a.vault])
            #expect(human.status == 0, "\(human.summary)")
            for line in [
                "group: \(group)", "server: \(p.uri)", "outbox: 0 changes not yet uploaded", "conflicts kept: 0",
            ] {
                #expect(human.lines.contains(line), "no line \(line) in: \(human.stdout)")
            }
            #expect(p.status(b)?["group"] as? String == group)

            let leave = try b.cli(["sync", "leave"] + b.unlockArgs)
            #expect(leave.status == 0, "leave: \(leave.summary)")
            let after = try b.cli(["sync", "status", "--vault", b.vault])
            #expect(after.stdout == "this vault is in no sync group\n", "\(after.summary)")
            #expect(p.status(b)?["group"] is NSNull)
            let kept = try b.cli(["find-generic-password", "-s", "status.example", "-a", "sam", "-w"] + b.unlockArgs)
            #expect(kept.stdout == "x\n", "the items stay after leave: \(kept.summary)")
            let leaveAgain = try b.cli(["sync", "leave"] + b.unlockArgs)
            #expect(leaveAgain.status != 0, "leave with no group: \(leaveAgain.summary)")
        }
    }
}
