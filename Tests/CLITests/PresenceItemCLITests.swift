import Foundation
import Testing

/// Issue 13, presence items on the CLI without a terminal (AccessTests' CLIPresenceTests has the
/// terminal): reading such an item's data is errSecInteractionNotAllowed (exit 36), and
/// `dump-keychain -d` prints every other item in full, this one without its data, and names it
/// on stderr.
@Suite("presence items on the CLI")
struct PresenceItemCLITests {
    /// A vault with a plain item and a userPresence item.
    static func vault() throws -> (box: Sandbox, plain: [UInt8], guarded: [UInt8]) {
        let box = try Sandbox()
        try box.initVault()
        let plain = Array(randomToken("plain-").utf8), guarded = Array(randomToken("guarded-").utf8)
        expectSuccess(try box.addGeneric(service: "plain", account: "me", secret: plain))
        expectSuccess(
            try box.addGeneric(
                service: "guarded", account: "me", secret: guarded, extra: ["--access-control", "userPresence"]))
        return (box, plain, guarded)
    }

    @Test("find -w of a presence item: exit 36 (errSecInteractionNotAllowed), one line, no secret")
    func findPresenceItem() throws {
        let (box, plain, guarded) = try Self.vault()
        let r = try box.run(["find-generic-password", "-s", "guarded", "-w"] + box.unlock)
        expectError(r, 36, mentions: ["user presence", "service=\"guarded\""])
        #expect(!contains(r.stdout + r.stderrBytes, guarded))
        // Its attributes need no presence; the other item reads as ever.
        expectSuccess(try box.run(["find-generic-password", "-s", "guarded"] + box.unlock))
        #expect(try box.findGenericSecret(service: "plain").1 == plain)
    }

    @Test("dump-keychain -d: the rest in full, the presence item without data, named on stderr; exit 0")
    func dumpSkipsPresenceData() throws {
        let (box, plain, guarded) = try Self.vault()
        let r = try box.run(["dump-keychain", "-d"] + box.unlock)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(contains(r.stdout, plain), "the readable item's data is missing")
        #expect(!contains(r.stdout + r.stderrBytes, guarded), "the presence item's data was printed")
        #expect(r.stdoutString.contains("\"svce\"<blob>=\"guarded\""), "the presence item's attributes are missing")
        #expect(r.stdoutString.components(separatedBy: "data:\n").count == 2, "one data block: \(r.stdoutString)")
        #expect(
            r.stderrLines.count == 1
                && r.stderrLines[0].hasPrefix("keychainfs: skipped the data of genp service=\"guarded\"")
                && r.stderr.contains("errSecInteractionNotAllowed"), "\(r.stderr)")

        let json = try box.run(["dump-keychain", "-d", "--json"] + box.unlock)
        #expect(json.status == 0 && json.stderrLines.count == 1, "\(json.stderr)")
        let objects = try parseDump(json)
        let byService = Dictionary(
            uniqueKeysWithValues: objects.map {
                (($0["attributes"] as? [String: Any])?["service"] as? String ?? "", $0)
            })
        #expect(byService["plain"]?["data"] as? String == String(decoding: plain, as: UTF8.self))
        #expect(byService["plain"]?["dataSkipped"] == nil)
        #expect(byService["guarded"]?["dataSkipped"] as? Bool == true)
        #expect(byService["guarded"]?["data"] == nil && byService["guarded"]?["dataBase64"] == nil)

        // Without -d nothing is skipped and nothing is said.
        let attributesOnly = try box.run(["dump-keychain"] + box.unlock)
        expectSuccess(attributesOnly)
        #expect(attributesOnly.stderr.isEmpty)
    }
}
