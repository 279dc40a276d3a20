import FoundationEssentials
import Glibc

// Each D-Bus interface the provider serves is declared once, here and in the object files
// (ServiceObject.swift, CollectionObject.swift, ItemObject.swift, SessionObject.swift,
// PromptObject.swift): its methods with their arguments and handlers, its properties with their
// types and whether they may be set, its signals. The dispatcher (Dispatch.swift) answers a call
// only through these tables, and the introspection XML is written from them, so what a client
// sees in `Introspect` is exactly what is answered.

/// One argument of a method or signal: a name (for introspection and error texts) and its type.
struct Argument: Sendable {
    let name: String
    let type: String
    init(_ name: String, _ type: String) {
        self.name = name
        self.type = type
    }
}

/// A method: its arguments in and out, and what answers it (the handler reads the arguments,
/// whose signature the dispatcher has checked, and sends the reply).
struct Method: Sendable {
    let name: String
    let inputs: [Argument]
    let outputs: [Argument]
    let handler: @Sendable (SecretServiceProvider, SecretServiceProvider.Call) throws -> Void

    init(
        _ name: String, in inputs: [Argument] = [], out outputs: [Argument] = [],
        _ handler: @escaping @Sendable (SecretServiceProvider, SecretServiceProvider.Call) throws -> Void
    ) {
        self.name = name
        self.inputs = inputs
        self.outputs = outputs
        self.handler = handler
    }

    var inputSignature: String { inputs.map(\.type).joined() }

    /// Why a call with `signature` is not this method's: each argument it takes, in words.
    func mismatch(_ signature: String) -> String {
        let wanted =
            inputs.isEmpty
            ? "no arguments"
            : inputs.map { "\($0.name) (\(describe($0.type)), \($0.type))" }.joined(separator: ", ")
        let got = signature.isEmpty ? "none" : signature
        return "\(name) takes \(wanted); the call gave \(got)"
    }
}

/// A property: its type and whether `Properties.Set` may change it.
struct Property: Sendable {
    let name: String
    let type: String
    let writable: Bool
    init(_ name: String, _ type: String, writable: Bool = false) {
        self.name = name
        self.type = type
        self.writable = writable
    }
}

/// A signal and its arguments.
struct Signal: Sendable {
    let name: String
    let arguments: [Argument]
    init(_ name: String, _ arguments: [Argument] = []) {
        self.name = name
        self.arguments = arguments
    }
}

/// One interface: methods, properties (with the function that reads their values for a call's
/// caller, and the one that sets a writable one) and signals.
struct Interface: Sendable {
    let name: String
    var methods: [Method] = []
    var properties: [Property] = []
    var signals: [Signal] = []
    /// Every property's value for the caller of the call (keys: the names in `properties`).
    var values: (@Sendable (SecretServiceProvider, SecretServiceProvider.Call) throws -> [String: PropertyValue])? =
        nil
    /// Sets the named writable property from the call's variant (its type already checked).
    var set: (@Sendable (SecretServiceProvider, SecretServiceProvider.Call, String) throws -> Void)? = nil

    func method(_ name: String) -> Method? { methods.first { $0.name == name } }
    func property(_ name: String) -> Property? { properties.first { $0.name == name } }
    func signal(_ name: String) -> Signal? { signals.first { $0.name == name } }

    var xml: String {
        var out = " <interface name=\"\(name)\">\n"
        for m in methods {
            let args =
                m.inputs.map { "<arg name=\"\($0.name)\" type=\"\($0.type)\" direction=\"in\"/>" }
                + m.outputs.map { "<arg name=\"\($0.name)\" type=\"\($0.type)\" direction=\"out\"/>" }
            out +=
                args.isEmpty
                ? "  <method name=\"\(m.name)\"/>\n" : "  <method name=\"\(m.name)\">\(args.joined())</method>\n"
        }
        for s in signals {
            let args = s.arguments.map { "<arg name=\"\($0.name)\" type=\"\($0.type)\"/>" }
            out +=
                args.isEmpty
                ? "  <signal name=\"\(s.name)\"/>\n" : "  <signal name=\"\(s.name)\">\(args.joined())</signal>\n"
        }
        for p in properties {
            out +=
                "  <property name=\"\(p.name)\" type=\"\(p.type)\" access=\"\(p.writable ? "readwrite" : "read")\"/>\n"
        }
        return out + " </interface>\n"
    }
}

/// A D-Bus type in words, for error texts ("the attributes argument must be a dictionary of
/// strings (a{ss})").
func describe(_ type: String) -> String {
    switch type {
    case "s": "a string"
    case "o": "an object path"
    case "b": "a boolean"
    case "t": "an unsigned 64-bit number"
    case "v": "a variant"
    case "ay": "a byte array"
    case "ao": "a list of object paths"
    case "as": "a list of strings"
    case "a{ss}": "a dictionary of strings"
    case "a{sv}": "a dictionary of variants"
    case "(oayays)": "a secret (session, parameters, value, content type)"
    case "a{o(oayays)}": "a dictionary of secrets by item"
    default: "of type \(type)"
    }
}

/// The interfaces each object answers, and its introspection XML.
enum Introspection {
    static let service = "org.freedesktop.Secret.Service"
    static let collection = "org.freedesktop.Secret.Collection"
    static let item = "org.freedesktop.Secret.Item"
    static let session = "org.freedesktop.Secret.Session"
    static let prompt = "org.freedesktop.Secret.Prompt"
    static let properties = "org.freedesktop.DBus.Properties"
    static let introspectable = "org.freedesktop.DBus.Introspectable"

    static let introspectableInterface = Interface(
        name: introspectable,
        methods: [Method("Introspect", out: [Argument("xml", "s")]) { try $0.introspect($1) }])

    static let propertiesInterface = Interface(
        name: properties,
        methods: [
            Method("Get", in: [Argument("interface", "s"), Argument("property", "s")], out: [Argument("value", "v")]) {
                try $0.getProperty($1)
            },
            Method("GetAll", in: [Argument("interface", "s")], out: [Argument("properties", "a{sv}")]) {
                try $0.getAllProperties($1)
            },
            Method("Set", in: [Argument("interface", "s"), Argument("property", "s"), Argument("value", "v")]) {
                try $0.setProperty($1)
            },
        ],
        signals: [
            Signal(
                "PropertiesChanged",
                [Argument("interface", "s"), Argument("changed", "a{sv}"), Argument("invalidated", "as")])
        ])

    /// The interfaces an object answers: Introspectable and Properties, and its own.
    static func interfaces(of object: ObjectPath) -> [Interface] {
        let own: [Interface]
        switch object {
        case .service: own = [SecretServiceProvider.serviceInterface]
        case .collection: own = [SecretServiceProvider.collectionInterface]
        case .item, .sessionItem: own = [SecretServiceProvider.itemInterface]
        case .session: own = [SecretServiceProvider.sessionInterface]
        case .prompt: own = [SecretServiceProvider.promptInterface]
        case .directory: own = []
        }
        return [introspectableInterface, propertiesInterface] + own
    }

    private static let header = """
        <!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
        <node>

        """

    static func xml(for object: ObjectPath, children: [String]) -> String {
        var body = interfaces(of: object).map(\.xml).joined()
        for child in children { body += " <node name=\"\(child)\"/>\n" }
        return header + body + "</node>\n"
    }
}
