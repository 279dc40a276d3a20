import Foundation
import Testing

@testable import Keychain

// The core's Secret Service mapping (docs/secret-service.md, "Mapping"), without a bus: which
// class, service, account and server an item made through the API gets, and what a client sees.
@Suite("secret service mapping") struct SecretServiceMappingTests {
    func item(_ itemClass: ItemClass, _ attributes: Attributes) -> KeychainItem {
        KeychainItem(id: 7, itemClass: itemClass, attributes: attributes, data: nil)
    }

    @Test(
        "genp: service from service, else xdg:schema, else application, else the label; account from username/account/user"
    )
    func genericPasswordSources() throws {
        let cases: [([String: String], String, String)] = [
            (["service": "s", "xdg:schema": "x", "application": "a", "username": "u"], "s", "u"),
            (["xdg:schema": "x", "application": "a", "account": "acc"], "x", "acc"),
            (["application": "a", "user": "us"], "a", "us"),
            (["username": "u", "user": "other"], "the label", "u"),
        ]
        for (given, service, account) in cases {
            let (itemClass, attributes) = try SecretServiceMapping.newItem(
                attributes: given, label: "the label", contentType: "")
            #expect(itemClass == .genericPassword)
            #expect(attributes[Schema.service] == .string(service), "\(given)")
            #expect(attributes[Schema.account] == .string(account), "\(given)")
            #expect(attributes[Schema.label] == .string("the label"))
        }
    }

    @Test("genp without an account attribute: the other attributes make the account, so such items stay apart")
    func accountFromTheRest() throws {
        let (_, a) = try SecretServiceMapping.newItem(
            attributes: ["xdg:schema": "org.gnome.Evolution", "uid": "42", "kind": "imap"], label: "L", contentType: "")
        #expect(a[Schema.service] == .string("org.gnome.Evolution"))
        #expect(a[Schema.account] == .string("kind=imap&uid=42"))
    }

    @Test("network schemas are inet items; a docker server URL is split into protocol, server, port and path")
    func networkSchemas() throws {
        let (gitClass, git) = try SecretServiceMapping.newItem(
            attributes: [
                "xdg:schema": "org.gnome.keyring.NetworkPassword", "server": "git.example.com", "protocol": "https",
                "port": "8443", "user": "alice", "object": "/team",
            ], label: "Git", contentType: "")
        #expect(gitClass == .internetPassword)
        #expect(git[Schema.server] == .string("git.example.com"))
        #expect(git[Schema.protocolAttribute] == .string("htps"))
        #expect(git[Schema.port] == .number(8443))
        #expect(git[Schema.path] == .string("/team"))
        #expect(git[Schema.account] == .string("alice"))

        let (dockerClass, docker) = try SecretServiceMapping.newItem(
            attributes: [
                "xdg:schema": "io.docker.Credentials", "server": "https://registry.example.com:5000/v1/",
                "username": "bob", "label": "Docker Credentials", "docker_cli": "1",
            ], label: "https://registry.example.com:5000/v1/", contentType: "")
        #expect(dockerClass == .internetPassword)
        #expect(docker[Schema.server] == .string("registry.example.com"))
        #expect(docker[Schema.protocolAttribute] == .string("htps"))
        #expect(docker[Schema.port] == .number(5000))
        #expect(docker[Schema.path] == .string("/v1/"))
        #expect(docker[Schema.account] == .string("bob"))
    }

    @Test("the full map and content type come back as created; searches match on any attribute, exactly")
    func keptMapRoundTrip() throws {
        let given = ["service": "svc", "username": "u", "extra": "é", "xdg:schema": "org.example.Thing"]
        let (itemClass, attributes) = try SecretServiceMapping.newItem(
            attributes: given, label: "L", contentType: "application/octet-stream")
        let made = item(itemClass, attributes)
        #expect(SecretServiceMapping.attributes(of: made) == given)
        #expect(SecretServiceMapping.contentType(of: made) == "application/octet-stream")
        #expect(SecretServiceMapping.matches(made, ["extra": "é"]))
        #expect(!SecretServiceMapping.matches(made, ["extra": "e\u{301}"]), "NFD is another value")
        #expect(!SecretServiceMapping.matches(made, ["missing": ""]))
        #expect(SecretServiceMapping.matches(made, [:]))
    }

    @Test("a second item with the same attributes (CreateItem without replace): account alice#2, attributes as given")
    func copiesKeepTheirAttributes() throws {
        let given = ["service": "svc", "username": "alice", "extra": "x"]
        let (genpClass, genp) = try SecretServiceMapping.newItem(
            attributes: given, label: "L", contentType: "text/plain", copy: 2)
        #expect(genp[Schema.account] == .string("alice#2"))
        #expect(genp[Schema.service] == .string("svc"))
        let made = item(genpClass, genp)
        #expect(SecretServiceMapping.attributes(of: made) == given, "the copy number is not a client's attribute")
        #expect(SecretServiceMapping.matches(made, ["username": "alice"]))
        // Setting attributes or a content type keeps the copy number.
        let changed = item(
            genpClass, genp.merging(try SecretServiceMapping.changes(settingContentType: "a/b", of: made)) { $1 })
        #expect(SecretServiceMapping.attributes(of: changed) == given)
        let web = ["xdg:schema": "org.git.Password", "server": "git.example", "user": "bob"]
        let (inetClass, inet) = try SecretServiceMapping.newItem(
            attributes: web, label: "W", contentType: "text/plain", copy: 3)
        #expect(inetClass == .internetPassword)
        #expect(inet[Schema.account] == .string("bob#3"))
        #expect(SecretServiceMapping.attributes(of: item(inetClass, inet)) == web)
        // The first keeps the plain account.
        let (_, first) = try SecretServiceMapping.newItem(attributes: given, label: "L", contentType: "text/plain")
        #expect(first[Schema.account] == .string("alice"))
    }

    @Test("items made elsewhere show libsecret's schema attributes")
    func itemsMadeElsewhere() {
        let genp = item(.genericPassword, [Schema.service: .string("svc"), Schema.account: .string("acct")])
        #expect(SecretServiceMapping.attributes(of: genp) == ["service": "svc", "username": "acct"])
        let inet = item(
            .internetPassword,
            [
                Schema.server: .string("h.example"), Schema.protocolAttribute: .string("htps"), Schema.port: .number(0),
                Schema.account: .string("a"), Schema.path: .string(""),
            ])
        #expect(
            SecretServiceMapping.attributes(of: inet) == [
                "xdg:schema": "org.gnome.keyring.NetworkPassword", "server": "h.example", "protocol": "https",
                "user": "a",
            ])
        // A comment is the user's, never taken for a kept map.
        let commented = item(
            .genericPassword, [Schema.service: .string("s"), Schema.named("comment"): .string(#"{"attributes":{}}"#)])
        #expect(!SecretServiceMapping.isKept(commented))
    }

    @Test("empty attribute names and oversized values are refused, precisely")
    func badInput() {
        expectError(.param, containing: ["attribute"]) {
            _ = try SecretServiceMapping.newItem(attributes: ["": "x"], label: "L", contentType: "")
        }
        expectError(.param, containing: ["too long"]) {
            _ = try SecretServiceMapping.newItem(
                attributes: ["k": String(repeating: "v", count: 5000)], label: "L", contentType: "")
        }
    }
}
