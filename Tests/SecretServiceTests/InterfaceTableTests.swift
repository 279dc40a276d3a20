import Foundation
import Testing

// The interface tables (Sources/Faces/SecretService/Interfaces.swift) drive both the dispatcher
// and the introspection XML: every method an object's Introspect lists is answered (a call with
// wrong arguments gets a typed error that is not UnknownMethod), a member it does not list is
// UnknownMethod, and its properties are exactly what GetAll answers.

@Suite("secret service interface tables", .serialized)
struct InterfaceTableTests {
    @Test("every object answers exactly the members its introspection lists")
    func introspectionMatchesDispatch() throws {
        try withSecretService(setup: { box in try box.addGeneric("table-svc", "alice", Array("pw".utf8)) }) {
            box, bus in
            let r = try box.python(
                bus.address,
                """
                import secretstorage, xml.etree.ElementTree as ET
                from jeepney import DBusAddress, new_method_call, MessageType
                conn = secretstorage.dbus_init()
                def call(path, iface, method, sig, body):
                    reply = conn.send_and_get_reply(new_method_call(
                        DBusAddress(path, 'org.freedesktop.secrets', iface), method, sig, body), unwrap=False)
                    if reply.header.message_type == MessageType.error:
                        return ('error', reply.header.fields.get(4), reply.body[0] if reply.body else '')
                    return ('ok', reply.body)
                svc = '/org/freedesktop/secrets'
                item = call(svc, 'org.freedesktop.Secret.Service', 'SearchItems', 'a{ss}', ({'service': 'table-svc'},))[1][0][0]
                session = call(svc, 'org.freedesktop.Secret.Service', 'OpenSession', 'sv', ('plain', ('s', '')))[1][1]
                objects = [svc, svc + '/collection/login', svc + '/aliases/default', item, session,
                           svc + '/prompt/1', svc + '/collection', svc + '/aliases']
                for path in objects:
                    status, body = call(path, 'org.freedesktop.DBus.Introspectable', 'Introspect', '', ())
                    assert status == 'ok', (path, body)
                    root = ET.fromstring(body[0])
                    for iface in root.findall('interface'):
                        name = iface.get('name')
                        methods = iface.findall('method')
                        for m in methods:
                            ins = ''.join(a.get('type') for a in m.findall('arg') if a.get('direction') == 'in')
                            # wrong arguments: one string too many
                            if ins:
                                bad = call(path, name, m.get('name'), '', ())
                            else:
                                bad = call(path, name, m.get('name'), 's', ('x',))
                            print('method', path, name, m.get('name'), bad[0], bad[1])
                        print('unlisted', path, name, call(path, name, 'NoSuchMember', '', ())[1])
                        props = sorted(p.get('name') for p in iface.findall('property'))
                        if props:
                            got = call(path, 'org.freedesktop.DBus.Properties', 'GetAll', 's', (name,))
                            print('props', path, name, ','.join(props) == ','.join(sorted(got[1][0].keys())) if got[0] == 'ok' else got)
                            for p in iface.findall('property'):
                                if p.get('access') == 'read':
                                    st = call(path, 'org.freedesktop.DBus.Properties', 'Set', 'ssv', (name, p.get('name'), ('s', 'x')))
                                    print('readonly', path, name, p.get('name'), st[1])
                                else:
                                    wrong = ('b', True)
                                    st = call(path, 'org.freedesktop.DBus.Properties', 'Set', 'ssv', (name, p.get('name'), wrong))
                                    print('wrongtype', path, name, p.get('name'), st[1], st[2] if len(st) > 2 else '')
                print('done')
                """)
            #expect(r.status == 0, "python: \(r.summary)")
            let lines = r.stdout.split(separator: "\n").map(String.init)
            #expect(lines.last == "done", "\(r.summary)")
            let methods = lines.filter { $0.hasPrefix("method ") }
            // Every object lists Introspect, Get, GetAll and Set; the service its 12 methods, each
            // collection path 3, the item 3, the session 1, the prompt 2.
            #expect(methods.count == 8 * 4 + 12 + 3 + 3 + 3 + 1 + 2, "\(r.stdout)")
            for line in methods {
                #expect(line.hasSuffix("error org.freedesktop.DBus.Error.InvalidArgs"), "\(line)")
            }
            let unlisted = lines.filter { $0.hasPrefix("unlisted ") }
            #expect(unlisted.count == 8 * 2 + 6, "\(r.stdout)")
            for line in unlisted {
                #expect(line.hasSuffix("org.freedesktop.DBus.Error.UnknownMethod"), "\(line)")
            }
            let props = lines.filter { $0.hasPrefix("props ") }
            #expect(props.count == 4, "service, collection, alias and item list properties: \(r.stdout)")
            for line in props { #expect(line.hasSuffix(" True"), "\(line)") }
            for line in lines where line.hasPrefix("readonly ") {
                #expect(line.hasSuffix("org.freedesktop.DBus.Error.PropertyReadOnly"), "\(line)")
            }
            let wrong = lines.filter { $0.hasPrefix("wrongtype ") }
            #expect(wrong.count >= 2, "the item's Label and Attributes are writable: \(r.stdout)")
            for line in wrong {
                #expect(line.contains("org.freedesktop.DBus.Error.InvalidArgs"), "\(line)")
                #expect(
                    !line.contains("No such") && line.contains("must be"), "an error in the request's terms: \(line)")
            }
        }
    }

    @Test("errors speak of the request: a wrong argument type names the argument and its type, never errno")
    func errorTextsNameTheRequest() throws {
        try withSecretService { box, bus in
            let r = try box.python(
                bus.address,
                """
                import secretstorage
                from jeepney import DBusAddress, new_method_call, MessageType
                conn = secretstorage.dbus_init()
                svc = DBusAddress('/org/freedesktop/secrets', 'org.freedesktop.secrets', 'org.freedesktop.Secret.Service')
                def err(method, sig, body):
                    reply = conn.send_and_get_reply(new_method_call(svc, method, sig, body), unwrap=False)
                    return reply.header.fields.get(4) + ' | ' + reply.body[0]
                print('search', err('SearchItems', 's', ('x',)))
                print('search-dict', err('SearchItems', 'a{sv}', ({'a': ('s', 'b')},)))
                print('open', err('OpenSession', 'ss', ('plain', 'x')))
                """)
            #expect(r.status == 0, "python: \(r.summary)")
            let out = labelled(r)
            #expect(
                out["search"]
                    == "org.freedesktop.DBus.Error.InvalidArgs | SearchItems takes attributes (a dictionary of strings, a{ss}); the call gave s",
                "\(r.stdout)")
            #expect(out["search-dict"]?.contains("a dictionary of strings") == true, "\(r.stdout)")
            #expect(out["open"]?.contains("input (a variant, v)") == true, "\(r.stdout)")
            #expect(!r.stdout.contains("No such device"), "\(r.stdout)")
        }
    }
}
