import Foundation
import Testing
@_exported import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

// What the FUSE integration tests add to TestSupport (the sandbox, `withMount`, the runner,
// the mount table and the python prelude live there): CLI shorthands for items.

typealias FSSandbox = TestSandbox

/// The `keychainfs` binary under test.
let fsBinary = keychainfsBinary

extension TestSandbox {
    func ownDaemons() -> [pid_t] { daemons() }

    func addInternet(_ args: [String], _ secret: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let r = try cli(["add-internet-password"] + unlockArgs + args, stdin: Array(secret.utf8))
        #expect(r.status == 0, "add-internet-password failed: \(r.summary)", sourceLocation: sourceLocation)
    }

    /// `dump-keychain --json`: every item as (class, id, attributes).
    func dump(sourceLocation: SourceLocation = #_sourceLocation) throws -> [DumpedItem] {
        let r = try cli(["dump-keychain", "--json"] + unlockArgs)
        try #require(r.status == 0, "dump-keychain failed: \(r.summary)", sourceLocation: sourceLocation)
        let object = try JSONSerialization.jsonObject(with: Data(r.stdoutBytes))
        let array = try #require(
            object as? [[String: Any]], "dump --json is not an array", sourceLocation: sourceLocation)
        return array.map { d in
            let attrs = (d["attributes"] as? [String: Any]) ?? [:]
            var strings: [String: String] = [:]
            for (k, v) in attrs { strings[k] = "\(v)" }
            return DumpedItem(
                itemClass: d["class"] as? String ?? "?", id: (d["id"] as? NSNumber)?.int64Value ?? -1,
                attributes: strings)
        }
    }

    /// `find-generic-password -w`: the secret (without the newline find adds), nil if not found.
    func findGeneric(_ service: String, _ account: String) throws -> [UInt8]? {
        let r = try cli(["find-generic-password"] + unlockArgs + ["-s", service, "-a", account, "-w"])
        guard r.status == 0, r.stdoutBytes.last == 10 else { return nil }
        return Array(r.stdoutBytes.dropLast())
    }

    /// The secret in a short printable form for assertions: the text itself up to 200 bytes,
    /// else "<N bytes>"; "<not found>" when there is no such item.
    func secretSummary(_ service: String, _ account: String) throws -> String {
        guard let bytes = try findGeneric(service, account) else { return "<not found>" }
        return bytes.count <= 200 ? String(decoding: bytes, as: UTF8.self) : "<\(bytes.count) bytes>"
    }
}

struct DumpedItem {
    let itemClass: String
    let id: Int64
    let attributes: [String: String]
    subscript(_ name: String) -> String? { attributes[name] }
}

extension Array where Element == UInt8 {
    var hex: String { map { String(format: "%02x", $0) }.joined() }
}

extension String {
    var hexUTF8: String { Array(utf8).hex }
}
