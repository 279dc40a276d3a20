import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess

/// Unbuffered writes to stdout/stderr (Swift 6 forbids the C `stdout` global, and `print`
/// is fully buffered on a pipe, which loses output on exit paths).
enum Output {
    static func write(_ bytes: [UInt8]) { writeAll(1, bytes) }
    static func writeError(_ bytes: [UInt8]) { writeAll(2, bytes) }
    static func line(_ s: String) { write(Array((s + "\n").utf8)) }
    static func errorLine(_ s: String) { writeError(Array((s + "\n").utf8)) }

    private static func writeAll(_ fd: Int32, _ bytes: [UInt8]) { Terminal.writeAll(fd, bytes) }
}

/// Prints items in the manner of macOS `security find-generic-password`, and as JSON.
enum ItemPrinter {
    static func text(_ item: KeychainItem, vault: String) -> String {
        var out = "keychain: \(quoted(Array(vault.utf8)))\nclass: \"\(item.itemClass.rawValue)\"\nattributes:\n"
        for (attribute, value) in item.attributes.sorted(by: { $0.key.code < $1.key.code }) {
            out += "    \"\(attribute.code)\"<\(typeName(value))>=\(quoted(AttributeText.render(attribute, value)))\n"
        }
        return out
    }

    static func typeName(_ value: AttributeValue) -> String {
        switch value {
        case .string, .data, .accessibility, .accessControl: "blob"
        case .number: "sint64"
        case .bool: "bool"
        case .date: "timedate"
        }
    }

    /// Quoted, with anything unprintable escaped, so output stays one line per attribute.
    static func quoted(_ bytes: [UInt8]) -> String {
        var out = "\""
        for b in bytes {
            switch b {
            case UInt8(ascii: "\""): out += "\\\""
            case UInt8(ascii: "\\"): out += "\\\\"
            case 0x20..<0x7f: out.unicodeScalars.append(Unicode.Scalar(b))
            default: out += "\\" + String(b >> 6) + String(b >> 3 & 7) + String(b & 7)
            }
        }
        return out + "\""
    }

    /// `skipped`: items whose data was left out because reading it needs user presence; they
    /// carry `"dataSkipped": true` instead of `data`.
    static func json(_ items: [KeychainItem], includeData: Bool, skipped: Set<Int64> = []) -> String {
        let objects: [JSONValue] = items.map { item in
            var attributes: [String: JSONValue] = [:]
            for (attribute, value) in item.attributes {
                switch value {
                case .number(let n): attributes[attribute.name] = JSONValue(n)
                case .bool(let b): attributes[attribute.name] = .bool(b)
                default:
                    let bytes = AttributeText.render(attribute, value)
                    if let s = String(validating: bytes, as: UTF8.self) {
                        attributes[attribute.name] = .string(s)
                    } else {
                        attributes[attribute.name + "Base64"] = .string(Data(bytes).base64EncodedString())
                    }
                }
            }
            var object: [String: JSONValue] = [
                "class": .string(item.itemClass.rawValue), "id": JSONValue(item.id), "attributes": .object(attributes),
            ]
            if skipped.contains(item.id) { object["dataSkipped"] = true }
            if includeData, let data = item.data {
                if let s = String(validating: data, as: UTF8.self) {
                    object["data"] = .string(s)
                } else {
                    object["dataBase64"] = .string(Data(data).base64EncodedString())
                }
            }
            return .object(object)
        }
        return JSONText.text(.array(objects), pretty: true) + "\n"
    }
}
