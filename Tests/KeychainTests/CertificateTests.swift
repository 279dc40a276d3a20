import Foundation
@_spi(CallerRule) import Keychain
import Testing

/// Certificates, keys and identities in the core, with material made by the real openssl
/// and ssh-keygen in each test.
/// Runs a tool and fails the test on a non-zero exit.
func runTool(_ tool: String, _ args: [String], in dir: String) throws {
    let p = try runProcess(tool, args, env: childEnvironment(), cwd: dir)
    try #require(p.status == 0, "\(tool) \(args.joined(separator: " ")) failed")
}

func readFile(_ path: String) throws -> [UInt8] { Array(try Data(contentsOf: URL(fileURLWithPath: path))) }

/// A self-signed certificate and its key, made by openssl: (cert PEM, key PEM).
func makeCertificate(_ dir: String, name: String, keyType: String = "ed25519") throws -> ([UInt8], [UInt8]) {
    let curve = keyType == "ec" ? ["-pkeyopt", "ec_paramgen_curve:prime256v1"] : []
    try runTool(
        "/usr/bin/openssl",
        ["req", "-x509", "-newkey", keyType] + curve + [
            "-keyout", "\(name).key", "-out", "\(name).crt",
            "-days", "2", "-nodes", "-subj", "/CN=\(name)",
        ], in: dir)
    return (try readFile("\(dir)/\(name).crt"), try readFile("\(dir)/\(name).key"))
}

@Suite("Certificates, keys and identities")
struct CertificateTests {
    @Test("cert: issuer and serialNumber (and access group, sync) are the key; the subject is not")
    func certificateKey() throws {
        try withVault { v in
            let kc = v.keychain
            // Two certificates with the same subject (self-signed: same issuer) differ in serial.
            let (a, _) = try makeCertificate(v.dir, name: "same")
            try FileManager.default.removeItem(atPath: v.dir + "/same.crt")
            let (b, _) = try makeCertificate(v.dir, name: "same")
            try kc.add(.certificate, [Schema.label: .string("a")], data: a)
            try kc.add(.certificate, [Schema.label: .string("b")], data: b)
            expectError(.duplicateItem) { try kc.add(.certificate, [Schema.label: .string("c")], data: a) }
            let caller = Caller(accessGroups: ["default", "g2"])
            try kc.add(.certificate, [Schema.accessGroup: .string("g2")], data: a, caller: caller)
            try kc.add(.certificate, [Schema.synchronizable: .bool(true)], data: a, caller: caller)
            expectError(.duplicateItem) {
                try kc.add(.certificate, [Schema.accessGroup: .string("g2")], data: a, caller: caller)
            }
            #expect(try kc.itemCount() == 4)
        }
    }

    @Test(
        "a PEM certificate is stored as DER with Apple's derived attributes; label defaults to the CN",
        arguments: ["ed25519", "rsa:2048", "ec:prime256v1"])
    func derivedAttributes(keyType: String) throws {
        try withVault { v in
            let (pem, _) = try makeCertificate(
                v.dir, name: "host.example", keyType: keyType == "ec:prime256v1" ? "ec" : keyType)
            let item = try v.keychain.add(.certificate, [:], data: pem)
            #expect(item.string(Schema.label) == "host.example")
            let found = try v.keychain.find(
                Query(.certificate, [Schema.label: .string("host.example")], returnData: true))
            let der = try #require(found.data)
            #expect(der.first == 0x30, "stored as DER")
            #expect(CertificateData.pem(der) == pem, "PEM round trip is exact")
            #expect(found[Schema.named("certificateType")] == .number(3))
            #expect(found[Schema.named("certificateEncoding")] == .number(3))
            for name in ["issuer", "serialNumber", "subject", "publicKeyHash"] {
                guard case .data(let d)? = found[Schema.named(name)] else { Issue.record("\(name) missing"); continue }
                #expect(!d.isEmpty, "\(name) is empty")
            }
            guard case .data(let pkhh)? = found[Schema.named("publicKeyHash")] else { return }
            #expect(pkhh.count == 20, "publicKeyHash is a SHA-1")
        }
    }

    @Test("the same certificate twice, under another label, is errSecDuplicateItem")
    func duplicate() throws {
        try withVault { v in
            let (pem, _) = try makeCertificate(v.dir, name: "dup", keyType: "ed25519")
            try v.keychain.add(.certificate, [Schema.label: .string("one")], data: pem)
            expectError(.duplicateItem) { try v.keychain.add(.certificate, [Schema.label: .string("two")], data: pem) }
            #expect(try v.keychain.copyMatching(Query(.certificate, matchLimit: .all)).count == 1)
        }
    }

    @Test(
        "data that is not a certificate is errSecParam and nothing is stored",
        arguments: [
            Array("hello".utf8), Array("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".utf8),
            [0x30, 0x03, 0x02, 0x01, 0x01], [],
        ])
    func malformed(data: [UInt8]) throws {
        try withVault { v in
            expectError(.param, containing: ["not a certificate"]) {
                try v.keychain.add(.certificate, [Schema.label: .string("x")], data: data)
            }
            expectError(.itemNotFound) { try v.keychain.copyMatching(Query(.certificate, matchLimit: .all)) }
        }
    }

    @Test("derived certificate attributes are read-only to updates")
    func derivedReadOnly() throws {
        try withVault { v in
            let (pem, _) = try makeCertificate(v.dir, name: "ro", keyType: "ed25519")
            try v.keychain.add(.certificate, [:], data: pem)
            expectError(.readOnlyAttr) {
                try v.keychain.update(
                    Query(.certificate, [Schema.label: .string("ro")]),
                    attributes: [Schema.named("serialNumber"): .data([1])])
            }
        }
    }

    @Test(
        "private keys get keyClass, keyType, keySizeInBits and applicationLabel",
        arguments: [
            ("ed25519", Int64?.none, Int64(256)), ("rsa:2048", Int64?.some(42), Int64(2048)),
            ("ec", Int64?.some(73), Int64(256)),
        ])
    func keyAttributes(keyType: String, expectedType: Int64?, bits: Int64) throws {
        try withVault { v in
            let (_, key) = try makeCertificate(v.dir, name: "k", keyType: keyType == "ec" ? "ec" : keyType)
            let item = try v.keychain.add(.key, [Schema.label: .string("k")], data: key)
            #expect(item[Schema.named("keyClass")] == .number(1))
            #expect(item[Schema.named("keySizeInBits")] == .number(bits))
            if let expectedType { #expect(item[Schema.named("keyType")] == .number(expectedType)) }
            guard case .data(let label)? = item[Schema.named("applicationLabel")] else {
                Issue.record("no applicationLabel"); return
            }
            #expect(label.count == 20)
            let back = try v.keychain.find(Query(.key, [Schema.label: .string("k")], returnData: true))
            #expect(back.data == key, "the bytes written are the bytes read")
        }
    }

    @Test("an OpenSSH private key's attributes come from its public half")
    func openSSHKey() throws {
        try withVault { v in
            try runTool("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", "id"], in: v.dir)
            let key = try readFile(v.dir + "/id")
            let item = try v.keychain.add(.key, [Schema.label: .string("id")], data: key)
            #expect(item[Schema.named("keyClass")] == .number(1))
            #expect(item[Schema.named("keySizeInBits")] == .number(256))
        }
    }

    @Test(
        "identities: a certificate joins its private key; a key without a certificate and a certificate without a key are no identity"
    )
    func identities() throws {
        try withVault { v in
            let (certA, keyA) = try makeCertificate(v.dir, name: "a", keyType: "rsa:2048")
            let (certB, _) = try makeCertificate(v.dir, name: "b", keyType: "ed25519")
            let (_, keyC) = try makeCertificate(v.dir, name: "c", keyType: "ec")
            try v.keychain.add(.certificate, [:], data: certA)
            try v.keychain.add(.certificate, [:], data: certB)
            try v.keychain.add(
                .key, [Schema.label: .string("a"), Schema.named("applicationTag"): .data([1])], data: keyA)
            try v.keychain.add(
                .key, [Schema.label: .string("c"), Schema.named("applicationTag"): .data([2])], data: keyC)
            let ids = try v.keychain.identities()
            #expect(ids.map(\.label) == ["a"])
            let full = try v.keychain.identity(certificateID: ids[0].id, withData: true)
            #expect(full.key.data == keyA)
            #expect(full.certificate.data.map(CertificateData.pem) == certA)
        }
    }
}
