import Foundation
@_spi(CallerRule) import Keychain
import KeychainAPI
import KeychainAccess
import KeychainCrypto
import KeychainService
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// The API socket in-process (issue 26: each face's requests against a session, without a mount
// or bus): a real vault in a temp directory, a real socket, the real client. Every verb gives
// the same answer through the socket as through a `KeychainSession` over the same vault, and
// each decision is one audit line.
@Suite("the API socket, in-process", .serialized)
struct APIServerTests {
    final class Fixture {
        let dir: String
        let keychain: Keychain
        let access: AccessLayer
        let server: APIServer
        let auditPath: String

        init() throws {
            dir = try makeTempDirectory("keychainfs-test-api")
            chmod(dir, 0o700)
            let passphrase = try SecureBytes(copying: Array("pw".utf8))
            keychain = try Keychain.create(
                at: dir + "/v.vault", passphrase: passphrase, parameters: .interactive, deviceKeyPath: dir + "/dk")
            try keychain.unlock(passphrase: passphrase)
            auditPath = dir + "/audit.log"
            access = AccessLayer(keychain: keychain, audit: try AuditLog(path: auditPath))
            server = try APIServer(keychain: keychain, access: access, directory: dir + "/run")
            server.start()
        }

        func client() throws -> ServiceClient {
            try #require(try ServiceClient.connect(vault: dir + "/v.vault", directory: dir + "/run"))
        }

        var auditLines: [Substring] {
            ((try? String(contentsOfFile: auditPath, encoding: .utf8)) ?? "").split(separator: "\n")
        }

        deinit {
            server.stop()
            try? FileManager.default.removeItem(atPath: dir)
        }
    }

    @Test("add, find, update, add-or-update and delete through the socket, each read back at once and audited once")
    func verbs() throws {
        let f = try Fixture()
        let client = try f.client()
        let service: Attributes = [Schema.service: .string("svc"), Schema.account: .string("a")]
        let added = try client.add(.genericPassword, service, data: Array("one".utf8))
        #expect(added.id > 0)
        let found = try client.find(Query(.genericPassword, service, returnData: true))
        #expect(found.data == Array("one".utf8) && found.id == added.id)
        // The same answer through a session over the service's own keychain.
        let session = KeychainSession(keychain: f.keychain, caller: Caller(), audit: nil, via: "test")
        #expect(try session.find(Query(.genericPassword, service, returnData: true)).data == Array("one".utf8))

        #expect(try client.update(Query(.genericPassword, service), attributes: [:], data: Array("two".utf8)) == 1)
        #expect(try client.find(Query(.genericPassword, service, returnData: true)).data == Array("two".utf8))
        let (_, addedAgain) = try client.addOrUpdate(.genericPassword, service, data: Array("three".utf8))
        #expect(!addedAgain)
        #expect(try client.item(id: added.id, itemClass: .genericPassword, withData: true).data == Array("three".utf8))
        #expect(throws: KeychainError.self) { try client.add(.genericPassword, service, data: [1]) }
        #expect(try client.delete(Query(.genericPassword, persistentReference: added.id)) == 1)
        do {
            _ = try client.find(Query(.genericPassword, service))
            Issue.record("found a deleted item")
        } catch let e as KeychainError {
            #expect(e.status == .itemNotFound)
        }
        let ops = f.auditLines.compactMap { line in line.split(separator: " ").first { $0.hasPrefix("op=") } }
        #expect(
            ops == [
                "op=create", "op=read", "op=update", "op=read", "op=update", "op=read", "op=create", "op=delete",
                "op=search",
            ],
            "\(f.auditLines.joined(separator: "\n"))")
        #expect(f.auditLines.allSatisfy { $0.contains("via=api") && $0.contains("vault=\(f.dir)/v.vault") })
    }

    @Test("a locked service answers errSecInteractionNotAllowed, never an empty result; unlock through the socket")
    func lockedAnswers() throws {
        let f = try Fixture()
        let client = try f.client()
        try client.add(.genericPassword, [Schema.service: .string("s")], data: [7])
        #expect(try client.lock().hasPrefix("locked"))
        do {
            _ = try client.find(Query(.genericPassword, [Schema.service: .string("s")], returnData: true))
            Issue.record("read while locked")
        } catch let e as KeychainError {
            #expect(e.status == .interactionNotAllowed)
        }
        #expect(throws: KeychainError.self) {
            try client.unlock(passphrase: try SecureBytes(copying: Array("no".utf8)))
        }
        #expect(try client.unlock(passphrase: try SecureBytes(copying: Array("pw".utf8))).hasPrefix("unlocked"))
        #expect(try client.find(Query(.genericPassword, [Schema.service: .string("s")], returnData: true)).data == [7])
    }

    @Test("a request without the connection's nonce is refused; the connection goes on")
    func nonceRequired() throws {
        let f = try Fixture()
        let path = ServiceLocator.socketPath(
            for: try #require(ServiceLocator.identity(ofVault: f.dir + "/v.vault")), directory: f.dir + "/run")
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in for (i, b) in path.utf8.enumerated() { raw[i] = b } }
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        try #require(rc == 0)
        let hello = try APICodec.decodeHello(try #require(try Framing.receive { read(fd, $0.baseAddress, $0.count) }))
        for nonce in [[UInt8](repeating: 0, count: 16), hello.nonce] {
            try Framing.send(fd, APICodec.encode(.status, nonce: nonce))
            let reply = try APICodec.decodeReply(
                try #require(try Framing.receive { read(fd, $0.baseAddress, $0.count) }))
            if nonce == hello.nonce {
                guard case .status = reply else { return #expect(Bool(false), "\(reply)") }
            } else {
                #expect(reply == .failure(.param, "request without the connection's nonce (sent before the greeting?)"))
            }
        }
    }
}
