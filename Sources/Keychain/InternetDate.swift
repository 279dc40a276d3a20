import FoundationEssentials

/// RFC 3339 date-times in UTC, written and read as ICU's `ISO8601DateFormatter` did
/// (`.withInternetDateTime`), without FoundationInternationalization (issue 28): the same text
/// byte for byte and the same instants, which users' scripts and stored items depend on. ICU's
/// calendar is Gregorian from 1582-10-15 and Julian before, and a date keeps milliseconds.
enum InternetDate {
    /// The Julian day number of 1582-10-15, the first Gregorian day.
    static let gregorianCutover: Int64 = 2_299_161
    /// The Julian day number of 1970-01-01.
    static let unixEpoch: Int64 = 2_440_588

    /// `2026-01-31T12:00:00Z`: the second of the instant rounded to the millisecond, a year of
    /// four digits or more (of its era, before year 1).
    static func format(_ date: Date) -> String {
        let milliseconds = ((date.timeIntervalSinceReferenceDate + 978_307_200) * 1000 + 0.5).rounded(.down)
        // ±2^50 ms is ±35,000 years: past that (a date no one writes) the text is clamped.
        let ms = Int64(max(-0x4_0000_0000_0000, min(0x4_0000_0000_0000, milliseconds.isNaN ? 0 : milliseconds)))
        let seconds = floorDivide(ms, 1000)
        let days = floorDivide(seconds, 86400)
        let time = seconds - days * 86400
        let (year, month, day) = civil(julianDay: days + unixEpoch)
        var out = digits(year <= 0 ? 1 - year : year, 4) + "-" + digits(month, 2) + "-" + digits(day, 2)
        out += "T" + digits(time / 3600, 2) + ":" + digits(time / 60 % 60, 2) + ":" + digits(time % 60, 2) + "Z"
        return out
    }

    /// The instant of a date-time `AttributeText.internetDateTime` accepted (fields in range,
    /// `T` and `Z` upper-case): its fraction kept to the millisecond (truncated), its offset
    /// applied.
    static func parse(_ text: String) -> Date? {
        let b = Array(text.utf8)
        func number(_ from: Int, _ count: Int) -> Int64? {
            guard from >= 0, from + count <= b.count, b[from..<(from + count)].allSatisfy({ $0 >= 0x30 && $0 <= 0x39 })
            else { return nil }
            return b[from..<(from + count)].reduce(0) { $0 * 10 + Int64($1 - 0x30) }
        }
        var y = 0
        while y < b.count, b[y] >= 0x30 && b[y] <= 0x39 { y += 1 }
        guard y >= 4, let year = number(0, y), let month = number(y + 1, 2), let day = number(y + 4, 2),
            let hour = number(y + 7, 2), let minute = number(y + 10, 2), let second = number(y + 13, 2)
        else { return nil }
        var i = y + 15
        var milliseconds: Int64 = 0
        if i < b.count, b[i] == UInt8(ascii: ".") {
            i += 1
            var places: Int64 = 100
            while let digit = number(i, 1) {
                milliseconds += digit * places
                places /= 10
                i += 1
            }
        }
        var offset: Int64 = 0
        if i < b.count, b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") {
            let hours = number(i + 1, 2) ?? 0
            let minutes = number(i + 3, 2) ?? number(i + 4, 2) ?? 0
            offset = (hours * 3600 + minutes * 60) * (b[i] == UInt8(ascii: "-") ? -1 : 1)
        }
        let days = julianDay(year: year, month: month, day: day) - unixEpoch
        let seconds = days * 86400 + hour * 3600 + minute * 60 + second - offset
        return Date(
            timeIntervalSinceReferenceDate: (Double(seconds) * 1000 + Double(milliseconds)) / 1000 - 978_307_200)
    }

    /// The Julian day number of a date: Gregorian if that falls on or after the cutover, else
    /// Julian (proleptic: year 0 is 1 BC).
    static func julianDay(year: Int64, month: Int64, day: Int64) -> Int64 {
        let a = floorDivide(14 - month, 12)
        let y = year + 4800 - a
        let m = month + 12 * a - 3
        let common = day + floorDivide(153 * m + 2, 5) + 365 * y + floorDivide(y, 4)
        let gregorian = common - floorDivide(y, 100) + floorDivide(y, 400) - 32045
        return gregorian >= gregorianCutover ? gregorian : common - 32083
    }

    /// The date of a Julian day number, Gregorian from the cutover and Julian before.
    static func civil(julianDay j: Int64) -> (year: Int64, month: Int64, day: Int64) {
        var c = j + 32082
        var century: Int64 = 0
        if j >= gregorianCutover {
            let a = j + 32044
            century = floorDivide(4 * a + 3, 146097)
            c = a - floorDivide(146097 * century, 4)
        }
        let d = floorDivide(4 * c + 3, 1461)
        let e = c - floorDivide(1461 * d, 4)
        let m = floorDivide(5 * e + 2, 153)
        let day = e - floorDivide(153 * m + 2, 5) + 1
        let month = m + 3 - 12 * floorDivide(m, 10)
        return (100 * century + d - 4800 + floorDivide(m, 10), month, day)
    }

    static func floorDivide(_ a: Int64, _ b: Int64) -> Int64 {
        let q = a / b
        return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q
    }

    static func digits(_ value: Int64, _ width: Int) -> String {
        let text = String(value)
        return text.count < width ? String(repeating: "0", count: width - text.count) + text : text
    }
}
