import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// Issue 28, point 7: the peers' own suites, run as they ship against keychainfs, pass. CI cannot
// fetch them, so their cases are here, each named after the suite, file and test it mirrors
// (secretstorage 3.3.3, python-keyring 23.9.3: Debian 12's python3-secretstorage and
// python3-keyring), with the upstream test's own steps and assertions, driven through the same
// libraries against the real provider on a private bus. Each case prints `<case> ok` or
// `<case> FAIL <why>`.

/// Runs `cases` (a python body defining cases with `@case('name')`) and returns what each said.
func runCases(_ box: TestSandbox, _ address: String, _ cases: String) throws -> (RunResult, [String: String]) {
    let script = """
        import sys, time, string, random
        def case(name):
            def wrap(f):
                try:
                    f()
                    print(name, 'ok')
                except BaseException as e:
                    print(name, 'FAIL', type(e).__name__, str(e).replace('\\n', ' ')[:300])
                sys.stdout.flush()
                return f
            return wrap

        """ + cases
    let r = try box.python(address, script)
    return (r, labelled(r))
}

private func expectAllPass(_ names: [String], _ r: RunResult, _ out: [String: String]) {
    #expect(r.status == 0, "python: \(r.summary)")
    for name in names { #expect(out[name] == "ok", "\(name): \(out[name] ?? "not run")\n\(r.stderr)") }
}

@Suite("peer suites: secretstorage and python-keyring", .serialized)
struct PeerSuiteTests {
    @Test(
        "secretstorage tests/test_collection.py (test_all_collections, test_all_items, test_create_empty_item, test_label), test_context_manager.py, test_exceptions.py"
    )
    func secretstorageCollection() throws {
        try withSecretService { box, bus in
            let names = [
                "test_collection.py::test_all_collections", "test_collection.py::test_all_items",
                "test_collection.py::test_create_empty_item", "test_collection.py::test_label",
                "test_context_manager.py::test_closing_context_manager", "test_exceptions.py::test_double_deleting",
                "test_exceptions.py::test_non_existing_item", "test_exceptions.py::test_non_existing_collection",
                "second-process-label", "non-existing-collection-path",
            ]
            let (r, out) = try runCases(
                box, bus.address,
                """
                from contextlib import closing
                from secretstorage import Collection, Item, dbus_init, get_any_collection, get_all_collections
                from secretstorage import get_collection_by_alias
                from secretstorage import check_service_availability
                from secretstorage.exceptions import ItemNotFoundException
                import subprocess
                connection = dbus_init()
                collection = get_any_collection(connection)
                @case('test_collection.py::test_all_collections')
                def _():
                    labels = list(map(Collection.get_label, get_all_collections(connection)))
                    assert collection.get_label() in labels, labels
                @case('test_collection.py::test_all_items')
                def _():
                    for item in collection.get_all_items():
                        item.get_label()
                @case('test_collection.py::test_create_empty_item')
                def _():
                    item = collection.create_item('', {}, b'')
                    item.delete()
                @case('test_collection.py::test_label')
                def _():
                    old_label = collection.get_label()
                    collection.set_label('Hello!')
                    assert collection.get_label() == 'Hello!'
                    collection.set_label(old_label)
                    assert collection.get_label() == old_label
                @case('second-process-label')
                def _():
                    collection.set_label('Seen elsewhere')
                    other = subprocess.run([sys.executable, '-c', 'import secretstorage as s; '
                        'print(s.get_any_collection(s.dbus_init()).get_label())'], capture_output=True, text=True)
                    assert other.stdout.strip() == 'Seen elsewhere', other
                    collection.set_label('Login')
                @case('test_context_manager.py::test_closing_context_manager')
                def _():
                    with closing(dbus_init()) as conn:
                        assert check_service_availability(conn)
                        c = get_any_collection(conn)
                        assert c is not None
                        assert c.get_label() is not None
                @case('test_exceptions.py::test_double_deleting')
                def _():
                    item = collection.create_item('MyItem', {'application': 'secretstorage-test'}, b'pa$$word')
                    item.delete()
                    try:
                        item.delete()
                    except ItemNotFoundException:
                        return
                    raise AssertionError('the second delete did not raise ItemNotFoundException')
                @case('test_exceptions.py::test_non_existing_item')
                def _():
                    try:
                        Item(connection, '/not/existing/path')
                    except ItemNotFoundException:
                        return
                    raise AssertionError('no ItemNotFoundException')
                @case('test_exceptions.py::test_non_existing_collection')
                def _():
                    try:
                        get_collection_by_alias(connection, 'non-existing-alias')
                    except ItemNotFoundException:
                        return
                    raise AssertionError('no ItemNotFoundException')
                @case('non-existing-collection-path')
                def _():
                    try:
                        Collection(connection, '/org/freedesktop/secrets/collection/non_existing')
                    except ItemNotFoundException:
                        return
                    raise AssertionError('no ItemNotFoundException')
                """)
            expectAllPass(names, r, out)
        }
    }

    @Test(
        "secretstorage tests/test_item.py (two items with the same attributes, CreateItem without replace): every test"
    )
    func secretstorageItem() throws {
        try withSecretService { box, bus in
            let tests = [
                "test_equal", "test_searchable", "test_item_in_all_items", "test_attributes", "test_label",
                "test_secret", "test_secret_wrong_type", "test_secret_content_type", "test_modified", "test_created",
                "test_unlock",
            ]
            let (r, out) = try runCases(
                box, bus.address,
                """
                from secretstorage import dbus_init, search_items, get_any_collection
                import subprocess
                ATTRIBUTES = {'application': 'secretstorage-test', 'attribute': 'qwerty'}
                NEW_ATTRIBUTES = {'application': 'secretstorage-test', 'newattribute': 'asdfgh'}
                connection = dbus_init()
                collection = get_any_collection(connection)
                def item_case(name):
                    def wrap(f):
                        def run():
                            created_timestamp = time.time()
                            item = collection.create_item('My item', ATTRIBUTES, b'pa$$word')
                            other_item = collection.create_item('My item', ATTRIBUTES, b'', content_type='data/null')
                            try:
                                f(item, other_item, created_timestamp)
                            finally:
                                item.delete()
                                other_item.delete()
                        return case('test_item.py::' + name)(run)
                    return wrap
                @item_case('test_equal')
                def _(item, other_item, t):
                    assert item == item
                    assert item != other_item
                    assert other_item == other_item
                @item_case('test_searchable')
                def _(item, other_item, t):
                    assert item in collection.search_items(ATTRIBUTES)
                    assert item in search_items(connection, ATTRIBUTES)
                @item_case('test_item_in_all_items')
                def _(item, other_item, t):
                    assert item in collection.get_all_items()
                @item_case('test_attributes')
                def _(item, other_item, t):
                    attributes = item.get_attributes()
                    for key in ATTRIBUTES:
                        assert ATTRIBUTES[key] == attributes[key]
                    item.set_attributes(NEW_ATTRIBUTES)
                    attributes = item.get_attributes()
                    for key in NEW_ATTRIBUTES:
                        assert NEW_ATTRIBUTES[key] == attributes[key]
                    item.set_attributes(ATTRIBUTES)
                @item_case('test_label')
                def _(item, other_item, t):
                    assert item.get_label() == 'My item'
                    item.set_label('Hello!')
                    assert item.get_label() == 'Hello!'
                @item_case('test_secret')
                def _(item, other_item, t):
                    assert item.get_secret() == b'pa$$word'
                    item.set_secret(b'newpa$$word')
                    assert isinstance(item.get_secret(), bytes)
                    assert item.get_secret() == b'newpa$$word'
                    assert other_item.get_secret() == b''
                    # read back at once by a second process, through libsecret
                    other = subprocess.run(['/usr/bin/secret-tool', 'lookup', 'attribute', 'qwerty'],
                                           capture_output=True)
                    assert other.returncode == 0, other
                @item_case('test_secret_wrong_type')
                def _(item, other_item, t):
                    item.set_secret('test тест')
                    assert item.get_secret() == 'test тест'.encode('utf-8')
                    try:
                        item.set_secret(None)
                    except TypeError:
                        return
                    raise AssertionError('no TypeError')
                @item_case('test_secret_content_type')
                def _(item, other_item, t):
                    assert item.get_secret_content_type() == 'text/plain'
                @item_case('test_modified')
                def _(item, other_item, t):
                    assert abs(time.time() - item.get_modified()) < 5
                @item_case('test_created')
                def _(item, other_item, t):
                    assert abs(t - item.get_created()) < 5
                @item_case('test_unlock')
                def _(item, other_item, t):
                    item.unlock()
                """)
            expectAllPass(tests.map { "test_item.py::\($0)" }, r, out)
            // The items each test made were deleted by its tearDown: none left behind.
            let left = try box.secretTool(bus.address, ["search", "--all", "application", "secretstorage-test"])
            #expect(itemPaths(left).isEmpty, "\(left.summary)")
        }
    }

    @Test("CreateItem without replace makes a second item (account alice#2 in the vault); a lookup answers the newest")
    func secondItemMostRecentFirst() throws {
        try withSecretService { box, bus in
            let (r, out) = try runCases(
                box, bus.address,
                """
                from secretstorage import dbus_init, get_any_collection
                connection = dbus_init()
                collection = get_any_collection(connection)
                attrs = {'service': 'twice', 'username': 'alice'}
                first = collection.create_item('First', attrs, b'one')
                time.sleep(1.1)
                second = collection.create_item('Second', attrs, b'two')
                print('paths', first.item_path != second.item_path)
                print('found', [i.get_label() for i in collection.search_items(attrs)])
                print('attrs', second.get_attributes() == attrs)
                """)
            #expect(r.status == 0, "\(r.summary)")
            #expect(out["paths"] == "True", "\(r.stdout)")
            #expect(out["found"] == "['Second', 'First']", "the most recent first: \(r.stdout)")
            #expect(out["attrs"] == "True", "\(r.stdout)")
            let lookup = try box.secretTool(bus.address, ["lookup", "service", "twice", "username", "alice"])
            #expect(lookup.stdout == "two", "secret-tool lookup answers the newest: \(lookup.summary)")
            let copy = try box.cli(
                ["find-generic-password"] + box.unlockArgs + ["-s", "twice", "-a", "alice#2", "-w"])
            #expect(copy.stdout == "two\n", "the second item's account in the vault: \(copy.summary)")
            let original = try box.cli(
                ["find-generic-password"] + box.unlockArgs + ["-s", "twice", "-a", "alice", "-w"])
            #expect(original.stdout == "one\n", "\(original.summary)")
        }
    }
}
