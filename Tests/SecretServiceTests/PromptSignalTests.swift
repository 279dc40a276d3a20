import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A bus client that listens to every signal it may receive (a match rule for all signals, as a
/// client, not a monitor) for argv[1] seconds, and prints each: path, member, arguments.
private let signalListener = """
    import sys, time
    from jeepney import MatchRule, message_bus
    from jeepney.low_level import HeaderFields
    from jeepney.io.blocking import open_dbus_connection
    conn = open_dbus_connection('SESSION')
    conn.send_and_get_reply(message_bus.AddMatch(MatchRule(type='signal')))
    print('ready', flush=True)
    end = time.time() + float(sys.argv[1])
    while time.time() < end:
        try:
            m = conn.receive(timeout=max(0.05, end - time.time()))
        except TimeoutError:
            break
        f = m.header.fields
        print('signal', f.get(HeaderFields.path), f.get(HeaderFields.member), repr(m.body), flush=True)
    """

/// What a prompt unlocked is told to the client that ran it, and to no other: the items it
/// names may be of an access group the others are not in (issue 30, point 5: an object path
/// must not reach a client that may not see the item).
@Suite("a prompt's Completed and what it unlocked go to its client only", .serialized)
struct PromptSignalTests {
    @Test(
        "an identity prompt unlocks a team item for secret-tool; a listener outside the group hears the collection's signals but never that item's path"
    )
    func completedIsTheClientsOwn() throws {
        let (pinentry, dir) = try scriptedPinentry()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try withSecretService(
            options: ["--pinentry", pinentry.script],
            setup: { box in
                let add = try box.cli(["access-group", "add"] + box.unlockArgs + ["team", "/usr/bin/secret-tool"])
                try #require(add.status == 0, "access-group add: \(add.summary)")
                try box.addGeneric("team-svc", "ivy", "team-secret", extra: ["--access-group", "team"])
            }
        ) { box, bus in
            let search = try box.secretTool(bus.address, ["search", "--all", "service", "team-svc"])
            let path = try #require(itemPaths(search).first, "no item path in \(search.stdout)")
            let listener = try box.spawn(
                "/usr/bin/python3", ["-c", signalListener, "30"], env: box.busEnvironment(bus.address))
            box.onTeardown(beforeUnmount: "listener-\(listener.pid)") {
                listener.kill(SIGTERM)
                _ = listener.wait(timeout: 5)
            }
            try #require(waitUntil(10) { listener.stdoutSoFar.contains("ready") }, "\(listener.stderrSoFar)")

            // secret-tool runs the prompt (Allow): it hears Completed, so it reads the secret.
            try pinentry.answer("allow")
            let allowed = try box.run(
                "/usr/bin/secret-tool", ["search", "--all", "--unlock", "service", "team-svc"],
                env: box.busEnvironment(bus.address).merging(["DISPLAY": ":99"]) { $1 }, timeout: 20)
            #expect(allowed.stdout.contains("secret = team-secret"), "secret-tool (in team): \(allowed.summary)")

            // A signal to every client still reaches the listener: python (not in team) stores
            // an item of `default`.
            let store = try box.python(
                bus.address,
                """
                import secretstorage
                coll = secretstorage.get_default_collection(secretstorage.dbus_init())
                coll.create_item('Open', {'service': 'open-svc', 'username': 'ole'}, b'o')
                """)
            try #require(store.status == 0, "\(store.summary)")
            let heard = waitUntil(5) { listener.stdoutSoFar.contains("ItemCreated") }
            #expect(heard, "the listener heard nothing: \(listener.stdoutSoFar) \(listener.stderrSoFar)")
            #expect(!listener.stdoutSoFar.contains(path), "the team item's path reached the listener")
            #expect(!listener.stdoutSoFar.contains("Completed"), "another client's Completed reached the listener")
        }
    }
}
