import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// Issue 27, point 2: on a bus that names a client by pid only (dbus-daemon 1.14 gives no
// ProcessFD), a process that connects and then lets its pid run an allowed program does not
// borrow that program's access groups: the group's items stay Locked until a prompt naming the
// pid and executable is answered, which here nobody does.

@Suite("secret service: a pid is not a process", .serialized)
struct BusIdentityTests {
    @Test(
        "exec after connect: a connection whose pid now runs an allowed program gets the group's item Locked, its secret IsLocked"
    )
    func execAfterConnectIsRefused() throws {
        try withSecretService(setup: { box in
            let add = try box.cli(["access-group", "add"] + box.unlockArgs + ["sleepers", "/usr/bin/sleep"])
            try #require(add.status == 0, "access-group add: \(add.summary)")
            try box.addGeneric("sleep-svc", "zed", "sleepers-secret", extra: ["--access-group", "sleepers"])
        }) { box, bus in
            // The parent connects, forks, and execs /usr/bin/sleep (the allowed program) under the
            // pid the bus knows; the child goes on using the connection.
            let r = try box.python(
                bus.address,
                """
                import os, sys, time
                from jeepney import DBusAddress, new_method_call, MessageType
                from jeepney.io.blocking import open_dbus_connection
                conn = open_dbus_connection(bus='SESSION')
                if os.fork() != 0:
                    os.execv('/usr/bin/sleep', ['sleep', '4'])
                time.sleep(1)
                def call(path, iface, method, sig, body):
                    reply = conn.send_and_get_reply(new_method_call(
                        DBusAddress(path, 'org.freedesktop.secrets', iface), method, sig, body), unwrap=False)
                    if reply.header.message_type == MessageType.error:
                        return ('error', reply.header.fields.get(4))
                    return ('ok', reply.body)
                svc = '/org/freedesktop/secrets'
                service = 'org.freedesktop.Secret.Service'
                session = call(svc, service, 'OpenSession', 'sv', ('plain', ('s', '')))[1][1]
                unlocked, locked = call(svc, service, 'SearchItems', 'a{ss}', ({'service': 'sleep-svc'},))[1]
                print('unlocked', len(unlocked), 'locked', len(locked), flush=True)
                path = (unlocked + locked)[0]
                got = call(svc, service, 'GetSecrets', 'aoo', ([path], session))
                print('secrets', got[1] if got[0] == 'error' else len(got[1][0]), flush=True)
                one = call(path, 'org.freedesktop.Secret.Item', 'GetSecret', 'o', (session,))
                print('secret', one[1] if one[0] == 'error' else bytes(one[1][0][2]).decode(), flush=True)
                os._exit(0)
                """)
            #expect(r.status == 0, "python: \(r.summary)")
            #expect(
                waitUntil(10) { labelled(r)["secret"] != nil } || labelled(r)["secret"] != nil,
                "the child said nothing: \(r.summary)")
            let out = labelled(r)
            #expect(out["unlocked"] == "0 locked 1", "the item is listed, Locked: \(r.stdout)")
            #expect(out["secrets"] == "org.freedesktop.Secret.Error.IsLocked", "\(r.stdout)")
            #expect(out["secret"] == "org.freedesktop.Secret.Error.IsLocked", "\(r.stdout)")
            #expect(!r.stdout.contains("sleepers-secret"))
            #expect(
                box.audit.contains("identity not confirmed"), "the refusal is audited: \(box.audit.suffix(800))")
        }
    }

    @Test("opted out (--trust-pid): the allowed program reads its group's item on its pid alone, with no prompt")
    func trustPidOptOut() throws {
        try withSecretService(
            options: ["--trust-pid"],
            setup: { box in
                let add = try box.cli(["access-group", "add"] + box.unlockArgs + ["team", "/usr/bin/secret-tool"])
                try #require(add.status == 0, "access-group add: \(add.summary)")
                try box.addGeneric("trusted-svc", "ivy", "trusted-secret", extra: ["--access-group", "team"])
            }
        ) { box, bus in
            let lookup = try box.secretTool(bus.address, ["lookup", "service", "trusted-svc"])
            #expect(lookup.stdout == "trusted-secret", "\(lookup.summary)")
            #expect(!box.audit.contains("identity not confirmed"), "\(box.audit.suffix(800))")
            // Issue 27, point 3: the same program started with LD_LIBRARY_PATH (code it did not
            // choose) is in no group, trusted pid or not; the audit says why.
            let injected = try box.run(
                "/usr/bin/secret-tool", ["lookup", "service", "trusted-svc"],
                env: box.busEnvironment(bus.address).merging(["LD_LIBRARY_PATH": box.root]) { $1 }, timeout: 20)
            #expect(injected.stdout.isEmpty, "served to an injected secret-tool: \(injected.summary)")
            #expect(box.audit.contains("started with LD_LIBRARY_PATH"), "\(box.audit.suffix(800))")
        }
    }
}
