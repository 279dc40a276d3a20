import Foundation
import Testing

@Suite("dump-keychain")
struct DumpKeychainTests {

    /// A vault with a generic and an internet password (one binary secret).
    private func populated() throws -> (Sandbox, [UInt8], [UInt8]) {
        let box = try Sandbox()
        try box.initVault()
        let text = Array(randomToken("dump-text-").utf8)
        let binary: [UInt8] = [0xff, 0x00] + Array(randomToken("dump-bin-").utf8) + [0x80, 0x0a]
        expectSuccess(
            try box.addGeneric(
                service: "dump.service", account: "dave", secret: text,
                extra: ["-l", "Dump Label", "-j", "dump comment"]))
        box.registerSecret(binary)
        expectSuccess(
            try box.run(
                ["add-internet-password"] + box.unlock
                    + ["-s", "dump.example.net", "-a", "erin", "-r", "https", "-P", "8443", "-p", "/x"],
                stdin: binary))
        return (box, text, binary)
    }

    @Test("text dump shows attributes and no secret; -d adds the data")
    func textDump() throws {
        _ = try requireBinary()
        let (box, text, _) = try populated()
        let r = try box.run(["dump-keychain"] + box.unlock)
        expectSuccess(r)
        let out = r.stdoutString
        #expect(out.contains("class: \"genp\""))
        #expect(out.contains("class: \"inet\""))
        #expect(out.contains("\"svce\"<blob>=\"dump.service\""))
        #expect(out.contains("\"acct\"<blob>=\"dave\""))
        #expect(out.contains("\"labl\"<blob>=\"Dump Label\""))
        #expect(out.contains("\"icmt\"<blob>=\"dump comment\""))
        #expect(out.contains("\"srvr\"<blob>=\"dump.example.net\""))
        #expect(out.contains("\"port\"<sint64>=\"8443\""))
        #expect(!out.contains("data:"))

        let d = try box.run(["dump-keychain", "-d"] + box.unlock)
        expectSuccess(d)
        #expect(d.stdoutString.contains("data:\n\"\(String(decoding: text, as: UTF8.self))\"\n"))
        // The binary secret is printed escaped, on one line.
        #expect(d.stdoutString.contains("data:\n\"\\377\\000dump-bin-"))
    }

    @Test("--json parses, has the expected keys, and carries data only with -d")
    func jsonDump() throws {
        _ = try requireBinary()
        let (box, text, binary) = try populated()
        let r = try box.run(["dump-keychain", "--json"] + box.unlock)
        expectSuccess(r)
        let items = try parseDump(r)
        #expect(items.count == 2)
        for item in items {
            #expect(Set(item.keys) == ["class", "id", "attributes"], "keys: \(item.keys.sorted())")
            #expect(item["id"] is NSNumber)
        }
        let generic = try #require(items.first { $0["class"] as? String == "genp" })
        let gAttributes = try #require(generic["attributes"] as? [String: Any])
        #expect(gAttributes["service"] as? String == "dump.service")
        #expect(gAttributes["account"] as? String == "dave")
        #expect(gAttributes["label"] as? String == "Dump Label")
        #expect(gAttributes["comment"] as? String == "dump comment")
        for key in ["creationDate", "modificationDate", "accessible", "accessGroup", "synchronizable"] {
            #expect(gAttributes[key] != nil, "genp attributes lack \(key)")
        }
        let internet = try #require(items.first { $0["class"] as? String == "inet" })
        let iAttributes = try #require(internet["attributes"] as? [String: Any])
        #expect(iAttributes["server"] as? String == "dump.example.net")
        #expect(iAttributes["account"] as? String == "erin")
        #expect((iAttributes["port"] as? NSNumber)?.intValue == 8443)
        #expect(iAttributes["path"] as? String == "/x")
        #expect(["https", "htps"].contains(iAttributes["protocol"] as? String ?? ""))

        let d = try box.run(["dump-keychain", "--json", "-d"] + box.unlock)
        expectSuccess(d)
        let withData = try parseDump(d)
        #expect(withData.count == 2)
        let g = try #require(withData.first { $0["class"] as? String == "genp" })
        #expect(g["data"] as? String == String(decoding: text, as: UTF8.self))
        let i = try #require(withData.first { $0["class"] as? String == "inet" })
        #expect(i["data"] == nil)
        let b64 = try #require(i["dataBase64"] as? String)
        #expect(Data(base64Encoded: b64).map { Array($0) } == binary)
    }

    @Test("an empty vault dumps nothing (text) and [] (JSON)")
    func emptyDump() throws {
        _ = try requireBinary()
        let box = try Sandbox()
        try box.initVault()
        let r = try box.run(["dump-keychain"] + box.unlock)
        expectSuccess(r)
        #expect(r.stdout.isEmpty)
        #expect(try parseDump(try box.run(["dump-keychain", "--json", "-d"] + box.unlock)).isEmpty)
    }
}
