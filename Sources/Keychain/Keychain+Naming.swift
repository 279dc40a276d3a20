import FoundationEssentials
import Glibc

extension Keychain {
    // MARK: Naming items in messages

    /// A secret-free one-line name: class and the attributes that identify the item.
    public static func describe(_ itemClass: ItemClass, _ attributes: Attributes, id: Int64? = nil) -> String {
        let shown: [Attribute]
        switch itemClass {
        case .genericPassword: shown = [Schema.service, Schema.account]
        case .internetPassword:
            shown = [Schema.server, Schema.account, Schema.protocolAttribute, Schema.port, Schema.path]
        default: shown = [Schema.label]
        }
        var parts = [itemClass.rawValue]
        for attribute in shown {
            switch attributes[attribute] {
            case .string(let s)?:
                if !s.isEmpty || attribute == Schema.account { parts.append("\(attribute.name)=\(quoted(s))") }
            case .number(let n)?: if n != 0 { parts.append("\(attribute.name)=\(n)") }
            default: break
            }
        }
        if let id { parts.append("(item \(id))") }
        return parts.joined(separator: " ")
    }

    static func describe(_ query: Query) -> String {
        query.persistentReference.map { "item \($0)" } ?? describe(query.itemClass, query.attributes)
    }

    /// Quotes a name for a message, escaping control characters so a message stays one line.
    static func quoted(_ s: String) -> String {
        var out = "\""
        for scalar in s.unicodeScalars.prefix(200) {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case _ where scalar.value < 0x20 || scalar.value == 0x7f:
                out += "\\x" + AttributeText.hex(scalar.value, width: 2)
            default: out.unicodeScalars.append(scalar)
            }
        }
        if s.unicodeScalars.count > 200 { out += "…" }
        return out + "\""
    }
}
