import Foundation
import Testing

// SearchItems through the core's attribute index, driven by secret-tool on a private bus: a
// custom attribute among many items, items made through the CLI found by the attributes a
// client sees for them, and items added by another process while the provider runs.

@Suite("secret service search by attribute index", .serialized)
struct AttributeIndexSearchTests {
    @Test(
        "secret-tool search finds exactly the items with a custom attribute, and CLI items by their mapped attributes")
    func searchByCustomAttribute() throws {
        try withSecretService(setup: { box in
            for n in 0..<12 { try box.addGeneric("cli-svc-\(n % 4)", "user\(n)", "cli-secret-\(n)") }
            let inet = try box.cli(
                ["add-internet-password"] + box.unlockArgs + ["-s", "git.example.com", "-r", "https", "-a", "carol"],
                stdin: Array("git-secret".utf8))
            try #require(inet.status == 0, "add-internet-password: \(inet.summary)")
        }) { box, bus in
            for n in 0..<16 {
                let store = try box.secretTool(
                    bus.address,
                    [
                        "store", "--label=Item \(n)", "xdg:schema", "org.example.Index", "serial", "\(n)",
                        "tier", n % 5 == 0 ? "gold" : "silver",
                    ], stdin: Array("ss-secret-\(n)".utf8))
                try #require(store.status == 0, "secret-tool store: \(store.summary)")
            }
            let gold = try box.secretTool(bus.address, ["search", "--all", "tier", "gold"])
            #expect(gold.status == 0, "search: \(gold.summary)")
            #expect(itemPaths(gold).count == 4, "serials 0, 5, 10, 15: \(gold.stdout)")
            for n in [0, 5, 10, 15] { #expect(gold.stdout.contains("secret = ss-secret-\(n)\n")) }
            #expect(!gold.stdout.contains("secret = ss-secret-1\n"))

            let one = try box.secretTool(bus.address, ["search", "--all", "tier", "gold", "serial", "10"])
            #expect(itemPaths(one).count == 1 && one.stdout.contains("secret = ss-secret-10"), "\(one.stdout)")
            let none = try box.secretTool(bus.address, ["search", "--all", "tier", "platinum"])
            #expect(itemPaths(none).isEmpty, "\(none.summary)")

            // CLI items: genp as service/username, inet under the network schema's names.
            let cli = try box.secretTool(bus.address, ["search", "--all", "username", "user7"])
            #expect(itemPaths(cli).count == 1 && cli.stdout.contains("secret = cli-secret-7"), "\(cli.summary)")
            let byService = try box.secretTool(bus.address, ["search", "--all", "service", "cli-svc-1"])
            #expect(itemPaths(byService).count == 3, "users 1, 5, 9: \(byService.stdout)")
            let web = try box.secretTool(
                bus.address, ["search", "--all", "server", "git.example.com", "protocol", "https", "user", "carol"])
            #expect(itemPaths(web).count == 1 && web.stdout.contains("secret = git-secret"), "\(web.summary)")

            // An item the CLI adds while the provider runs is found at once (same file, same index).
            try box.addGeneric("late-svc", "lena", "late-secret")
            let late = try box.secretTool(bus.address, ["search", "--all", "username", "lena"])
            #expect(itemPaths(late).count == 1 && late.stdout.contains("secret = late-secret"), "\(late.summary)")
            let deleted = try box.cli(["delete-generic-password"] + box.unlockArgs + ["-s", "late-svc", "-a", "lena"])
            #expect(deleted.status == 0, "\(deleted.summary)")
            let gone = try box.secretTool(bus.address, ["search", "--all", "username", "lena"])
            #expect(itemPaths(gone).isEmpty, "\(gone.summary)")
        }
    }

    @Test("items made and renamed through the mount are found by their mapped attributes, at once")
    func mountMadeAndRenamed() throws {
        try withSecretService(setup: { box in
            try box.addGeneric("mnt-svc", "old-name", "mount-secret")
        }) { box, bus in
            try box.mount()
            let g = box.mnt + "/genp"
            // Made through the mount (a new file is a new item).
            #expect(
                try box.sh("mkdir \(q(g + "/made-svc")) && printf made-secret > \(q(g + "/made-svc/maker"))").status
                    == 0)
            let made = try box.secretTool(bus.address, ["search", "--all", "service", "made-svc", "username", "maker"])
            #expect(itemPaths(made).count == 1 && made.stdout.contains("secret = made-secret"), "\(made.summary)")
            // mv within a service changes the account a client sees; mv of the directory the service.
            #expect(try box.sh("mv \(q(g + "/mnt-svc/old-name")) \(q(g + "/mnt-svc/new-name"))").status == 0)
            let renamed = try box.secretTool(bus.address, ["search", "--all", "username", "new-name"])
            #expect(
                itemPaths(renamed).count == 1 && renamed.stdout.contains("secret = mount-secret"), "\(renamed.summary)")
            #expect(itemPaths(try box.secretTool(bus.address, ["search", "--all", "username", "old-name"])).isEmpty)
            #expect(try box.sh("mv \(q(g + "/mnt-svc")) \(q(g + "/moved-svc"))").status == 0)
            let moved = try box.secretTool(
                bus.address, ["search", "--all", "service", "moved-svc", "username", "new-name"])
            #expect(itemPaths(moved).count == 1, "\(moved.summary)")
            #expect(itemPaths(try box.secretTool(bus.address, ["search", "--all", "service", "mnt-svc"])).isEmpty)
        }
    }

    @Test("an item holding NUL (set through the mount) is left out of searches; by its path it is an error, never cut")
    func nulAttribute() throws {
        try withSecretService(setup: { box in
            try box.addGeneric("nul-svc", "plain", "nul-secret")
            try box.addGeneric("nul-svc", "fine", "fine-secret")
        }) { box, bus in
            try box.mount()
            let set = try box.pyResults(
                "t('set', os.setxattr, sys.argv[1], 'user.keychain.account', b'cut\\x00tail')",
                [box.mnt + "/genp/nul-svc/plain"])
            #expect(set["set"] == "OK", "\(set)")
            // D-Bus strings cannot hold NUL: searches leave the item out (so one such item does not
            // fail a client's whole search), and asked for by its path it answers an error rather
            // than reaching a client as the username "cut".
            let r = try box.python(
                bus.address,
                """
                import secretstorage
                conn = secretstorage.dbus_init()
                coll = secretstorage.get_default_collection(conn)
                items = list(coll.search_items({'service': 'nul-svc'}))
                print('found', sorted(i.get_attributes()['username'] for i in items))
                item = secretstorage.Item(conn, '/org/freedesktop/secrets/collection/login/genp1')
                try:
                    print('attrs', sorted(item.get_attributes().items()))
                except Exception as e:
                    print('error', type(e).__name__, e)
                """)
            let out = labelled(r)
            #expect(out["found"] == "['fine']", "\(r.summary)")
            #expect(out["attrs"] == nil, "a client saw the attributes: \(r.summary)")
            #expect(out["error"]?.contains("holds NUL") == true, "\(r.summary)")
            let tool = try box.secretTool(bus.address, ["search", "--all", "service", "nul-svc"])
            #expect(tool.status == 0 && tool.stdout.contains("secret = fine-secret"), "\(tool.summary)")
            let log = bus.provider.stderrSoFar
            #expect(log.contains("secret service leaves out"), "\(log.suffix(400))")
        }
    }
}
