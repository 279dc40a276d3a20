import Testing

@testable import Keychain

@Suite("The Secret Service's keychainfs:synchronizable")
struct SecretServiceSyncMappingTests {
    @Test(
        "CreateItem with keychainfs:synchronizable=true makes a synchronizable item; the attribute is not in its name")
    func createSynchronizable() throws {
        let (itemClass, attributes) = try SecretServiceMapping.newItem(
            attributes: ["application": "app", "project": "alpha", "keychainfs:synchronizable": "true"], label: "L",
            contentType: "text/plain")
        #expect(itemClass == .genericPassword)
        #expect(attributes[Schema.synchronizable] == .bool(true))
        #expect(attributes[Schema.account] == .string("project=alpha"))
        let (_, plain) = try SecretServiceMapping.newItem(
            attributes: ["application": "app", "project": "alpha"], label: "L", contentType: "text/plain")
        #expect(plain[Schema.synchronizable] == nil)
    }

    @Test("SetAttributes sets or clears synchronizable when it names it, and leaves it as it was otherwise")
    func setAttributes() throws {
        let item = KeychainItem(
            id: 1, itemClass: .genericPassword,
            attributes: [
                Schema.service: .string("s"), Schema.account: .string("a"), Schema.synchronizable: .bool(true),
            ], data: nil)
        // Not derived into what clients see: the attribute index holds exactly that.
        #expect(SecretServiceMapping.attributes(of: item)["keychainfs:synchronizable"] == nil)
        let kept = try SecretServiceMapping.changes(settingAttributes: ["service": "s", "username": "a"], of: item)
        #expect(kept[Schema.synchronizable] == nil)
        let off = try SecretServiceMapping.changes(
            settingAttributes: ["service": "s", "username": "a", "keychainfs:synchronizable": "false"], of: item)
        #expect(off[Schema.synchronizable] == .bool(false))
        let on = try SecretServiceMapping.changes(
            settingAttributes: ["service": "s", "username": "a", "keychainfs:synchronizable": "true"], of: item)
        #expect(on[Schema.synchronizable] == .bool(true))
    }
}
