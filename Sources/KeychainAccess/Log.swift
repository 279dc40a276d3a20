import FoundationEssentials
import Glibc
import Synchronization

/// The daemon's log: one line per event to stderr, which the mount command points at a
/// log file when it backgrounds the daemon. Callers never pass secrets or secret lengths.
public enum Log {
    private static let verboseFlag = Atomic<Bool>(false)
    /// One write(2) per line keeps lines whole; the lock keeps them in order.
    private static let lock = Mutex(())

    /// Debug lines are written only when verbose (`-o debug`, `-v`).
    public static var verbose: Bool {
        get { verboseFlag.load(ordering: .relaxed) }
        set { verboseFlag.store(newValue, ordering: .relaxed) }
    }

    public static func info(_ message: @autoclosure () -> String) { emit("info", message()) }
    public static func warning(_ message: @autoclosure () -> String) { emit("warning", message()) }
    public static func error(_ message: @autoclosure () -> String) { emit("error", message()) }
    public static func debug(_ message: @autoclosure () -> String) { if verbose { emit("debug", message()) } }

    private static func emit(_ level: String, _ message: String) {
        let prefix = "\(AttributeTextTime.now()) keychainfs[\(getpid())] \(level): "
        let line = Array(prefix.utf8) + printable(message) + [10]
        lock.withLock { _ in _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) } }
    }

    /// The message's UTF-8 with every character that could break or disguise a line spelled
    /// out: ASCII controls and DEL as `\xHH`; C1 controls, the line and paragraph separators and
    /// the bidirectional overrides as `\u{HHHH}`. A log line must stay one whole line that can
    /// neither be cut short nor forge or reorder what a reader sees. Messages name items through
    /// `Keychain.describe`, which quotes names and escapes their `\` and controls itself; this
    /// is the backstop for any other text, so it leaves `\` alone (escaping it again would
    /// double every escape describe made) unless `escapingBackslash`: for raw text that nothing
    /// quoted before (a caller's executable path), where `\` is spelled `\x5c` so the escaped
    /// text reads back to exactly one string.
    static func printable(_ message: String, escapingBackslash: Bool = false) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(message.utf8.count)
        for scalar in message.unicodeScalars {
            let v = scalar.value
            if v < 0x20 || v == 0x7F || (escapingBackslash && v == 0x5C) {
                out += Array("\\x".utf8) + hex(v, digits: 2)
            } else if (0x80...0x9F).contains(v) || v == 0x2028 || v == 0x2029 || (0x202A...0x202E).contains(v)
                || (0x2066...0x2069).contains(v)
            {
                out += Array("\\u{".utf8) + hex(v, digits: 4) + [UInt8(ascii: "}")]
            } else {
                UTF8.encode(scalar) { out.append($0) }
            }
        }
        return out
    }

    private static func hex(_ v: UInt32, digits: Int) -> [UInt8] {
        let table = Array("0123456789abcdef".utf8)
        return (0..<digits).reversed().map { table[Int((v >> (4 * UInt32($0))) & 15)] }
    }
}

/// An integer in decimal, appended to bytes without a String in between (audit lines, /proc
/// paths: both made on every open or new caller).
enum DecimalText {
    static func append(_ n: Int64, to out: inout [UInt8]) {
        if n < 0 { out.append(UInt8(ascii: "-")) }
        let start = out.count
        var magnitude = n.magnitude
        repeat {
            out.append(UInt8(ascii: "0") + UInt8(magnitude % 10))
            magnitude /= 10
        } while magnitude > 0
        out[start...].reverse()
    }
}

enum AttributeTextTime {
    /// Now in UTC, `2026-11-23T09:13:02.123Z`.
    static func now() -> String {
        var out: [UInt8] = []
        out.reserveCapacity(24)
        append(to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// Appends now in UTC, `2026-11-23T09:13:02.123Z`, spelled digit by digit: Foundation's
    /// `String(format:)` cost 11 µs of every audited request.
    static func append(to out: inout [UInt8]) {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        appendUpToSecond(ts.tv_sec, to: &out)
        appendMilliseconds(ts.tv_nsec, to: &out)
    }

    /// The time up to the second (`2026-11-23T09:13:02.`) and the second it spells: the audit
    /// line of every open starts with it, and it changes once a second.
    struct SecondPrefix {
        var second = Int.min
        var bytes: [UInt8] = []
    }

    /// `append(to:)`, with the part up to the second taken from `prefix`, spelled again only
    /// when the second has changed.
    static func append(to out: inout [UInt8], reusing prefix: inout SecondPrefix) {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        if prefix.second != ts.tv_sec {
            prefix.bytes.removeAll(keepingCapacity: true)
            appendUpToSecond(ts.tv_sec, to: &prefix.bytes)
            prefix.second = ts.tv_sec
        }
        out += prefix.bytes
        appendMilliseconds(ts.tv_nsec, to: &out)
    }

    /// `2026-11-23T09:13:02.` for `seconds` since the epoch, in UTC.
    private static func appendUpToSecond(_ seconds: Int, to out: inout [UInt8]) {
        var seconds = seconds
        var t = tm()
        gmtime_r(&seconds, &t)
        put(Int(t.tm_year) + 1900, 4, to: &out)
        out.append(UInt8(ascii: "-"))
        put(Int(t.tm_mon) + 1, 2, to: &out)
        out.append(UInt8(ascii: "-"))
        put(Int(t.tm_mday), 2, to: &out)
        out.append(UInt8(ascii: "T"))
        put(Int(t.tm_hour), 2, to: &out)
        out.append(UInt8(ascii: ":"))
        put(Int(t.tm_min), 2, to: &out)
        out.append(UInt8(ascii: ":"))
        put(Int(t.tm_sec), 2, to: &out)
        out.append(UInt8(ascii: "."))
    }

    /// `123Z`: the milliseconds of `nanoseconds` and the zone.
    private static func appendMilliseconds(_ nanoseconds: Int, to out: inout [UInt8]) {
        put(nanoseconds / 1_000_000, 3, to: &out)
        out.append(UInt8(ascii: "Z"))
    }

    /// `value` in `width` decimal digits, zero-padded.
    private static func put(_ value: Int, _ width: Int, to out: inout [UInt8]) {
        var divisor = 1
        for _ in 1..<width { divisor *= 10 }
        var v = value
        while divisor > 0 {
            out.append(UInt8(48 + (v / divisor) % 10))
            v %= divisor
            divisor /= 10
        }
    }
}
