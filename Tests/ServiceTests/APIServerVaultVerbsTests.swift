import Foundation
@_spi(CallerRule) import Keychain
import KeychainAPI
import KeychainAccess
import KeychainCrypto
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// The API's vault verbs in-process (APIServer+Vault.swift): an import's batch, create-keypair,
// the access policy and backup, through the real socket and client, answered as a
// `KeychainSession` over the same vault answers them.
@Suite("the API socket's vault verbs, in-process", .serialized)
struct APIServerVaultVerbsTests {
    typealias Fixture = APIServerTests.Fixture

    static func item(_ account: String, _ secret: String) -> NewItem {
        NewItem(
            .genericPassword, [Schema.service: .string("batch"), Schema.account: .string(account)],
            data: Array(secret.utf8))
    }

    @Test("storeBatch: all stored, or a refusal names each refused item as the core does and stores nothing")
    func storeBatch() throws {
        let f = try Fixture()
        let client = try f.client()
        #expect(
            try client.storeBatch([Self.item("a", "1"), Self.item("b", "2")], updateExisting: false) == [true, true])
        // b exists: refused (its place and status, as the core says it); c is not stored.
        let batch = [Self.item("c", "3"), Self.item("b", "x")]
        var viaSocket: [(index: Int, error: KeychainError)] = []
        do { _ = try client.storeBatch(batch, updateExisting: false) } catch let e as BatchRefused {
            viaSocket = e.refusals
        }
        var direct: [(index: Int, error: KeychainError)] = []
        let session = KeychainSession(keychain: f.keychain, caller: Caller(), audit: nil, via: "test")
        do { _ = try session.storeBatch(batch, updateExisting: false) } catch let e as BatchRefused {
            direct = e.refusals
        }
        #expect(viaSocket.map(\.index) == [1] && viaSocket.map(\.error.status) == [.duplicateItem])
        #expect(
            viaSocket.map(\.index) == direct.map(\.index)
                && viaSocket.map(\.error.message) == direct.map(\.error.message))
        let all = try client.copyMatching(Query(.genericPassword, [Schema.service: .string("batch")], matchLimit: .all))
        #expect(all.count == 2, "a refused batch stored something: \(all.count) items")
        // With updateExisting: c added, b updated.
        #expect(try client.storeBatch(batch, updateExisting: true) == [true, false])
        let b = try client.find(
            Query(.genericPassword, [Schema.service: .string("batch"), Schema.account: .string("b")], returnData: true))
        #expect(b.data == Array("x".utf8))
    }

    @Test("setAccessPolicy: a wrong passphrase is errSecAuthFailed; a right one is read back and decides at once")
    func accessPolicy() throws {
        let f = try Fixture()
        let client = try f.client()
        #expect(try client.accessPolicy().isEmpty)
        // The access layer reads the (empty) policy now, and would keep it for a second.
        #expect(try f.access.holderCaller(nil).accessGroups == [Caller.defaultAccessGroup])
        var policy = AccessPolicy()
        policy.add(group: "team", executable: "/usr/bin/cat")
        do {
            try client.setAccessPolicy(policy, passphrase: try SecureBytes(copying: Array("wrong".utf8)))
            Issue.record("a wrong passphrase changed the policy")
        } catch let e as KeychainError {
            #expect(e.status == .authFailed)
        }
        #expect(try client.accessPolicy().isEmpty)
        try client.setAccessPolicy(policy, passphrase: try SecureBytes(copying: Array("pw".utf8)))
        #expect(try client.accessPolicy() == policy)
        #expect(try f.keychain.accessPolicy() == policy)
        // At once: the service's cached policy was dropped.
        #expect(try f.access.holderCaller(nil).accessGroups == [Caller.defaultAccessGroup, "team"])
    }

    @Test(
        "createKeyPair answers the key and its OpenSSH public key; backup writes a checked 0600 copy, never over a file"
    )
    func keyPairAndBackup() throws {
        let f = try Fixture()
        let client = try f.client()
        let (item, publicKey) = try client.createKeyPair(.ed25519, [Schema.label: .string("kp")])
        #expect(publicKey.hasPrefix("ssh-ed25519 "), "\(publicKey)")
        // A non-extractable key reads as its public key: the same key the reply named.
        let read = String(
            decoding: try client.item(id: item.id, itemClass: .key, withData: true).data ?? [], as: UTF8.self)
        #expect(read.split(separator: " ").prefix(2) == publicKey.split(separator: " ").prefix(2), "\(read)")
        #expect(try client.identities().isEmpty)

        let copy = f.dir + "/copy.vault"
        let summary = try client.backup(to: copy)
        #expect(summary.items == 1 && summary.format >= 4, "\(summary)")
        var st = stat()
        #expect(stat(copy, &st) == 0 && st.st_mode & 0o777 == 0o600)
        do {
            _ = try client.backup(to: copy)
            Issue.record("a backup overwrote a file")
        } catch let e as KeychainError {
            #expect(e.status == .duplicateKeychain)
        }
        // A relative path reaches the service only made absolute (the client's directory).
        do {
            _ = try client.call(.backup(destination: "relative.vault"))
            Issue.record("the service took a relative destination")
        } catch let e as KeychainError {
            #expect(e.status == .param)
        }
    }
}
