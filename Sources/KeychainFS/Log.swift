import Foundation

/// The daemon's log: one line per event to stderr, which the mount command points at a
/// log file when it backgrounds the daemon. Callers never pass secrets or secret lengths.
public enum Log {
    nonisolated(unsafe) public static var verbose = false
    private static let lock = NSLock()

    public static func info(_ message: @autoclosure () -> String) { emit("info", message()) }
    public static func warning(_ message: @autoclosure () -> String) { emit("warning", message()) }
    public static func error(_ message: @autoclosure () -> String) { emit("error", message()) }
    public static func debug(_ message: @autoclosure () -> String) { if verbose { emit("debug", message()) } }

    private static func emit(_ level: String, _ message: String) {
        let line = "\(AttributeTextTime.now()) keychainfs[\(getpid())] \(level): \(message)\n"
        lock.withLock { _ = line.withCString { write(2, $0, strlen($0)) } }
    }
}

enum AttributeTextTime {
    static func now() -> String {
        var tv = timeval()
        gettimeofday(&tv, nil)
        var t = tv.tv_sec
        var tmv = tm()
        gmtime_r(&t, &tmv)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tmv.tm_year + 1900, tmv.tm_mon + 1, tmv.tm_mday,
                      tmv.tm_hour, tmv.tm_min, tmv.tm_sec, Int(tv.tv_usec / 1000))
    }
}
