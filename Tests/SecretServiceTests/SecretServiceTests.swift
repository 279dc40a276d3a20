import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// Issue 12: the Secret Service provider driven by the clients users have — libsecret's
// secret-tool, python secretstorage and keyring — on a private dbus-daemon the test starts.

@Suite("secret service provider", .serialized)
struct SecretServiceTests {
    @Test("secret-tool store, lookup, search and clear round trip; the item is a genp item the CLI finds")
    func secretToolRoundTrip() throws {
        try withSecretService { box, bus in
            let store = try box.secretTool(
                bus.address,
                ["store", "--label=Mail password", "service", "mail.example", "username", "alice", "extra", "x1"],
                stdin: Array("s3cret-mail".utf8))
            #expect(store.status == 0, "secret-tool store: \(store.summary)")

            let lookup = try box.secretTool(bus.address, ["lookup", "service", "mail.example", "username", "alice"])
            #expect(lookup.status == 0 && lookup.stdout == "s3cret-mail", "secret-tool lookup: \(lookup.summary)")
            // An attribute kept only in the map matches too; a wrong value does not.
            let byExtra = try box.secretTool(bus.address, ["lookup", "extra", "x1"])
            #expect(byExtra.stdout == "s3cret-mail", "lookup by a kept attribute: \(byExtra.summary)")
            let wrong = try box.secretTool(bus.address, ["lookup", "extra", "x2"])
            #expect(wrong.status != 0 && wrong.stdout.isEmpty, "lookup with a wrong value: \(wrong.summary)")

            let search = try box.secretTool(bus.address, ["search", "--all", "service", "mail.example"])
            #expect(search.status == 0, "secret-tool search: \(search.summary)")
            #expect(search.stdout.contains("label = Mail password"), "search output: \(search.stdout)")
            // secret-tool prints the attributes on stderr.
            #expect(search.stderr.contains("attribute.extra = x1"), "search output: \(search.summary)")
            #expect(search.stdout.contains("secret = s3cret-mail"), "search output: \(search.stdout)")
            #expect(itemPaths(search).count == 1 && itemPaths(search)[0].contains("/collection/login/genp"))

            // The CLI sees a generic password with service and account from the attributes.
            let find = try box.cli(
                ["find-generic-password"] + box.unlockArgs + ["-s", "mail.example", "-a", "alice", "-w"])
            #expect(find.status == 0 && find.stdout == "s3cret-mail\n", "find-generic-password: \(find.summary)")

            // store again (libsecret replaces): one item, the new secret.
            let again = try box.secretTool(
                bus.address,
                ["store", "--label=Mail password", "service", "mail.example", "username", "alice", "extra", "x1"],
                stdin: Array("new-secret".utf8))
            #expect(again.status == 0, "second store: \(again.summary)")
            let after = try box.secretTool(bus.address, ["search", "--all", "service", "mail.example"])
            #expect(itemPaths(after).count == 1, "store replaced, not added: \(after.stdout)")
            #expect(try box.secretTool(bus.address, ["lookup", "service", "mail.example"]).stdout == "new-secret")

            let clear = try box.secretTool(bus.address, ["clear", "service", "mail.example", "username", "alice"])
            #expect(clear.status == 0, "secret-tool clear: \(clear.summary)")
            let gone = try box.secretTool(bus.address, ["lookup", "service", "mail.example"])
            #expect(gone.status != 0 && gone.stdout.isEmpty, "lookup after clear: \(gone.summary)")
            let findGone = try box.cli(["find-generic-password"] + box.unlockArgs + ["-s", "mail.example"])
            #expect(findGone.status == 44, "the CLI after clear: \(findGone.summary)")

            // Every access is audited, never with the secret.
            let audit = box.audit
            for op in ["dbus-create", "dbus-search", "dbus-get-secret", "dbus-delete"] {
                #expect(audit.contains("op=\(op) allow"), "no \(op) line in the audit log:\n\(audit)")
            }
            #expect(audit.contains("/usr/bin/secret-tool"), "the audit log does not name secret-tool:\n\(audit)")
            #expect(!audit.contains("s3cret-mail") && !audit.contains("new-secret"))
        }
    }

    @Test("items made through the CLI answer secret-tool: genp by service/username, inet by server/user/protocol")
    func cliItemsVisible() throws {
        try withSecretService(setup: { box in
            try box.addGeneric("cli-svc", "bob", "cli-secret")
            let inet = try box.cli(
                ["add-internet-password"] + box.unlockArgs + ["-s", "git.example.com", "-r", "https", "-a", "carol"],
                stdin: Array("git-secret".utf8))
            try #require(inet.status == 0, "add-internet-password: \(inet.summary)")
        }) { box, bus in
            let genp = try box.secretTool(bus.address, ["lookup", "service", "cli-svc", "username", "bob"])
            #expect(genp.status == 0 && genp.stdout == "cli-secret", "lookup of a CLI genp item: \(genp.summary)")
            let inet = try box.secretTool(
                bus.address, ["lookup", "server", "git.example.com", "user", "carol", "protocol", "https"])
            #expect(inet.status == 0 && inet.stdout == "git-secret", "lookup of a CLI inet item: \(inet.summary)")
            let search = try box.secretTool(bus.address, ["search", "--all", "server", "git.example.com"])
            #expect(search.stdout.contains("schema = org.gnome.keyring.NetworkPassword"), "\(search.summary)")
            #expect(search.stderr.contains("attribute.server = git.example.com"), "\(search.summary)")
        }
    }

    @Test("a network-password schema makes an inet item: git's helper and the CLI find it")
    func networkSchemaIsInternetPassword() throws {
        try withSecretService { box, bus in
            let store = try box.secretTool(
                bus.address,
                [
                    "store", "--label=Git: https://git.example.org/", "xdg:schema", "org.gnome.keyring.NetworkPassword",
                    "server", "git.example.org", "protocol", "https", "user", "dora", "port", "8443",
                ], stdin: Array("dora-pw".utf8))
            #expect(store.status == 0, "secret-tool store: \(store.summary)")
            let find = try box.cli(
                ["find-internet-password"] + box.unlockArgs + [
                    "-s", "git.example.org", "-a", "dora", "-P", "8443", "-w",
                ])
            #expect(find.status == 0 && find.stdout == "dora-pw\n", "find-internet-password: \(find.summary)")
            let search = try box.secretTool(bus.address, ["search", "--all", "user", "dora"])
            #expect(itemPaths(search).first?.contains("/collection/login/inet") == true, "\(search.stdout)")
        }
    }

    @Test("docker-credential-secretservice: store, get, list, erase; the item is an inet item the CLI finds")
    func dockerCredentialSecretService() throws {
        try withSecretService { box, bus in
            let helper = "/usr/bin/docker-credential-secretservice"
            try #require(
                FileManager.default.isExecutableFile(atPath: helper), "install golang-docker-credential-helpers")
            let url = "https://registry.example.com:5000/v1/"
            let store = try box.run(
                helper, ["store"],
                stdin: Array(#"{"ServerURL":"\#(url)","Username":"lee","Secret":"dock-secret"}"#.utf8),
                env: box.busEnvironment(bus.address), timeout: 20)
            #expect(store.status == 0, "store: \(store.summary)")
            let get = try box.run(
                helper, ["get"], stdin: Array(url.utf8), env: box.busEnvironment(bus.address), timeout: 20)
            #expect(
                get.status == 0 && get.stdout.contains(#""Username":"lee","Secret":"dock-secret""#),
                "get: \(get.summary)")
            let list = try box.run(helper, ["list"], env: box.busEnvironment(bus.address), timeout: 20)
            #expect(list.stdout.contains(#""\#(url)":"lee""#), "list: \(list.summary)")
            let find = try box.cli(
                ["find-internet-password"] + box.unlockArgs + [
                    "-s", "registry.example.com", "-P", "5000", "-r", "https", "-a", "lee", "-w",
                ])
            #expect(find.status == 0 && find.stdout == "dock-secret\n", "find-internet-password: \(find.summary)")
            let erase = try box.run(
                helper, ["erase"], stdin: Array(url.utf8), env: box.busEnvironment(bus.address), timeout: 20)
            #expect(erase.status == 0, "erase: \(erase.summary)")
            let gone = try box.cli(["find-internet-password"] + box.unlockArgs + ["-s", "registry.example.com"])
            #expect(gone.status == 44, "after erase: \(gone.summary)")
        }
    }

    @Test("python secretstorage: create, search, attributes, label, secret, content type, delete")
    func secretStorageRoundTrip() throws {
        try withSecretService { box, bus in
            let r = try box.python(
                bus.address,
                """
                import secretstorage
                conn = secretstorage.dbus_init()
                coll = secretstorage.get_default_collection(conn)
                print('collection', coll.collection_path, coll.get_label(), coll.is_locked())
                item = coll.create_item('Py item', {'service': 'py-svc', 'username': 'eve', 'kind': 'token'},
                                        b'py-secret\\x00\\xff', content_type='application/octet-stream', replace=True)
                found = list(coll.search_items({'kind': 'token'}))
                print('found', len(found), found[0].item_path == item.item_path)
                it = found[0]
                print('label', it.get_label())
                print('attrs', sorted(it.get_attributes().items()))
                print('secret', it.get_secret().hex(), it.get_secret_content_type())
                it.set_label('Renamed')
                it.set_attributes({'service': 'py-svc', 'username': 'eve', 'kind': 'token2'})
                it.set_secret(b'second')
                print('after', it.get_label(), it.get_attributes()['kind'], it.get_secret().decode())
                print('old-kind', len(list(coll.search_items({'kind': 'token'}))))
                it.delete()
                print('deleted', len(list(coll.search_items({'service': 'py-svc'}))))
                """)
            #expect(r.status == 0, "python: \(r.summary)")
            let out = labelled(r)
            #expect(out["collection"] == "/org/freedesktop/secrets/aliases/default Login False", "\(r.stdout)")
            #expect(out["found"] == "1 True")
            #expect(out["label"] == "Py item")
            #expect(out["attrs"] == "[('kind', 'token'), ('service', 'py-svc'), ('username', 'eve')]")
            #expect(out["secret"] == "70792d73656372657400ff application/octet-stream")
            #expect(out["after"] == "Renamed token2 second")
            #expect(out["old-kind"] == "0")
            #expect(out["deleted"] == "0")
            #expect(box.audit.contains("op=dbus-set-property allow") && box.audit.contains("op=dbus-set-secret allow"))
        }
    }

    @Test("python keyring: set, get and delete a password through the Secret Service backend")
    func keyringRoundTrip() throws {
        try withSecretService { box, bus in
            let r = try box.python(
                bus.address,
                """
                import keyring
                print('backend', type(keyring.get_keyring()).__module__)
                keyring.set_password('kr-svc', 'frank', 'kr-secret')
                print('get', keyring.get_password('kr-svc', 'frank'))
                keyring.set_password('kr-svc', 'frank', 'kr-secret-2')
                print('again', keyring.get_password('kr-svc', 'frank'))
                keyring.delete_password('kr-svc', 'frank')
                print('deleted', keyring.get_password('kr-svc', 'frank'))
                """)
            #expect(r.status == 0, "python keyring: \(r.summary)")
            let out = labelled(r)
            #expect(out["backend"] == "keyring.backends.SecretService", "\(r.stdout)")
            #expect(out["get"] == "kr-secret")
            #expect(out["again"] == "kr-secret-2")
            #expect(out["deleted"] == "None")
        }
    }

    @Test("secret-tool store, then cat of the item through a mount of the same vault")
    func storeThenCatThroughMount() throws {
        try withSecretService { box, bus in
            try box.mount()
            let store = try box.secretTool(
                bus.address, ["store", "--label=Through the mount", "service", "mnt-svc", "username", "gina"],
                stdin: Array("mount-secret".utf8))
            #expect(store.status == 0, "secret-tool store: \(store.summary)")
            let cat = try box.run("/usr/bin/cat", [box.mnt + "/genp/mnt-svc/gina"], timeout: 15)
            #expect(cat.status == 0 && cat.stdout == "mount-secret", "cat through the mount: \(cat.summary)")
            // And the reverse: a file written through the mount answers secret-tool.
            let write = try box.sh(
                "mkdir -p \(q(box.mnt + "/genp/from-mount")) && printf %s fs-secret > \(q(box.mnt + "/genp/from-mount/hal"))"
            )
            #expect(write.status == 0, "write through the mount: \(write.summary)")
            let lookup = try box.secretTool(bus.address, ["lookup", "service", "from-mount", "username", "hal"])
            #expect(lookup.stdout == "fs-secret", "secret-tool on a mount-made item: \(lookup.summary)")
        }
    }
}
