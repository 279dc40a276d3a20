import Foundation
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
        let line = "\(AttributeTextTime.now()) keychainfs[\(getpid())] \(level): \(message)\n"
        lock.withLock { _ in _ = line.withCString { write(2, $0, strlen($0)) } }
    }
}

enum AttributeTextTime {
    static func now() -> String {
        var tv = timeval()
        gettimeofday(&tv, nil)
        var t = tv.tv_sec
        var tmv = tm()
        gmtime_r(&t, &tmv)
        return String(
            format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tmv.tm_year + 1900, tmv.tm_mon + 1, tmv.tm_mday,
            tmv.tm_hour, tmv.tm_min, tmv.tm_sec, Int(tv.tv_usec / 1000))
    }
}
