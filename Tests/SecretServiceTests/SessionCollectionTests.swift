import Foundation
import Testing

@testable import KeychainSecretService

// Beside the objects, without a bus: the session collection's store (SessionCollection.swift),
// the object paths (Objects.swift) and the interface tables (Interfaces.swift).

@Suite("secret service objects without a bus")
struct SessionCollectionTests {
    @Test("the session collection: replace takes the exact attributes, no replace adds, newest first, delete wipes")
    func sessionCollectionStore() {
        var c = SessionCollection()
        let a = ["service": "s", "username": "u"]
        let first = c.create(label: "one", attributes: a, secret: Array("1".utf8), contentType: "", replace: false)
        let second = c.create(label: "two", attributes: a, secret: Array("2".utf8), contentType: "", replace: false)
        #expect(first.created && second.created && first.number != second.number)
        #expect(c.search(["service": "s"]) == [second.number, first.number], "the most recent first")
        // Replace: the item with exactly these attributes (the newest of them) takes the secret.
        let replaced = c.create(
            label: "three", attributes: a, secret: Array("3".utf8), contentType: "a/b", replace: true)
        #expect(!replaced.created && replaced.number == second.number)
        #expect(c.items[second.number]?.secret == Array("3".utf8) && c.items[second.number]?.contentType == "a/b")
        // A superset of attributes is not the same item for replace.
        let wider = c.create(
            label: "w", attributes: a.merging(["x": "y"]) { $1 }, secret: [], contentType: "", replace: true)
        #expect(wider.created)
        // A change moves an item to the front.
        c.update(first.number) { $0.label = "changed" }
        #expect(c.search(a).first == first.number)
        #expect(c.search(["service": "other"]).isEmpty)
        #expect(c.items[first.number]?.contentType == "text/plain", "an empty content type is text/plain")
        #expect(c.delete(first.number) && !c.delete(first.number))
        c.wipe()
        #expect(c.items.isEmpty)
    }

    @Test("object paths: both collections, their aliases and items; anything else is no object")
    func objectPaths() {
        let root = "/org/freedesktop/secrets"
        #expect(ObjectPath(root + "/collection/login") == .collection(.login))
        #expect(ObjectPath(root + "/aliases/default") == .collection(.login))
        #expect(ObjectPath(root + "/aliases/session") == .collection(.session))
        #expect(ObjectPath(root + "/collection/session/7") == .sessionItem(7))
        #expect(ObjectPath(root + "/aliases/session/7") == .sessionItem(7))
        #expect(ObjectPath(root + "/collection/login/genp42") == .item(.genericPassword, 42))
        #expect(ObjectPath(root + "/collection/session/genp42") == nil)
        #expect(ObjectPath(root + "/collection/login/7") == nil)
        #expect(ObjectPath(root + "/collection/work") == nil)
        #expect(ObjectPath("/not/existing/path") == nil)
        #expect(ObjectPath.collectionPaths == [root + "/collection/login", root + "/collection/session"])
    }

    @Test("each interface's table: unique member names, and the XML lists each with its arguments")
    func interfaceTables() {
        let tables = [
            SecretServiceProvider.serviceInterface, SecretServiceProvider.collectionInterface,
            SecretServiceProvider.itemInterface, SecretServiceProvider.sessionInterface,
            SecretServiceProvider.promptInterface, Introspection.propertiesInterface,
            Introspection.introspectableInterface,
        ]
        for table in tables {
            let names = table.methods.map(\.name) + table.properties.map(\.name) + table.signals.map(\.name)
            #expect(Set(names).count == names.count, "\(table.name) declares a member twice")
            for m in table.methods {
                let xml = table.xml
                #expect(xml.contains("<method name=\"\(m.name)\""), "\(table.name).\(m.name)")
                for a in m.inputs { #expect(xml.contains("type=\"\(a.type)\" direction=\"in\"")) }
            }
        }
        #expect(SecretServiceProvider.collectionInterface.property("Label")?.writable == true)
        #expect(SecretServiceProvider.itemInterface.property("Created")?.writable == false)
        let search = SecretServiceProvider.serviceInterface.method("SearchItems")
        #expect(
            search?.mismatch("s") == "SearchItems takes attributes (a dictionary of strings, a{ss}); the call gave s")
    }
}
