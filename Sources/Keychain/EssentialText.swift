/// What the product used of Foundation's string methods that FoundationEssentials lacks (issue
/// 28): `trimmingCharacters(in: .whitespaces)` and `.whitespacesAndNewlines` (the same sets,
/// trimmed by Unicode scalar), case-insensitive comparison and percent-decoding.
extension StringProtocol {
    /// Without leading and trailing whitespace: Unicode's Zs (space separators) and tab.
    public func trimmingWhitespace() -> String { trimming(Self.isWhitespace) }

    /// Without leading and trailing whitespace and newlines: Zs, tab, U+000A–U+000D, U+0085,
    /// U+2028 and U+2029.
    public func trimmingWhitespaceAndNewlines() -> String {
        trimming {
            Self.isWhitespace($0) || (0x0A...0x0D).contains($0.value) || [0x85, 0x2028, 0x2029].contains($0.value)
        }
    }

    /// Without the leading and trailing scalars `drop` matches.
    public func trimming(_ drop: (Unicode.Scalar) -> Bool) -> String {
        let scalars = String(self).unicodeScalars
        guard let first = scalars.firstIndex(where: { !drop($0) }), let last = scalars.lastIndex(where: { !drop($0) })
        else { return "" }
        return String(Substring(scalars[first...last]))
    }

    static func isWhitespace(_ scalar: Unicode.Scalar) -> Bool {
        scalar == "\t" || scalar.properties.generalCategory == .spaceSeparator
    }

    /// Case-folded scalar by scalar (upper-cased, then lower-cased: `ß` and `SS` both fold to
    /// `ss`, `ς` and `Σ` to `σ`), with no normalisation; ASCII without a table.
    public func caseFolded() -> String {
        if utf8.allSatisfy({ $0 < 0x80 }) { return String(self).lowercased() }
        var out = String.UnicodeScalarView()
        for scalar in unicodeScalars {
            for upper in scalar.properties.uppercaseMapping.unicodeScalars {
                out.append(contentsOf: upper.properties.lowercaseMapping.unicodeScalars)
            }
        }
        return String(out)
    }

    /// Whether the two are the same text ignoring case, scalar by scalar (Foundation's
    /// `compare(_:options: [.caseInsensitive, .literal]) == .orderedSame`).
    public func equalsIgnoringCase(_ other: some StringProtocol) -> Bool {
        caseFolded().unicodeScalars.elementsEqual(other.caseFolded().unicodeScalars)
    }

    /// Whether `other` is in this text ignoring case (what `localizedCaseInsensitiveContains`
    /// was used for: a label filter); never for an empty `other`, as Foundation.
    public func containsIgnoringCase(_ other: some StringProtocol) -> Bool {
        !other.isEmpty && caseFolded().contains(other.caseFolded())
    }

    /// Percent-decoded (Foundation's `removingPercentEncoding`): each `%` and two hex digits a
    /// byte, other bytes themselves; nil for a `%` without two hex digits or bytes that are not
    /// UTF-8. `lowercaseHex: false` refuses `%2f` (the mount's names: only `%2F` is canonical).
    public func percentDecoded(lowercaseHex: Bool = true) -> String? {
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
            case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
            case UInt8(ascii: "a")...UInt8(ascii: "f") where lowercaseHex: c - UInt8(ascii: "a") + 10
            default: nil
            }
        }
        let bytes = Array(utf8)
        var out: [UInt8] = []
        var i = 0
        while i < bytes.count {
            if bytes[i] == UInt8(ascii: "%") {
                guard i + 2 < bytes.count, let hi = nibble(bytes[i + 1]), let lo = nibble(bytes[i + 2]) else {
                    return nil
                }
                out.append(hi << 4 | lo)
                i += 3
            } else {
                out.append(bytes[i])
                i += 1
            }
        }
        return String(validating: out, as: UTF8.self)
    }
}
