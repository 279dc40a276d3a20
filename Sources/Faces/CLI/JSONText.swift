/// A JSON value the CLI prints (`--json`): what it gave Foundation's `JSONSerialization`
/// before issue 28 dropped Foundation from the product.
enum JSONValue: Equatable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral
{
    case string(String)
    case int(Int64)
    case bool(Bool)
    case null
    case array([JSONValue])
    case object([String: JSONValue])

    init(stringLiteral value: String) { self = .string(value) }
    init(integerLiteral value: Int64) { self = .int(value) }
    init(booleanLiteral value: Bool) { self = .bool(value) }
    init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { $1 }))
    }
    init(nilLiteral: ()) { self = .null }
    init(_ value: some BinaryInteger) { self = .int(Int64(value)) }
    init(_ value: String?) { self = value.map { .string($0) } ?? .null }
}

/// JSON text exactly as `JSONSerialization.data(withJSONObject:options:)` wrote it with
/// `.sortedKeys` (swift-corelibs-foundation's writer), so scripts reading `--json` see the
/// same bytes: keys in its order (case-insensitive, digit runs by value), `/` escaped as `\/`
/// unless `escapingSlashes` is false, control characters as `\uXXXX` (lower-case hex) but for
/// `\b \f \n \r \t`; pretty: two spaces an indent and `"key" : value`.
enum JSONText {
    static func text(_ value: JSONValue, pretty: Bool = false, escapingSlashes: Bool = true) -> String {
        var out = ""
        write(value, to: &out, indent: pretty ? 0 : nil, escapingSlashes: escapingSlashes)
        return out
    }

    private static func write(_ value: JSONValue, to out: inout String, indent: Int?, escapingSlashes: Bool) {
        switch value {
        case .string(let s): string(s, to: &out, escapingSlashes: escapingSlashes)
        case .int(let n): out += String(n)
        case .bool(let b): out += b ? "true" : "false"
        case .null: out += "null"
        case .array(let elements):
            out += "["
            let inner = indent.map { $0 + 2 }
            if inner != nil { out += "\n" }
            for (i, element) in elements.enumerated() {
                if i > 0 { out += inner == nil ? "," : ",\n" }
                if let inner { out += String(repeating: " ", count: inner) }
                write(element, to: &out, indent: inner, escapingSlashes: escapingSlashes)
            }
            if let indent { out += "\n" + String(repeating: " ", count: indent) }
            out += "]"
        case .object(let members):
            out += "{"
            let inner = indent.map { $0 + 2 }
            if let inner {
                out += "\n"
                if !members.isEmpty { out += String(repeating: " ", count: inner) }
            }
            for (i, (key, element)) in members.sorted(by: { keyOrder($0.key, $1.key) }).enumerated() {
                if i > 0 { out += inner.map { ",\n" + String(repeating: " ", count: $0) } ?? "," }
                string(key, to: &out, escapingSlashes: escapingSlashes)
                out += indent == nil ? ":" : " : "
                write(element, to: &out, indent: inner, escapingSlashes: escapingSlashes)
            }
            if let indent { out += "\n" + String(repeating: " ", count: indent) }
            out += "}"
        }
    }

    private static func string(_ s: String, to out: inout String, escapingSlashes: Bool) {
        out += "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "/": out += escapingSlashes ? "\\/" : "/"
            case "\u{8}": out += "\\b"
            case "\u{c}": out += "\\f"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\u{0}"..."\u{f}": out += "\\u000" + String(scalar.value, radix: 16)
            case "\u{10}"..."\u{1f}": out += "\\u00" + String(scalar.value, radix: 16)
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
    }

    /// `.sortedKeys`' order: `compare(_:options: [.numeric, .caseInsensitive, .forcedOrdering])`
    /// for the keys the CLI writes (letters and digits): letters case-folded, a run of digits by
    /// its value, a prefix first; keys equal so compared by their scalars.
    static func keyOrder(_ a: String, _ b: String) -> Bool {
        let x = Array(a.unicodeScalars), y = Array(b.unicodeScalars)
        func isDigit(_ s: Unicode.Scalar) -> Bool { s >= "0" && s <= "9" }
        func folded(_ s: Unicode.Scalar) -> UInt32 { s >= "A" && s <= "Z" ? s.value + 32 : s.value }
        var i = 0, j = 0
        while i < x.count && j < y.count {
            if isDigit(x[i]) && isDigit(y[j]) {
                var ei = i, ej = j
                while ei < x.count && isDigit(x[ei]) { ei += 1 }
                while ej < y.count && isDigit(y[ej]) { ej += 1 }
                let u = x[i..<ei].drop { $0 == "0" }, v = y[j..<ej].drop { $0 == "0" }
                if u.count != v.count { return u.count < v.count }
                if let k = zip(u, v).first(where: { $0 != $1 }) { return k.0.value < k.1.value }
                (i, j) = (ei, ej)
                continue
            }
            if folded(x[i]) != folded(y[j]) { return folded(x[i]) < folded(y[j]) }
            i += 1
            j += 1
        }
        if (x.count - i) != (y.count - j) { return (x.count - i) < (y.count - j) }
        return x.lexicographicallyPrecedes(y) { $0.value < $1.value }
    }
}
