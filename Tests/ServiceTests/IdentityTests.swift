import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// Issue 27: a caller's identity on the API socket cannot be borrowed. An item is in access
// group `g`, which only the program `allowed` is in; `attacker` is the same client built under
// another path, in no group. Each attack of the issue (peer-client.c) must find nothing, with a
// refusal in the audit log naming the attacker's program; the allowed program itself reads at
// once.
@Suite("a socket caller's identity cannot be borrowed", .serialized)
struct IdentityTests {
    static let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent(
        "peer-client.c"
    ).path

    /// A sandbox with the two builds of the client and an access group `g` of `allowed` only;
    /// `setup` adds what goes in the group and says the mount's options; then the vault is mounted.
    func withGroup(
        setup: (TestSandbox) throws -> [String],
        _ body: (TestSandbox, _ allowed: String, _ attacker: String) throws -> Void
    ) throws {
        try withSandbox { box in
            let allowed = box.w + "/allowed", attacker = box.w + "/attacker"
            for out in [allowed, attacker] {
                let cc = try box.run("/usr/bin/gcc", ["-O1", "-o", out, Self.source], timeout: 60)
                try #require(cc.status == 0, "gcc: \(cc.summary)")
            }
            let add = try box.cli(["access-group", "add"] + box.unlockArgs + ["g", allowed])
            try #require(add.status == 0, "access-group add: \(add.summary)")
            try box.mount(try setup(box))
            try body(box, allowed, attacker)
        }
    }

    /// A mounted sandbox with an item in group `g` and the two builds of the client.
    func withGroupedItem(_ body: (TestSandbox, _ allowed: String, _ attacker: String) throws -> Void) throws {
        try withGroup(
            setup: { box in
                try box.addGeneric("grouped", "acct", "group-secret", extra: ["--access-group", "g"])
                return []
            }, body)
    }

    /// A mounted sandbox whose service hosts the ssh agent (its socket `agent`), with a key pair
    /// in group `g` and the two builds of the client.
    func withGroupedKey(
        _ body: (TestSandbox, _ agent: String, _ allowed: String, _ attacker: String) throws -> Void
    ) throws {
        try withGroup(
            setup: { box in
                let key = try box.cli(
                    ["create-keypair", "-a", "ed25519", "-l", "grouped-key", "--access-group", "g"] + box.unlockArgs)
                try #require(key.status == 0, "create-keypair: \(key.summary)")
                return ["ssh_agent_socket=\(box.root)/agent.sock"]
            }, { box, allowed, attacker in try body(box, box.root + "/agent.sock", allowed, attacker) })
    }

    @Test("the allowed program reads at once; the attacker's own program finds nothing")
    func allowedAndNot() throws {
        try withGroupedItem { box, allowed, attacker in
            let ok = try box.run(allowed, [box.apiSocket, "ask"])
            #expect(ok.stdout == "items 1\n", "allowed: \(ok.summary)")
            let no = try box.run(attacker, [box.apiSocket, "ask"])
            #expect(no.stdout == "status -25300\n", "attacker: \(no.summary)")
        }
    }

    @Test(
        "exec after connect, a descriptor passed by SCM_RIGHTS, and a traced or preloaded allowed program find nothing, refused in the audit log under the attacker's program",
        arguments: ["fork-exec", "pass-fd", "traced", "preload", "borrow-live", "borrow-gone"])
    func borrowedIdentity(mode: String) throws {
        try withGroupedItem { box, allowed, attacker in
            let r: RunResult
            switch mode {
            case "preload":
                r = try box.run(
                    allowed, [box.apiSocket, "ask"], env: ["LD_PRELOAD": "/lib/x86_64-linux-gnu/libc.so.6"])
            default:
                r = try box.run(attacker, [box.apiSocket, mode, allowed])
            }
            #expect(r.stdout == "status -25300\n", "\(mode): \(r.summary)")
            let refusals = box.auditLines(" deny ").filter { $0.contains("op=read") }
            #expect(refusals.count == 1, "\(mode): audit:\n\(box.audit)")
            let line = refusals.first.map(String.init) ?? ""
            if mode == "preload" {
                #expect(line.contains(allowed) && line.contains("LD_PRELOAD"), "\(line)")
            } else if mode == "traced" {
                #expect(line.contains("traced by pid"), "\(line)")
            } else {
                // The attacker's program is named (as the connecting process, or as the sender
                // beside the allowed program it exec'd).
                #expect(line.contains(attacker), "\(line)")
            }
        }
    }

    @Test("a request sent, then exec of the allowed program at once, never wins (200 races)")
    func sendThenExecRace() throws {
        try withGroupedItem { box, allowed, attacker in
            var outcomes: [String: Int] = [:]
            for _ in 0..<200 {
                let r = try box.run(attacker, [box.apiSocket, "race", allowed])
                outcomes[r.stdout, default: 0] += 1
            }
            #expect(outcomes["items 1\n"] == nil, "the race won: \(outcomes)")
            #expect(outcomes["status -25300\n"] == 200, "outcomes: \(outcomes)")
        }
    }

    @Test("a connection whose process exited is not served as the allowed program that took its pid")
    func pidReuse() throws {
        try #require(getuid() == 0, "ns_last_pid needs root")
        try withGroupedItem { box, allowed, attacker in
            let r = try box.run(attacker, [box.apiSocket, "reuse", allowed])
            #expect(r.stdout == "status -25300\n", "reuse: \(r.summary)")
            #expect(box.auditLines(" deny ").contains { $0.contains(attacker) }, "audit:\n\(box.audit)")
        }
    }

    /// The agent protocol has no greeting: a request written, then an exec of the allowed program,
    /// both before the agent's accept, once made the pin read the allowed program. Now the
    /// pinned program must hold its end of the connection close-on-exec, which no descriptor
    /// that survived the exec has (PeerProcess+OwnEnd.swift).
    @Test("ssh agent: a request sent, then exec of the allowed program before the agent accepts, never wins")
    func agentSendThenExec() throws {
        try withGroupedKey { box, agent, allowed, attacker in
            let service = try #require(box.daemonPid, "no service pid")
            defer { kill(service, SIGCONT) }
            // The service stopped until the exec is done: the exec comes before the accept.
            var stopped: [String: Int] = [:]
            for _ in 0..<20 {
                stopped[try box.run(attacker, [agent, "agent-race", allowed, "\(service)"]).stdout, default: 0] += 1
            }
            #expect(stopped == ["keys 0\n": 20], "with the service stopped: \(stopped)")
            // And free races, the service running.
            var free: [String: Int] = [:]
            for _ in 0..<200 { free[try box.run(attacker, [agent, "agent-race", allowed]).stdout, default: 0] += 1 }
            #expect(free["keys 1\n"] == nil && free["keys 0\n", default: 0] > 0, "the race: \(free)")
            #expect(box.daemonLog.contains("close-on-exec") || box.daemonLog.contains("does not hold its end"))
            // The allowed program itself still lists the group's key at once.
            #expect(try box.run(allowed, [agent, "agent-ask"]).stdout == "keys 1\n")
        }
    }

    @Test(
        "ssh agent hosted by the service: the allowed program lists the group's key; exec after connect, a passed descriptor and a preloaded allowed program list none",
        arguments: ["agent-ask", "agent-fork-exec", "agent-pass-fd", "agent-preload"])
    func agent(mode: String) throws {
        try withGroupedKey { box, agent, allowed, attacker in
            let r: RunResult
            switch mode {
            case "agent-ask": r = try box.run(allowed, [agent, "agent-ask"])
            case "agent-preload":
                r = try box.run(allowed, [agent, "agent-ask"], env: ["LD_PRELOAD": "/lib/x86_64-linux-gnu/libc.so.6"])
            default: r = try box.run(attacker, [agent, mode, allowed])
            }
            #expect(r.stdout == (mode == "agent-ask" ? "keys 1\n" : "keys 0\n"), "\(mode): \(r.summary)")
            if mode != "agent-ask" {
                #expect(box.daemonLog.contains("default group only"), "the daemon log says why:\n\(box.daemonLog)")
            }
        }
    }
}
