/// What the product used of Foundation's string methods that FoundationEssentials lacks (issue
/// 28): `trimmingCharacters(in: .whitespaces)` and `.whitespacesAndNewlines` (the same sets,
/// trimmed by Unicode scalar), and case-insensitive comparison.
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
}
