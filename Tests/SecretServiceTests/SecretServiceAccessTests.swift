import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// The provider's access control, lock state, sessions, bad calls and start-up errors, driven by
// real clients on a private dbus-daemon the test starts (split from SecretServiceTests.swift).

@Suite("secret service provider: access, locking, sessions, errors", .serialized)
struct SecretServiceAccessTests {
    @Test(
        "an app outside an access group finds nothing of that group and cannot read it by path; an app in it reads only after a prompt naming its pid and executable (the bus gives no process handle); audited"
    )
    func accessGroupDenied() throws {
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
            // secret-tool is in group team: it finds the item, Locked until a prompt confirms
            // its pid and executable (dbus-daemon 1.14 gives a pid, no process handle).
            let search = try box.secretTool(bus.address, ["search", "--all", "service", "team-svc"])
            #expect(!search.stdout.contains("team-secret"), "served without a prompt: \(search.summary)")
            let path = try #require(itemPaths(search).first, "no item path in \(search.stdout)")
            let lookup = try box.secretTool(bus.address, ["lookup", "service", "team-svc"])
            #expect(lookup.stdout.isEmpty, "served without a prompt: \(lookup.summary)")
            // Denied at the prompt: still nothing. Allowed: read.
            try pinentry.answer("deny")
            let denied = try box.run(
                "/usr/bin/secret-tool", ["search", "--all", "--unlock", "service", "team-svc"],
                env: box.busEnvironment(bus.address).merging(["DISPLAY": ":99"]) { $1 }, timeout: 20)
            #expect(!denied.stdout.contains("team-secret"), "served after a denial: \(denied.summary)")
            try pinentry.answer("allow")
            let allowed = try box.run(
                "/usr/bin/secret-tool", ["search", "--all", "--unlock", "service", "team-svc"],
                env: box.busEnvironment(bus.address).merging(["DISPLAY": ":99"]) { $1 }, timeout: 20)
            #expect(allowed.stdout.contains("secret = team-secret"), "secret-tool (in team): \(allowed.summary)")
            #expect(
                pinentry.prompts.last.map { $0.contains("pid ") && $0.contains("/usr/bin/secret-tool") } == true,
                "the prompt names the pid and executable: \(pinentry.prompts)")
            #expect(box.audit.contains("identity confirmed"), "\(box.audit.suffix(800))")
            // The confirmation was that client's: the next secret-tool (a new client) is asked again.
            let asked = pinentry.prompts.count
            try pinentry.answer("deny")
            let next = try box.run(
                "/usr/bin/secret-tool", ["lookup", "service", "team-svc"],
                env: box.busEnvironment(bus.address).merging(["DISPLAY": ":99"]) { $1 }, timeout: 20)
            #expect(next.stdout.isEmpty, "a confirmation carried over to another client: \(next.summary)")
            #expect(pinentry.prompts.count == asked + 1, "\(pinentry.prompts)")
            // python is not: the search is empty and the path answers NoSuchObject.
            let r = try box.python(
                bus.address,
                """
                import sys, secretstorage
                from secretstorage.exceptions import ItemNotFoundException
                conn = secretstorage.dbus_init()
                coll = secretstorage.get_default_collection(conn)
                print('search', len(list(coll.search_items({'service': 'team-svc'}))))
                try:
                    print('read', secretstorage.Item(conn, sys.argv[1]).get_secret())
                except ItemNotFoundException:
                    print('read', 'not-found')
                except Exception as e:
                    print('read', type(e).__name__, e)
                """, [path])
            #expect(r.status == 0, "python: \(r.summary)")
            #expect(labelled(r)["search"] == "0", "python (not in team) searched: \(r.stdout)")
            #expect(labelled(r)["read"] == "not-found", "python (not in team) read by path: \(r.stdout)")
            #expect(!r.stdout.contains("team-secret"))
            let audit = box.audit.split(separator: "\n")
            #expect(
                audit.contains { $0.contains("op=dbus-lookup deny") && $0.contains("python3") },
                "no deny line for python:\n\(box.audit)")
            #expect(audit.contains { $0.contains("op=dbus-get-secret allow") && $0.contains("/usr/bin/secret-tool") })
        }
    }

    @Test("a locked vault: the collection and items say Locked, search still lists them, secrets answer IsLocked")
    func lockedVault() throws {
        try withSecretService { box, bus in
            let store = try box.secretTool(
                bus.address, ["store", "--label=L", "service", "lock-svc", "username", "jo"], stdin: Array("lk".utf8))
            #expect(store.status == 0, "secret-tool store: \(store.summary)")
            let r = try box.python(
                bus.address,
                """
                import secretstorage
                from jeepney import DBusAddress, new_method_call
                conn = secretstorage.dbus_init()
                coll = secretstorage.get_default_collection(conn)
                coll.lock()
                print('locked', coll.is_locked())
                found = list(coll.search_items({'service': 'lock-svc'}))
                print('found', len(found), found[0].is_locked())
                service = DBusAddress('/org/freedesktop/secrets', 'org.freedesktop.secrets', 'org.freedesktop.Secret.Service')
                unlocked, locked = conn.send_and_get_reply(new_method_call(service, 'SearchItems', 'a{ss}', ({'service': 'lock-svc'},))).body
                print('lists', len(unlocked), len(locked))
                session = secretstorage.util.open_session(conn)
                item = DBusAddress(found[0].item_path, 'org.freedesktop.secrets', 'org.freedesktop.Secret.Item')
                reply = conn.send_and_get_reply(new_method_call(item, 'GetSecret', 'o', (session.object_path,)), unwrap=False)
                print('get', reply.header.fields.get(4))
                coll.unlock()
                print('unlocked', coll.is_locked(), found[0].get_secret().decode())
                """)
            #expect(r.status == 0, "python: \(r.summary)")
            let out = labelled(r)
            #expect(out["locked"] == "True", "\(r.stdout)")
            #expect(out["found"] == "1 True", "a locked vault must not answer an empty search: \(r.stdout)")
            #expect(out["lists"] == "0 1")
            #expect(out["get"] == "org.freedesktop.Secret.Error.IsLocked")
            #expect(out["unlocked"] == "False lk")
        }
    }

    @Test(
        "sessions: plain sends the secret as is, dh-ietf1024 sends it AES-CBC under a fresh IV; bad peer values, other clients' sessions and unknown algorithms refused"
    )
    func sessionAlgorithms() throws {
        try withSecretService { box, bus in
            let store = try box.secretTool(
                bus.address, ["store", "--label=S", "service", "sess", "username", "kim"],
                stdin: Array("dh-secret".utf8))
            #expect(store.status == 0, "secret-tool store: \(store.summary)")
            let r = try box.python(
                bus.address,
                """
                import secretstorage
                from secretstorage.dhcrypto import Session
                from jeepney import DBusAddress, new_method_call, MessageType
                from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
                from cryptography.hazmat.primitives import padding
                conn = secretstorage.dbus_init()
                service = DBusAddress('/org/freedesktop/secrets', 'org.freedesktop.secrets', 'org.freedesktop.Secret.Service')
                def call(addr, method, sig, body):
                    reply = conn.send_and_get_reply(new_method_call(addr, method, sig, body), unwrap=False)
                    if reply.header.message_type == MessageType.error:
                        return 'error', reply.header.fields.get(4)
                    return 'ok', reply.body
                (unlocked, locked) = call(service, 'SearchItems', 'a{ss}', ({'service': 'sess'},))[1]
                item = DBusAddress(unlocked[0], 'org.freedesktop.secrets', 'org.freedesktop.Secret.Item')
                _, (out, plain) = call(service, 'OpenSession', 'sv', ('plain', ('s', '')))
                _, ((path, params, value, ctype),) = call(item, 'GetSecret', 'o', (plain,))
                print('plain', len(params), bytes(value).decode(), ctype)
                ours = Session()
                _, (out, dh) = call(service, 'OpenSession', 'sv', ('dh-ietf1024-sha256-aes128-cbc-pkcs7', ('ay', ours.my_public_key.to_bytes(128, 'big'))))
                ours.set_server_public_key(int.from_bytes(bytes(out[1]), 'big'))
                _, ((path, iv, value, ctype),) = call(item, 'GetSecret', 'o', (dh,))
                dec = Cipher(algorithms.AES(ours.aes_key), modes.CBC(bytes(iv))).decryptor()
                unpad = padding.PKCS7(128).unpadder()
                clear = unpad.update(dec.update(bytes(value)) + dec.finalize()) + unpad.finalize()
                print('dh', len(bytes(out[1])), len(bytes(iv)), b'dh-secret' not in bytes(value), clear.decode())
                _, ((path, iv2, value2, ctype),) = call(item, 'GetSecret', 'o', (dh,))
                print('fresh-iv', bytes(iv2) != bytes(iv))
                p = int('FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A08798E3404DDEF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7EDEE386BFB5A899FA5AE9F24117C4B1FE649286651ECE65381FFFFFFFFFFFFFFFF', 16)
                for name, y in [('one', 1), ('p-1', p - 1), ('p', p)]:
                    print('peer-' + name, call(service, 'OpenSession', 'sv', ('dh-ietf1024-sha256-aes128-cbc-pkcs7', ('ay', y.to_bytes(128, 'big'))))[1])
                print('unknown', call(service, 'OpenSession', 'sv', ('rot13', ('s', '')))[1])
                other = secretstorage.dbus_init()
                reply = other.send_and_get_reply(new_method_call(item, 'GetSecret', 'o', (dh,)), unwrap=False)
                print('other-client', reply.header.fields.get(4))
                """)
            #expect(r.status == 0, "python: \(r.summary)")
            let out = labelled(r)
            #expect(out["plain"] == "0 dh-secret text/plain", "\(r.stdout)")
            #expect(out["dh"] == "128 16 True dh-secret", "\(r.stdout)")
            #expect(out["fresh-iv"] == "True")
            for name in ["one", "p-1", "p"] {
                #expect(out["peer-\(name)"] == "org.freedesktop.DBus.Error.InvalidArgs", "peer \(name): \(r.stdout)")
            }
            #expect(out["unknown"] == "org.freedesktop.DBus.Error.NotSupported")
            #expect(out["other-client"] == "org.freedesktop.Secret.Error.NoSession")
        }
    }

    @Test(
        "bad calls get precise errors and store nothing: foreign sessions, bad padding, unknown objects; a duplicate is a second item"
    )
    func badCallsAreRefused() throws {
        try withSecretService { box, bus in
            let r = try box.python(
                bus.address,
                """
                import secretstorage
                from secretstorage.dhcrypto import Session
                from jeepney import DBusAddress, new_method_call, MessageType
                conn = secretstorage.dbus_init()
                def addr(path, iface):
                    return DBusAddress(path, 'org.freedesktop.secrets', iface)
                service = addr('/org/freedesktop/secrets', 'org.freedesktop.Secret.Service')
                coll = addr('/org/freedesktop/secrets/aliases/default', 'org.freedesktop.Secret.Collection')
                def call(a, method, sig, body, c=conn):
                    reply = c.send_and_get_reply(new_method_call(a, method, sig, body), unwrap=False)
                    if reply.header.message_type == MessageType.error:
                        return reply.header.fields.get(4)
                    return reply.body
                plain = call(service, 'OpenSession', 'sv', ('plain', ('s', '')))[1]
                props = {'org.freedesktop.Secret.Item.Label': ('s', 'L'),
                         'org.freedesktop.Secret.Item.Attributes': ('a{ss}', {'service': 'bad', 'username': 'u'})}
                print('first', len(call(coll, 'CreateItem', 'a{sv}(oayays)b', (props, (plain, b'', b'one', 'text/plain'), False))))
                print('duplicate', len(call(coll, 'CreateItem', 'a{sv}(oayays)b', (props, (plain, b'', b'two', 'text/plain'), False))))
                print('both', len(call(service, 'SearchItems', 'a{ss}', ({'service': 'bad'},))[0]))
                other = secretstorage.dbus_init()
                foreign = call(service, 'OpenSession', 'sv', ('plain', ('s', '')), c=other)[1]
                props2 = {'org.freedesktop.Secret.Item.Attributes': ('a{ss}', {'service': 'bad2'})}
                print('foreign', call(coll, 'CreateItem', 'a{sv}(oayays)b', (props2, (foreign, b'', b'x', 'text/plain'), True)))
                ours = Session()
                out, dh = call(service, 'OpenSession', 'sv', ('dh-ietf1024-sha256-aes128-cbc-pkcs7', ('ay', ours.my_public_key.to_bytes(128, 'big'))))
                print('padding', call(coll, 'CreateItem', 'a{sv}(oayays)b', (props2, (dh, bytes(16), bytes(16), 'text/plain'), True)))
                print('short-iv', call(coll, 'CreateItem', 'a{sv}(oayays)b', (props2, (dh, bytes(3), bytes(16), 'text/plain'), True)))
                print('stored', len(call(service, 'SearchItems', 'a{ss}', ({'service': 'bad2'},))[0]))
                secret = call(addr(call(service, 'SearchItems', 'a{ss}', ({'service': 'bad'},))[0][0], 'org.freedesktop.Secret.Item'), 'GetSecret', 'o', (plain,))[0]
                print('newest', bytes(secret[2]).decode())
                print('no-object', call(addr('/org/freedesktop/secrets/collection/login/genp999999', 'org.freedesktop.Secret.Item'), 'GetSecret', 'o', (plain,)))
                print('bad-path', call(addr('/org/freedesktop/secrets/nowhere', 'org.freedesktop.Secret.Item'), 'GetSecret', 'o', (plain,)))
                print('delete-collection', call(coll, 'Delete', '', ()))
                print('unknown-method', call(service, 'Frobnicate', '', ()))
                print('new-collection', call(service, 'CreateCollection', 'a{sv}s', ({}, 'work')))
                xml = call(addr('/org/freedesktop/secrets', 'org.freedesktop.DBus.Introspectable'), 'Introspect', '', ())[0]
                print('introspect', 'org.freedesktop.Secret.Service' in xml and '<node name="collection"/>' in xml)
                """)
            #expect(r.status == 0, "python: \(r.summary)")
            let out = labelled(r)
            #expect(out["first"] == "2", "\(r.stdout)")
            // CreateItem without replace makes a second item (the spec's rule), and a search
            // answers the newest first.
            #expect(out["duplicate"] == "2", "\(r.stdout)")
            #expect(out["both"] == "2", "\(r.stdout)")
            #expect(out["foreign"] == "org.freedesktop.Secret.Error.NoSession")
            #expect(out["padding"] == "org.freedesktop.DBus.Error.InvalidArgs")
            #expect(out["short-iv"] == "org.freedesktop.DBus.Error.InvalidArgs")
            #expect(out["stored"] == "0", "a refused CreateItem stored an item: \(r.stdout)")
            #expect(out["newest"] == "two", "the newest item comes first: \(r.stdout)")
            #expect(out["no-object"] == "org.freedesktop.Secret.Error.NoSuchObject")
            #expect(out["bad-path"] == "org.freedesktop.Secret.Error.NoSuchObject")
            #expect(out["delete-collection"] == "org.freedesktop.DBus.Error.AccessDenied")
            #expect(out["unknown-method"] == "org.freedesktop.DBus.Error.UnknownMethod")
            #expect(out["new-collection"] == "org.freedesktop.DBus.Error.NotSupported")
            #expect(out["introspect"] == "True")
        }
    }

    @Test(
        "a locked vault without a passphrase file: Unlock gives a Prompt that asks the caller through pinentry; cancelled it is dismissed; no display is refused at once"
    )
    func unlockPrompt() throws {
        // The scripted pinentry in a directory of its own: the provider is given its path before
        // the sandbox exists.
        var template = Array("/tmp/keychainfs-test-pinentry-XXXXXX".utf8CString)
        let dir = String(cString: try #require(mkdtemp(&template)))
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let pinentry = try ScriptedPinentry(in: dir)
        let script = pinentry.script
        // A provider whose passphrase came on a descriptor (it cannot read it again), and one
        // started --locked (no passphrase at all, as the user unit runs it): the same prompt.
        for options in [["--pinentry", script], ["--locked", "--pinentry", script]] {
            pinentry.clearLog()
            try withSecretService(
                passphraseOnDescriptor: true, options: options,
                setup: { box in try box.addGeneric("prompt-svc", "pat", "prompted-secret") }
            ) { box, bus in
                let client = """
                    import secretstorage, sys
                    from jeepney import DBusAddress, new_method_call, MessageType
                    conn = secretstorage.dbus_init()
                    coll = secretstorage.get_default_collection(conn)
                    service = DBusAddress('/org/freedesktop/secrets', 'org.freedesktop.secrets', 'org.freedesktop.Secret.Service')
                    coll.lock()
                    print('locked', coll.is_locked())
                    if sys.argv[1] == 'headless':
                        reply = conn.send_and_get_reply(new_method_call(service, 'Unlock', 'ao', ([coll.collection_path],)), unwrap=False)
                        print('headless', reply.header.fields.get(4), 'display' in (reply.body[0] if reply.body else ''))
                        sys.exit(0)
                    open(sys.argv[2], 'w').write('cancel\\n')
                    print('cancelled', coll.unlock(), coll.is_locked())
                    open(sys.argv[2], 'w').write('pin:' + sys.argv[3] + '\\n')
                    print('answered', coll.unlock(), coll.is_locked())
                    item = list(coll.search_items({'service': 'prompt-svc'}))[0]
                    print('secret', item.get_secret().decode())
                    """
                let r = try box.python(
                    bus.address, client, ["display", pinentry.modePath, box.passphrase], env: ["DISPLAY": ":99"])
                #expect(r.status == 0, "python: \(r.summary)")
                let out = labelled(r)
                #expect(out["locked"] == "True", "\(r.stdout)")
                // secretstorage's unlock() returns whether the prompt was dismissed.
                #expect(out["cancelled"] == "True True", "\(r.stdout)")
                #expect(out["answered"] == "False False", "\(r.stdout)")
                #expect(out["secret"] == "prompted-secret", "\(r.stdout)")
                let prompts = pinentry.prompts
                #expect(
                    prompts.count == 2 && prompts.allSatisfy { $0.contains("is locked") && $0.contains("python") },
                    "\(prompts)")
                // No terminal and no display: Unlock is refused at once, saying why, and nothing asks.
                let headless = try box.python(bus.address, client, ["headless"], env: ["DISPLAY": nil])
                #expect(headless.status == 0, "python: \(headless.summary)")
                let h = labelled(headless)
                #expect(h["headless"] == "org.freedesktop.Secret.Error.IsLocked True", "\(headless.stdout)")
                #expect(pinentry.prompts.count == 2)
            }
        }
    }

    @Test("an item that needs user presence is Locked and IsLocked; Unlock without a passphrase file says why")
    func presenceItemsAndUnlockWithoutFile() throws {
        try withSecretService(
            passphraseOnDescriptor: true,
            setup: { box in
                try box.addGeneric("pres-svc", "kay", "presence-secret", extra: ["--access-control", "userPresence"])
                try box.addGeneric("plain-svc", "kay", "plain-secret")
            }
        ) { box, bus in
            let r = try box.python(
                bus.address,
                """
                import secretstorage
                from jeepney import DBusAddress, new_method_call, MessageType
                conn = secretstorage.dbus_init()
                coll = secretstorage.get_default_collection(conn)
                service = DBusAddress('/org/freedesktop/secrets', 'org.freedesktop.secrets', 'org.freedesktop.Secret.Service')
                def call(a, method, sig, body):
                    reply = conn.send_and_get_reply(new_method_call(a, method, sig, body), unwrap=False)
                    if reply.header.message_type == MessageType.error:
                        return reply.header.fields.get(4), reply.body[0] if reply.body else ''
                    return reply.body
                unlocked, locked = call(service, 'SearchItems', 'a{ss}', ({'username': 'kay'},))
                print('lists', len(unlocked), len(locked))
                presence = list(coll.search_items({'service': 'pres-svc'}))[0]
                print('presence-locked', presence.is_locked())
                plain = call(service, 'OpenSession', 'sv', ('plain', ('s', '')))[1]
                item = DBusAddress(presence.item_path, 'org.freedesktop.secrets', 'org.freedesktop.Secret.Item')
                print('presence-get', call(item, 'GetSecret', 'o', (plain,))[0])
                print('plain-get', list(coll.search_items({'service': 'plain-svc'}))[0].get_secret().decode())
                coll.lock()
                name, message = call(service, 'Unlock', 'ao', (['/org/freedesktop/secrets/collection/login'],))
                print('unlock', name)
                print('why', 'passphrase-file' in message)
                print('still-locked', coll.is_locked())
                """)
            #expect(r.status == 0, "python: \(r.summary)")
            let out = labelled(r)
            #expect(out["lists"] == "1 1", "\(r.stdout)")
            #expect(out["presence-locked"] == "True")
            #expect(out["presence-get"] == "org.freedesktop.Secret.Error.IsLocked")
            #expect(out["plain-get"] == "plain-secret")
            #expect(out["unlock"] == "org.freedesktop.Secret.Error.IsLocked")
            #expect(out["why"] == "True")
            #expect(out["still-locked"] == "True")
            #expect(!r.stdout.contains("presence-secret"))
        }
    }

    @Test("a second provider on the same bus names the owner and exits 1")
    func nameAlreadyOwned() throws {
        try withSecretService { box, bus in
            let second = try box.cli(["secret-service"] + box.unlockArgs + ["--address", bus.address], timeout: 30)
            #expect(second.status == 1, "second provider: \(second.summary)")
            #expect(
                second.stderr.contains("org.freedesktop.secrets is already owned")
                    && second.stderr.contains("pid \(bus.provider.pid)"),
                "the message does not name the owner: \(second.stderr)")
            #expect(bus.provider.isRunning)
        }
    }

    @Test("no bus at the address: a precise error, exit 1")
    func noBus() throws {
        try withSandbox { box in
            let r = try box.cli(
                ["secret-service"] + box.unlockArgs + ["--address", "unix:path=\(box.root)/no-such-bus"], timeout: 30)
            #expect(r.status == 1 && r.stderr.contains("cannot connect to unix:path="), "\(r.summary)")
        }
    }
}
