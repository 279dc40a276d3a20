import Foundation
import KeychainCrypto
import Testing

@_spi(CallerRule) @testable import Keychain

/// The ssh halves (issue 26): each key item's public half stored in its attributes when the key
/// is stored, listed without decrypting a private key, found by its fingerprint's tag in the
/// attribute index, and filled in once for keys stored before they existed.
@Suite("ssh public halves of key items")
struct SSHHalvesTests {
    static let sshPublicKey = Schema.named("sshPublicKey")
    static let sshUnusable = Schema.named("sshUnusable")

    /// Takes the halves out of a key item's attributes, as a key stored before them has none:
    /// its row resealed in a write transaction with the attributes it had then (and so no tag).
    static func stripHalves(_ kc: Keychain, id: Int64) throws {
        let keys = try kc.currentKeys()
        try kc.writeTransaction(keys: keys.manifest) { vault in
            let row = try #require(try vault.item(id: id, withData: true))
            var attributes = try kc.openAttributes(row, itemClass: .key, keys: keys)
            attributes[sshPublicKey] = nil
            attributes[sshUnusable] = nil
            try vault.replace(kc.resealAttributes(row, itemClass: .key, attributes: attributes, keys: keys))
        }
    }

    static func tagCount(_ v: TestVault, id: Int64) throws -> Int {
        guard
            case .integer(let n)? = try v.raw().query("SELECT count(*) FROM attr_index WHERE item_id = \(id)").first?
                .first
        else { return -1 }
        return Int(n)
    }

    static func publicBlob(_ line: String) -> [UInt8] {
        Array(Data(base64Encoded: String(line.split(separator: " ")[1])) ?? Data())
    }

    @Test("a key stored now carries its public half and one index tag; an unusable key says why and is left out")
    func storedAtAdd() throws {
        try withVault { v in
            let kc = v.keychain
            let made = try kc.createKeyPair(.p256, [Schema.label: .string("signer")])
            let line = String(
                decoding: try kc.item(id: made.id, itemClass: .key, withData: true).data ?? [], as: UTF8.self)
            let stored = try kc.item(id: made.id, itemClass: .key, withData: false)
            #expect(stored[Self.sshPublicKey] == .data(Self.publicBlob(line)))
            #expect(stored[Self.sshUnusable] == nil)
            #expect(try Self.tagCount(v, id: made.id) == 1)
            // Not a key the agent can sign with: stored (extractable), with why, and no tag.
            let junk = try kc.add(
                .key, [Schema.label: .string("junk"), Schema.named("keyClass"): .number(1)], data: Array("junk".utf8))
            let junkItem = try kc.item(id: junk.id, itemClass: .key, withData: false)
            #expect(junkItem[Self.sshPublicKey] == nil && junkItem[Self.sshUnusable] != nil)
            #expect(try Self.tagCount(v, id: junk.id) == 0)
            let listing = try kc.sshIdentities()
            #expect(listing.identities.map(\.id) == [made.id])
            #expect(listing.skipped.map(\.id) == [junk.id])
            // A caller cannot set either half: both are derived.
            expectError(.readOnlyAttr) {
                _ = try kc.update(
                    Query(.key, [Schema.label: .string("signer")]), attributes: [Self.sshPublicKey: .data([1])])
            }
            // New data gives new halves: the junk key replaced by a real one is listed.
            try runTool("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", "c", "-f", "k"], in: v.dir)
            _ = try kc.update(
                Query(.key, [Schema.label: .string("junk")]), attributes: [:], data: try readFile(v.dir + "/k"))
            let pub = String(decoding: try readFile(v.dir + "/k.pub"), as: UTF8.self)
            let now = try kc.sshIdentities()
            #expect(Set(now.identities.map(\.id)) == [made.id, junk.id] && now.skipped.isEmpty)
            #expect(now.identities.first { $0.id == junk.id }?.publicBlob == Self.publicBlob(pub))
            #expect(try Self.tagCount(v, id: junk.id) == 1)
            #expect(try kc.verify(passphrase: try secure(testPassphrase)).isClean)
        }
    }

    @Test("listing reads no private key: a key whose data is damaged is still listed; signing finds only its own key")
    func listingDecryptsNothing() throws {
        try withVault { v in
            let kc = v.keychain
            let good = try kc.createKeyPair(.ed25519, [Schema.label: .string("good")])
            let bad = try kc.createKeyPair(.ed25519, [Schema.label: .string("bad")])
            let listed = try kc.sshIdentities().identities
            let goodBlob = try #require(listed.first { $0.id == good.id }).publicBlob
            let badBlob = try #require(listed.first { $0.id == bad.id }).publicBlob
            // A public key that is no key's: not found.
            expectError(.itemNotFound) { _ = try kc.sshKey(publicKey: Array(goodBlob.dropLast()) + [0]) }
            // The damage comes after this process checked the vault (as a running agent's would).
            #expect(kc.waitForIntegrityCheck() == nil)
            try v.raw().exec("UPDATE items SET data = x'00' || data WHERE id = \(bad.id)")
            let after = try kc.sshIdentities()
            #expect(Set(after.identities.map(\.id)) == [good.id, bad.id])
            // The good key is found by its public half and signs; the damaged one is never opened
            // for it, and fails only its own signature.
            #expect(try kc.sshKey(publicKey: goodBlob) == good.id)
            let data = Array("to sign".utf8)
            let signature = try kc.sshSign(keyID: good.id, publicKey: goodBlob, data: data, flags: 0)
            #expect(sshSignatureIsValid(publicKey: goodBlob, signature: signature, data: data))
            #expect(try kc.sshKey(publicKey: badBlob) == bad.id)
            expectError(.decode) { _ = try kc.sshSign(keyID: bad.id, publicKey: badBlob, data: data, flags: 0) }
            // Another key's public half for this id: not signed.
            expectError(.param) { _ = try kc.sshSign(keyID: good.id, publicKey: badBlob, data: data, flags: 0) }
        }
    }

    @Test("visibility and hosts: a key in another group or for other hosts is not found by its public half")
    func lookupChecks() throws {
        try withVault { v in
            let kc = v.keychain
            let both = Caller(accessGroups: ["default", "team"], authenticationUI: .fail)
            let team = try kc.createKeyPair(
                .ed25519, [Schema.label: .string("team"), Schema.accessGroup: .string("team")], caller: both)
            let hosted = try kc.createKeyPair(
                .ed25519, [Schema.label: .string("hosted"), Schema.named("sshHosts"): .string("github.com")])
            let all = try kc.sshIdentities(caller: both).identities
            let teamBlob = try #require(all.first { $0.id == team.id }).publicBlob
            let hostedBlob = try #require(all.first { $0.id == hosted.id }).publicBlob
            #expect(try kc.sshKey(publicKey: teamBlob, caller: both) == team.id)
            expectError(.itemNotFound) { _ = try kc.sshKey(publicKey: teamBlob, caller: .default) }
            #expect(try kc.sshIdentities(caller: .default).identities.map(\.id) == [hosted.id])
            #expect(try kc.sshKey(publicKey: hostedBlob, hostsAllow: { $0 == "github.com" }) == hosted.id)
            expectError(.itemNotFound) { _ = try kc.sshKey(publicKey: hostedBlob, hostsAllow: { $0.isEmpty }) }
            // A listing kept while nothing changed still follows a lock (no commit): no key then.
            #expect(try kc.sshIdentities(caller: both).identities.count == 2)
            kc.lock()
            #expect(try kc.sshIdentities(caller: both).identities.isEmpty)
        }
    }

    @Test("a key stored before the halves: filled in once at its first listing, nothing lost, verify clean")
    func filledInOnce() throws {
        try withVault { v in
            let kc = v.keychain
            let both = Caller(accessGroups: ["default", "team"], authenticationUI: .fail)
            let old = try kc.createKeyPair(.ed25519, [Schema.label: .string("old")])
            let other = try kc.createKeyPair(
                .p384, [Schema.label: .string("other"), Schema.accessGroup: .string("team")], caller: both)
            let before = try kc.item(id: old.id, itemClass: .key, withData: false)
            for id in [old.id, other.id] { try Self.stripHalves(kc, id: id) }
            #expect(try kc.item(id: old.id, itemClass: .key, withData: false)[Self.sshPublicKey] == nil)
            #expect(try Self.tagCount(v, id: old.id) == 0)
            #expect(try kc.verify(passphrase: try secure(testPassphrase)).isClean)
            // The default group's listing fills in its own key, not the team's.
            let listed = try kc.sshIdentities(caller: .default)
            #expect(listed.identities.map(\.id) == [old.id] && listed.skipped.isEmpty)
            let filled = try kc.item(id: old.id, itemClass: .key, withData: false)
            #expect(filled[Self.sshPublicKey] == before[Self.sshPublicKey])
            #expect(filled[Schema.modificationDate] == before[Schema.modificationDate])
            #expect(try Self.tagCount(v, id: old.id) == 1)
            #expect(try kc.item(id: other.id, itemClass: .key, withData: false, caller: both)[Self.sshPublicKey] == nil)
            // A sign request for a key not yet filled in fills it in and finds it.
            let otherBlob = try #require(
                try kc.sshIdentities(caller: both).identities.first { $0.id == other.id }
            ).publicBlob
            try Self.stripHalves(kc, id: other.id)
            #expect(try kc.sshKey(publicKey: otherBlob, caller: both) == other.id)
            #expect(try Self.tagCount(v, id: other.id) == 1)
            #expect(try kc.verify(passphrase: try secure(testPassphrase)).isClean)
            #expect(
                try kc.copyMatching(Query(.key, [:], matchLimit: .all, synchronizableAny: true), caller: both).count
                    == 2)
        }
    }

    @Test("the format-4 fixture's key pair: listed from its filled-in public half, signs, verify stays clean")
    func formatFourKey() throws {
        try withTempDir { dir throws in
            let (vault, deviceKey) = try FormatFourFixture.copy(into: dir)
            let kc = try Keychain.open(at: vault, deviceKeyPath: deviceKey)
            try kc.unlock(passphrase: try secure(FormatFourFixture.passphrase))
            let caller = FormatFourFixture.everyGroup
            #expect(try kc.item(id: 14, itemClass: .key, withData: false, caller: caller)[Self.sshPublicKey] == nil)
            let pub = String(
                decoding: try readFile(FormatFourFixture.directory + "/keypair.pub"), as: UTF8.self)
            let listing = try kc.sshIdentities(caller: caller)
            let identity = try #require(listing.identities.first)
            #expect(listing.identities.count == 1 && identity.id == 14)
            #expect(identity.publicBlob == Self.publicBlob(pub))
            let data = Array("fixture".utf8)
            let id = try kc.sshKey(publicKey: identity.publicBlob, caller: caller)
            let signature = try kc.sshSign(
                keyID: id, publicKey: identity.publicBlob, data: data, flags: 0, caller: caller)
            #expect(sshSignatureIsValid(publicKey: identity.publicBlob, signature: signature, data: data))
            let report = try kc.verify(passphrase: try secure(FormatFourFixture.passphrase))
            #expect(report.isClean, "\(report.failures) \(report.damaged)")
            try FormatFourFixture.expectContents(kc)
        }
    }
}
