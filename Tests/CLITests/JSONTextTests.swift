import Foundation
import Testing

@testable import keychainfs

/// Issue 28: `--json` is written by `JSONText` since the product dropped Foundation; it must give
/// the bytes `JSONSerialization` gave (`.sortedKeys`, with `.prettyPrinted` or
/// `.withoutEscapingSlashes` where the CLI asked for them). Foundation is the oracle here.
@Suite("JSONText writes what JSONSerialization wrote")
struct JSONTextTests {
    static func foundation(_ value: JSONValue) -> Any {
        switch value {
        case .string(let s): s
        case .int(let n): n
        case .bool(let b): b
        case .null: NSNull()
        case .array(let a): a.map(foundation)
        case .object(let o): o.mapValues(foundation)
        }
    }

    static func oracle(_ value: JSONValue, _ options: JSONSerialization.WritingOptions) -> String {
        let data = try! JSONSerialization.data(withJSONObject: foundation(value), options: options.union(.sortedKeys))
        return String(decoding: data, as: UTF8.self)
    }

    static func random(_ rng: inout some RandomNumberGenerator, depth: Int) -> JSONValue {
        let keys = [
            "a", "B", "accessGroup", "account", "attributes", "class", "data", "dataBase64", "dataSkipped", "id",
            "labelBase64", "label", "x10", "x9", "X2", "lastPull", "lastPush", "oldPath", "path", "seq", "ok",
        ]
        let strings = [
            "", "plain", "a/b", "quote\"back\\slash", "tab\tnl\nnul\u{0}\u{1f}\u{8}\u{c}\r", "é ü 🔑", "\u{7f}",
        ]
        switch Int.random(in: 0..<(depth > 2 ? 4 : 6), using: &rng) {
        case 0: return .string(strings.randomElement(using: &rng)!)
        case 1:
            return .int(Int64.random(in: Int64.min...Int64.max, using: &rng) >> Int64.random(in: 0...63, using: &rng))
        case 2: return .bool(Bool.random(using: &rng))
        case 3: return .null
        case 4: return .array((0..<Int.random(in: 0...3, using: &rng)).map { _ in random(&rng, depth: depth + 1) })
        default:
            var object: [String: JSONValue] = [:]
            for _ in 0..<Int.random(in: 0...6, using: &rng) {
                object[keys.randomElement(using: &rng)!] = random(&rng, depth: depth + 1)
            }
            return .object(object)
        }
    }

    @Test("random objects and arrays, compact, pretty and without escaped slashes")
    func randomValues() {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<3000 {
            let value: JSONValue =
                Bool.random(using: &rng)
                ? .array((0..<Int.random(in: 0...3, using: &rng)).map { _ in Self.random(&rng, depth: 1) })
                : .object(["k": Self.random(&rng, depth: 1), "attributes": Self.random(&rng, depth: 1)])
            #expect(JSONText.text(value) == Self.oracle(value, []))
            #expect(JSONText.text(value, pretty: true) == Self.oracle(value, [.prettyPrinted]))
            #expect(JSONText.text(value, escapingSlashes: false) == Self.oracle(value, [.withoutEscapingSlashes]))
        }
    }

    @Test("empty containers")
    func empty() {
        for value: JSONValue in [[], [:], ["a": [], "b": [:]], [[], [:]]] {
            #expect(JSONText.text(value) == Self.oracle(value, []))
            #expect(JSONText.text(value, pretty: true) == Self.oracle(value, [.prettyPrinted]))
        }
    }
}
