import CSystemd
import FoundationEssentials
import Glibc

/// A D-Bus error to answer a call with: its name (`org.freedesktop.Secret.Error.IsLocked`) and
/// a one-line message. Never holds a secret.
public struct BusError: Error, CustomStringConvertible {
    public let name: String
    public let message: String
    public init(_ name: String, _ message: String) {
        self.name = name
        self.message = message
    }
    public var description: String { "\(name): \(message)" }

    static func invalidArgs(_ message: String) -> BusError {
        BusError("org.freedesktop.DBus.Error.InvalidArgs", message)
    }
    static func notSupported(_ message: String) -> BusError {
        BusError("org.freedesktop.DBus.Error.NotSupported", message)
    }
    static func unknownMethod(_ message: String) -> BusError {
        BusError("org.freedesktop.DBus.Error.UnknownMethod", message)
    }
    static func failed(_ message: String) -> BusError { BusError("org.freedesktop.DBus.Error.Failed", message) }
}

/// A failed sd-bus call (negative errno), as a bus error that says, in the request's terms, what
/// could not be read or written (never an errno text: "No such device or address" tells a
/// client nothing about its call). The dispatcher checks every call's signature first, so a
/// read fails here only on a malformed value inside an argument.
func check(_ result: Int32, _ what: String) throws(BusError) -> Int32 {
    guard result >= 0 else { throw BusError.invalidArgs(what) }
    return result
}

private func code(_ c: Character) -> CChar { CChar(bitPattern: c.asciiValue!) }

/// The arguments of a message, read in order: a thin layer over sd_bus_message_read_basic and
/// the container calls (sd_bus_message_read is variadic: Swift cannot call it).
struct MessageReader {
    let message: OpaquePointer

    private func basic<T>(_ type: Character, _ initial: T) throws(BusError) -> T {
        var value = initial
        _ = try check(
            withUnsafeMutablePointer(to: &value) { sd_bus_message_read_basic(message, code(type), $0) },
            "an argument could not be read as \(describe(String(type)))")
        return value
    }

    func string() throws(BusError) -> String {
        let p: UnsafePointer<CChar>? = try basic("s", nil)
        return p.map { String(cString: $0) } ?? ""
    }

    func objectPath() throws(BusError) -> String {
        let p: UnsafePointer<CChar>? = try basic("o", nil)
        return p.map { String(cString: $0) } ?? ""
    }

    /// A Unix file descriptor (`h`), owned by the message: dup it to keep it.
    func descriptor() throws(BusError) -> Int32 { try basic("h", Int32(-1)) }

    func bool() throws(BusError) -> Bool {
        let v: Int32 = try basic("b", 0)
        return v != 0
    }

    func bytes() throws(BusError) -> [UInt8] {
        var pointer: UnsafeRawPointer?
        var size = 0
        _ = try check(
            sd_bus_message_read_array(message, code("y"), &pointer, &size), "an argument must be a byte array (ay)")
        guard let pointer, size > 0 else { return [] }
        return Array(UnsafeRawBufferPointer(start: pointer, count: size))
    }

    /// Enters a container; false at the end of an array.
    func enter(_ type: Character, _ contents: String) throws(BusError) -> Bool {
        try check(
            sd_bus_message_enter_container(message, code(type), contents),
            "an argument must be \(describe(containerType(type, contents))) (\(containerType(type, contents)))") > 0
    }

    func exit() throws(BusError) {
        _ = try check(sd_bus_message_exit_container(message), "an argument holds more than its type allows")
    }

    func skip(_ signature: String) throws(BusError) {
        _ = try check(
            sd_bus_message_skip(message, signature), "an argument must be \(describe(signature)) (\(signature))")
    }

    /// `a{ss}`.
    func stringMap() throws(BusError) -> [String: String] {
        var out: [String: String] = [:]
        guard try enter("a", "{ss}") else { return out }
        while try enter("e", "ss") {
            let k = try string()
            out[k] = try string()
            try exit()
        }
        try exit()
        return out
    }

    /// `ao`.
    func objectPaths() throws(BusError) -> [String] {
        var out: [String] = []
        guard try enter("a", "o") else { return out }
        while sd_bus_message_at_end(message, 0) == 0 { out.append(try objectPath()) }
        try exit()
        return out
    }

    /// A variant holding `contents`, read by `body`; any other variant is InvalidArgs.
    func variant<T>(_ contents: String, what: String = "the value", _ body: () throws(BusError) -> T) throws(BusError)
        -> T
    {
        var type: CChar = 0
        var inner: UnsafePointer<CChar>?
        _ = try check(sd_bus_message_peek_type(message, &type, &inner), "\(what) is missing")
        guard type == code("v"), inner.map({ String(cString: $0) }) == contents else {
            throw BusError.invalidArgs("\(what) must be \(describe(contents)) (\(contents))")
        }
        _ = try enter("v", contents)
        let value = try body()
        try exit()
        return value
    }

    /// The contents signature of the variant that comes next.
    func variantSignature() throws(BusError) -> String {
        var type: CChar = 0
        var inner: UnsafePointer<CChar>?
        _ = try check(sd_bus_message_peek_type(message, &type, &inner), "a variant argument is missing")
        return inner.map { String(cString: $0) } ?? ""
    }
}

/// A reply or signal being written: the appending twin of `MessageReader`.
struct MessageWriter {
    let message: OpaquePointer

    private func basic<T>(_ type: Character, _ value: T) throws(BusError) {
        var v = value
        _ = try check(
            withUnsafePointer(to: &v) { sd_bus_message_append_basic(message, code(type), $0) },
            "the reply could not be written")
    }

    /// Whether a D-Bus string can carry `s`: not when it holds NUL (sd-bus takes a C string,
    /// which would end there and make "a\0b" read as "a").
    static func canCarry(_ s: String) -> Bool { !s.utf8.contains(0) }

    /// A value a D-Bus string cannot carry fails the reply instead of being cut short.
    func string(_ s: String) throws(BusError) {
        guard Self.canCarry(s) else { throw BusError.failed("a value holds NUL, which a D-Bus string cannot carry") }
        _ = try check(
            s.withCString { sd_bus_message_append_basic(message, code("s"), $0) }, "the reply could not be written")
    }

    func objectPath(_ s: String) throws(BusError) {
        _ = try check(
            s.withCString { sd_bus_message_append_basic(message, code("o"), $0) }, "the reply could not be written")
    }

    func bool(_ b: Bool) throws(BusError) { try basic("b", Int32(b ? 1 : 0)) }
    func uint64(_ n: UInt64) throws(BusError) { try basic("t", n) }

    func bytes(_ b: [UInt8]) throws(BusError) {
        _ = try check(
            b.withUnsafeBytes { sd_bus_message_append_array(message, code("y"), $0.baseAddress, $0.count) },
            "the reply could not be written")
    }

    func open(_ type: Character, _ contents: String) throws(BusError) {
        _ = try check(sd_bus_message_open_container(message, code(type), contents), "the reply could not be written")
    }

    func close() throws(BusError) {
        _ = try check(sd_bus_message_close_container(message), "the reply could not be written")
    }

    func stringMap(_ map: [String: String]) throws(BusError) {
        try open("a", "{ss}")
        for (k, v) in map.sorted(by: { $0.key < $1.key }) {
            try open("e", "ss")
            try string(k)
            try string(v)
            try close()
        }
        try close()
    }

    func objectPaths(_ paths: [String]) throws(BusError) {
        try open("a", "o")
        for p in paths { try objectPath(p) }
        try close()
    }

    func variant(_ contents: String, _ body: () throws(BusError) -> Void) throws(BusError) {
        try open("v", contents)
        try body()
        try close()
    }
}

/// The signature of a container for error texts: `a` of `{ss}` is `a{ss}`, `r` of `oayays` is
/// `(oayays)`.
private func containerType(_ type: Character, _ contents: String) -> String {
    switch type {
    case "r": "(\(contents))"
    case "e": "{\(contents)}"
    case "v": "v"
    default: "\(type)\(contents)"
    }
}
