import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// Issue 28, point 7: python-keyring 23.9.3's backend tests (keyring/testing/backend.py,
// BackendBasicTests) as tests/backends/test_SecretService.py runs them (preferred_collection
// /org/freedesktop/secrets/collection/session) and as tests/backends/test_libsecret.py runs them
// (collection `session`; libsecret's python binding is not in CI, so its cases go through
// libsecret's own secret-tool with --collection=session). The session collection is kept in
// memory: nothing reaches the vault, and it is gone when the provider stops.

/// python-keyring's BackendBasicTests, against the Secret Service backend on the session collection.
private let keyringCases = """
    import keyring
    from keyring import errors
    from keyring.backends import SecretService
    UNICODE_CHARS = ("זהכיףסתםלשמועאיךתנצחקרפדעץטובבגן" "ξεσκεπάζωτηνψυχοφθόραβδελυγμία"
                     "Съешьжеещёэтихмягкихфранцузскихбулокдавыпейчаю")
    DIFFICULT_CHARS = string.whitespace + string.punctuation
    def random_string(k, source=string.ascii_letters):
        return ''.join(random.choice(source) for _ in range(k))
    kr = SecretService.Keyring()
    kr.preferred_collection = '/org/freedesktop/secrets/collection/session'
    def check_set_get(service, username, password):
        assert kr.get_password(service, username) is None
        kr.set_password(service, username, password)
        assert kr.get_password(service, username) == password
        kr.set_password(service, username, '')
        assert kr.get_password(service, username) == ''
    T = 'test_SecretService.py::TestSecretServiceKeyring::'
    @case(T + 'test_password_set_get')
    def _():
        check_set_get(random_string(20), random_string(20), random_string(20))
    @case(T + 'test_difficult_chars')
    def _():
        check_set_get(random_string(20, DIFFICULT_CHARS), random_string(20, DIFFICULT_CHARS),
                      random_string(20, DIFFICULT_CHARS))
    @case(T + 'test_delete_present')
    def _():
        s, u = random_string(20, DIFFICULT_CHARS), random_string(20, DIFFICULT_CHARS)
        kr.set_password(s, u, random_string(20, DIFFICULT_CHARS))
        kr.delete_password(s, u)
        assert kr.get_password(s, u) is None
    @case(T + 'test_delete_not_present')
    def _():
        try:
            kr.delete_password(random_string(20, DIFFICULT_CHARS), random_string(20, DIFFICULT_CHARS))
        except errors.PasswordDeleteError:
            return
        raise AssertionError('no PasswordDeleteError')
    @case(T + 'test_delete_one_in_group')
    def _():
        u1, u2, p, s = (random_string(20, DIFFICULT_CHARS) for _ in range(4))
        kr.set_password(s, u1, p)
        kr.set_password(s, u2, p)
        kr.delete_password(s, u1)
        assert kr.get_password(s, u2) == p
    @case(T + 'test_name_property')
    def _():
        assert all(32 <= ord(c) < 127 for c in kr.name)
    @case(T + 'test_unicode_chars')
    def _():
        check_set_get(random_string(20, UNICODE_CHARS), random_string(20, UNICODE_CHARS),
                      random_string(20, UNICODE_CHARS))
    @case(T + 'test_unicode_and_ascii_chars')
    def _():
        source = random_string(10, UNICODE_CHARS) + random_string(10) + random_string(10, DIFFICULT_CHARS)
        check_set_get(random_string(20, source), random_string(20, source), random_string(20, source))
    @case(T + 'test_different_user')
    def _():
        kr.set_password('service1', 'user1', 'password1')
        kr.set_password('service1', 'user2', 'password2')
        assert kr.get_password('service1', 'user1') == 'password1'
        assert kr.get_password('service1', 'user2') == 'password2'
        kr.set_password('service2', 'user3', 'password3')
        assert kr.get_password('service1', 'user1') == 'password1'
    @case(T + 'test_credential')
    def _():
        assert kr.get_credential('service', None) is None
        kr.set_password('service1', 'user1', 'password1')
        kr.set_password('service1', 'user2', 'password2')
        cred = kr.get_credential('service1', None)
        assert cred is None or (cred.username, cred.password) in (('user1', 'password1'), ('user2', 'password2'))
        cred = kr.get_credential('service1', 'user2')
        assert cred is not None
        assert (cred.username, cred.password) in (('user1', 'password1'), ('user2', 'password2'))
    @case(T + 'test_new_with_properties')
    def _():
        alt = kr.with_properties(foo='bar')
        assert alt is not kr and alt.foo == 'bar'
    kr.set_password('kept-svc', 'kept-user', 'kept-secret')
    """

@Suite("peer suites: python-keyring's backends on the session collection", .serialized)
struct PeerSuiteKeyringTests {
    @Test(
        "keyring tests/backends/test_SecretService.py::TestSecretServiceKeyring (BackendBasicTests) on collection/session: every test; in memory only"
    )
    func keyringSecretServiceBackend() throws {
        try withSecretService { box, bus in
            let (r, out) = try runCases(box, bus.address, keyringCases)
            #expect(r.status == 0, "python: \(r.summary)")
            let tests = [
                "test_password_set_get", "test_difficult_chars", "test_delete_present", "test_delete_not_present",
                "test_delete_one_in_group", "test_name_property", "test_unicode_chars", "test_unicode_and_ascii_chars",
                "test_different_user", "test_credential", "test_new_with_properties",
            ]
            for t in tests {
                let name = "test_SecretService.py::TestSecretServiceKeyring::\(t)"
                #expect(out[name] == "ok", "\(name): \(out[name] ?? "not run")")
            }
            // A second process reads it at once, from the session collection's path.
            let other = try box.python(
                bus.address,
                """
                import secretstorage
                c = secretstorage.Collection(secretstorage.dbus_init(), '/org/freedesktop/secrets/aliases/session')
                items = list(c.search_items({'service': 'kept-svc', 'username': 'kept-user'}))
                print(len(items), items[0].get_secret().decode(), items[0].item_path.startswith('/org/freedesktop/secrets/collection/session/'))
                """)
            #expect(other.stdout == "1 kept-secret True\n", "\(other.summary)")
            // Never in the vault: the CLI finds nothing, the login collection lists nothing.
            let find = try box.cli(["find-generic-password"] + box.unlockArgs + ["-s", "kept-svc"])
            #expect(find.status == 44, "the session collection reached the vault: \(find.summary)")
            // Gone when the provider stops: a new provider on the same vault and bus has none.
            bus.provider.kill(SIGTERM)
            #expect(bus.provider.wait(timeout: 10).status != nil)
            _ = try box.startProvider(address: bus.address)
            let after = try box.python(
                bus.address,
                """
                import keyring
                from keyring.backends import SecretService
                kr = SecretService.Keyring()
                kr.preferred_collection = '/org/freedesktop/secrets/collection/session'
                print(kr.get_password('kept-svc', 'kept-user'))
                """)
            #expect(after.stdout == "None\n", "the session collection outlived its provider: \(after.summary)")
        }
    }

    @Test(
        "keyring tests/backends/test_libsecret.py::TestLibSecretKeyring (collection session) through libsecret's secret-tool: set/get, empty password, delete, delete one in group, different users"
    )
    func keyringLibsecretBackend() throws {
        try withSecretService { box, bus in
            // secret-tool reads its arguments in the locale's encoding: UTF-8, as a user's session.
            func tool(_ args: [String], stdin: [UInt8]? = nil) throws -> RunResult {
                try box.run(
                    "/usr/bin/secret-tool", args, stdin: stdin,
                    env: box.busEnvironment(bus.address).merging(["LC_ALL": "C.UTF-8"]) { $1 }, timeout: 20)
            }
            func store(_ service: String, _ user: String, _ password: String) throws -> RunResult {
                try tool(
                    [
                        "store", "--collection=session", "--label=Password for '\(user)' on '\(service)'",
                        "service", service, "username", user, "application", "Python keyring library",
                    ], stdin: Array(password.utf8))
            }
            func lookup(_ service: String, _ user: String) throws -> RunResult {
                try tool(["lookup", "service", service, "username", user])
            }
            func clear(_ service: String, _ user: String) throws -> RunResult {
                try tool(["clear", "service", service, "username", user])
            }
            // test_password_set_get: none, set, get, the empty password.
            #expect(try lookup("svc-α", "user-β").stdout.isEmpty)
            #expect(try store("svc-α", "user-β", "pässword").status == 0)
            #expect(try lookup("svc-α", "user-β").stdout == "pässword")
            #expect(try store("svc-α", "user-β", "").status == 0)
            let empty = try lookup("svc-α", "user-β")
            #expect(empty.status == 0 && empty.stdout.isEmpty, "\(empty.summary)")
            // test_delete_present
            #expect(try store("svc-del", "u", "p").status == 0)
            #expect(try clear("svc-del", "u").status == 0)
            #expect(try lookup("svc-del", "u").stdout.isEmpty)
            // test_delete_one_in_group
            #expect(try store("grp", "u1", "pw").status == 0)
            #expect(try store("grp", "u2", "pw").status == 0)
            #expect(try clear("grp", "u1").status == 0)
            #expect(try lookup("grp", "u2").stdout == "pw")
            #expect(try lookup("grp", "u1").stdout.isEmpty)
            // test_different_user
            #expect(try store("service1", "user1", "password1").status == 0)
            #expect(try store("service1", "user2", "password2").status == 0)
            #expect(try lookup("service1", "user1").stdout == "password1")
            #expect(try lookup("service1", "user2").stdout == "password2")
            // In the session collection, not the vault.
            // test_unicode_chars, through libsecret
            #expect(try store("Съешь", "ξεσκεπάζω", "זהכיף").status == 0)
            #expect(try lookup("Съешь", "ξεσκεπάζω").stdout == "זהכיף")
            let find = try box.cli(["find-generic-password"] + box.unlockArgs + ["-s", "service1"])
            #expect(find.status == 44, "the session collection reached the vault: \(find.summary)")
        }
    }
}
