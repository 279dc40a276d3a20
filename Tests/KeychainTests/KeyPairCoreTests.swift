import Foundation
import Keychain
import Testing

/// Non-extractable keys in the core: what a read returns, what a write may not do, and the
/// OpenSSH private key formats the agent signs with (keys made by the real ssh-keygen).
@Suite("Key pairs and non-extractable keys")
struct KeyPairCoreTests {
    @Test("create-keypair: not extractable; a read returns the public key line; data and the flag are fixed")
    func nonExtractable() throws {
        try withVault { v in
            let kc = v.keychain
            let made = try kc.createKeyPair(.ed25519, [Schema.label: .string("signer")])
            #expect(made[Schema.isExtractable] == .bool(false))
            let read = try kc.find(Query(.key, [Schema.label: .string("signer")], returnData: true))
            let text = String(decoding: read.data ?? [], as: UTF8.self)
            #expect(text.hasPrefix("ssh-ed25519 AAAA") && text.hasSuffix(" signer\n"), "\(text)")
            let byID = try kc.item(id: made.id, itemClass: .key, withData: true)
            #expect(byID.data == read.data)
            let query = Query(.key, [Schema.label: .string("signer")])
            expectError(.readOnly) { _ = try kc.update(query, attributes: [:], data: Array("x".utf8)) }
            expectError(.readOnlyAttr) { _ = try kc.update(query, attributes: [Schema.isExtractable: .bool(true)]) }
            // Other attributes still change.
            #expect(try kc.update(query, attributes: [Schema.named("canDecrypt"): .bool(false)]) == 1)
            // Non-extractable data must be a key the core can use.
            expectError(.param) {
                try kc.add(
                    .key, [Schema.label: .string("junk"), Schema.isExtractable: .bool(false)],
                    data: Array("junk".utf8))
            }
        }
    }

    @Test("OpenSSH private keys (ed25519, ecdsa, rsa) give ssh-keygen's public key")
    func openSSHFormats() throws {
        try withVault { v in
            let kc = v.keychain
            for (type, bits) in [("ed25519", "256"), ("ecdsa", "384"), ("rsa", "2048")] {
                try runTool(
                    "/usr/bin/ssh-keygen", ["-q", "-t", type, "-b", bits, "-N", "", "-C", "c", "-f", type], in: v.dir)
                let key = try readFile("\(v.dir)/\(type)")
                let pub = String(decoding: try readFile("\(v.dir)/\(type).pub"), as: UTF8.self)
                try kc.add(.key, [Schema.label: .string(type), Schema.isExtractable: .bool(false)], data: key)
                let identity = try #require(try kc.sshIdentities().identities.first { $0.label == type })
                let expected = pub.split(separator: " ").prefix(2).joined(separator: " ")
                #expect(identity.publicLine == expected + " \(type)", "\(type): \(identity.publicLine)")
            }
        }
    }
}
