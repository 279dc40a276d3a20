import Foundation
import Keychain

/// The objects the provider serves and their paths (the Secret Service spec's layout): the
/// service, one collection `login` (also reached by its aliases `default` and `login`, where
/// libsecret writes directly), its items named by class and persistent reference
/// (`…/collection/login/genp42`), and sessions.
enum ObjectPath: Equatable {
    case service
    case collection
    case item(ItemClass, Int64)
    case session(Int)
    /// A Prompt object (the vault's passphrase through pinentry), until it completes.
    case prompt(Int)
    /// `/org/freedesktop/secrets/aliases` itself and `/org/freedesktop/secrets/collection`: nodes
    /// with children only.
    case directory

    static let root = "/org/freedesktop/secrets"
    static let collectionPath = root + "/collection/login"
    static let aliases = ["default", "login"]
    static let itemClasses: [ItemClass] = [.genericPassword, .internetPassword]

    init?(_ path: String) {
        if path == Self.root {
            self = .service
            return
        }
        guard path.hasPrefix(Self.root + "/") else { return nil }
        let parts = path.dropFirst(Self.root.count + 1).split(separator: "/", omittingEmptySubsequences: false)
        switch (parts.first, parts.count) {
        case ("collection", 1), ("aliases", 1): self = .directory
        case ("collection", 2) where parts[1] == "login": self = .collection
        case ("aliases", 2) where Self.aliases.contains(String(parts[1])): self = .collection
        case ("collection", 3) where parts[1] == "login", ("aliases", 3) where Self.aliases.contains(String(parts[1])):
            let name = parts[2]
            guard let itemClass = Self.itemClasses.first(where: { name.hasPrefix($0.rawValue) }),
                let id = Int64(name.dropFirst(itemClass.rawValue.count)), id > 0
            else { return nil }
            self = .item(itemClass, id)
        case ("session", 2):
            guard let n = Int(parts[1]) else { return nil }
            self = .session(n)
        case ("prompt", 2):
            guard let n = Int(parts[1]) else { return nil }
            self = .prompt(n)
        default: return nil
        }
    }

    static func item(_ item: KeychainItem) -> String { "\(collectionPath)/\(item.itemClass.rawValue)\(item.id)" }
    static func session(_ n: Int) -> String { "\(root)/session/\(n)" }
    static func prompt(_ n: Int) -> String { "\(root)/prompt/\(n)" }
}

/// One property value and its D-Bus signature.
enum PropertyValue {
    case string(String)
    case bool(Bool)
    case uint64(UInt64)
    case paths([String])
    case map([String: String])

    var signature: String {
        switch self {
        case .string: "s"
        case .bool: "b"
        case .uint64: "t"
        case .paths: "ao"
        case .map: "a{ss}"
        }
    }

    func write(_ w: MessageWriter) throws(BusError) {
        try w.variant(signature) { () throws(BusError) in
            switch self {
            case .string(let s): try w.string(s)
            case .bool(let b): try w.bool(b)
            case .uint64(let n): try w.uint64(n)
            case .paths(let p): try w.objectPaths(p)
            case .map(let m): try w.stringMap(m)
            }
        }
    }
}

/// The interfaces each object answers, as introspection XML (clients that introspect, such as
/// `busctl` and `gdbus introspect`, see what the dispatcher answers).
enum Introspection {
    static let service = "org.freedesktop.Secret.Service"
    static let collection = "org.freedesktop.Secret.Collection"
    static let item = "org.freedesktop.Secret.Item"
    static let session = "org.freedesktop.Secret.Session"
    static let prompt = "org.freedesktop.Secret.Prompt"
    static let properties = "org.freedesktop.DBus.Properties"
    static let introspectable = "org.freedesktop.DBus.Introspectable"

    private static let header = """
        <!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
        <node>
         <interface name="org.freedesktop.DBus.Introspectable">
          <method name="Introspect"><arg name="xml" type="s" direction="out"/></method>
         </interface>
         <interface name="org.freedesktop.DBus.Properties">
          <method name="Get"><arg type="s" direction="in"/><arg type="s" direction="in"/><arg type="v" direction="out"/></method>
          <method name="GetAll"><arg type="s" direction="in"/><arg type="a{sv}" direction="out"/></method>
          <method name="Set"><arg type="s" direction="in"/><arg type="s" direction="in"/><arg type="v" direction="in"/></method>
          <signal name="PropertiesChanged"><arg type="s"/><arg type="a{sv}"/><arg type="as"/></signal>
         </interface>

        """

    static func xml(for object: ObjectPath, children: [String]) -> String {
        var body: String
        switch object {
        case .service:
            body = """
                 <interface name="org.freedesktop.Secret.Service">
                  <method name="OpenSession"><arg type="s" direction="in"/><arg type="v" direction="in"/><arg type="v" direction="out"/><arg type="o" direction="out"/></method>
                  <method name="CreateCollection"><arg type="a{sv}" direction="in"/><arg type="s" direction="in"/><arg type="o" direction="out"/><arg type="o" direction="out"/></method>
                  <method name="SearchItems"><arg type="a{ss}" direction="in"/><arg type="ao" direction="out"/><arg type="ao" direction="out"/></method>
                  <method name="Unlock"><arg type="ao" direction="in"/><arg type="ao" direction="out"/><arg type="o" direction="out"/></method>
                  <method name="Lock"><arg type="ao" direction="in"/><arg type="ao" direction="out"/><arg type="o" direction="out"/></method>
                  <method name="GetSecrets"><arg type="ao" direction="in"/><arg type="o" direction="in"/><arg type="a{o(oayays)}" direction="out"/></method>
                  <method name="ReadAlias"><arg type="s" direction="in"/><arg type="o" direction="out"/></method>
                  <method name="SetAlias"><arg type="s" direction="in"/><arg type="o" direction="in"/></method>
                  <property name="Collections" type="ao" access="read"/>
                 </interface>

                """
        case .collection:
            body = """
                 <interface name="org.freedesktop.Secret.Collection">
                  <method name="Delete"><arg type="o" direction="out"/></method>
                  <method name="SearchItems"><arg type="a{ss}" direction="in"/><arg type="ao" direction="out"/></method>
                  <method name="CreateItem"><arg type="a{sv}" direction="in"/><arg type="(oayays)" direction="in"/><arg type="b" direction="in"/><arg type="o" direction="out"/><arg type="o" direction="out"/></method>
                  <signal name="ItemCreated"><arg type="o"/></signal>
                  <signal name="ItemDeleted"><arg type="o"/></signal>
                  <signal name="ItemChanged"><arg type="o"/></signal>
                  <property name="Items" type="ao" access="read"/>
                  <property name="Label" type="s" access="read"/>
                  <property name="Locked" type="b" access="read"/>
                  <property name="Created" type="t" access="read"/>
                  <property name="Modified" type="t" access="read"/>
                 </interface>

                """
        case .item:
            body = """
                 <interface name="org.freedesktop.Secret.Item">
                  <method name="Delete"><arg type="o" direction="out"/></method>
                  <method name="GetSecret"><arg type="o" direction="in"/><arg type="(oayays)" direction="out"/></method>
                  <method name="SetSecret"><arg type="(oayays)" direction="in"/></method>
                  <property name="Locked" type="b" access="read"/>
                  <property name="Attributes" type="a{ss}" access="readwrite"/>
                  <property name="Label" type="s" access="readwrite"/>
                  <property name="Created" type="t" access="read"/>
                  <property name="Modified" type="t" access="read"/>
                 </interface>

                """
        case .session:
            body = """
                 <interface name="org.freedesktop.Secret.Session">
                  <method name="Close"/>
                 </interface>

                """
        case .prompt:
            body = """
                 <interface name="org.freedesktop.Secret.Prompt">
                  <method name="Prompt"><arg type="s" direction="in"/></method>
                  <method name="Dismiss"/>
                  <signal name="Completed"><arg type="b"/><arg type="v"/></signal>
                 </interface>

                """
        case .directory:
            body = ""
        }
        for child in children { body += " <node name=\"\(child)\"/>\n" }
        return header + body + "</node>\n"
    }
}
