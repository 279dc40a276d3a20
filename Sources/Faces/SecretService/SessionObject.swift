import FoundationEssentials
import Glibc
import Keychain

// Session objects, /org/freedesktop/secrets/session/N: org.freedesktop.Secret.Session, opened by
// Service.OpenSession; each serves only the client that opened it.

extension SecretServiceProvider {
    static let sessionInterface = Interface(
        name: Introspection.session, methods: [Method("Close") { try $0.closeSession($1) }])

    /// Service.OpenSession: `plain`, or the DH exchange (SessionCrypto.swift).
    func openSession(_ call: Call) throws {
        let name = try call.reader.string()
        let algorithm: SessionAlgorithm
        var output: [UInt8]?
        switch name {
        case SessionAlgorithm.plainName:
            try call.reader.skip("v")
            algorithm = .plain
        case SessionAlgorithm.dhName:
            let peer = try call.reader.variant("ay", what: "the DH input") { () throws(BusError) in
                try call.reader.bytes()
            }
            (output, algorithm) = try SessionAlgorithm.negotiate(peer: peer)
        default:
            throw BusError.notSupported(
                "session algorithm \(name) is not supported; use \(SessionAlgorithm.dhName) or plain")
        }
        let n = sessions.withLock {
            let n = $0.next
            $0.next += 1
            $0.open[n] = (call.sender, algorithm)
            return n
        }
        try reply(call) { w throws(BusError) in
            if let output {
                try w.variant("ay") { () throws(BusError) in try w.bytes(output) }
            } else {
                try w.variant("s") { () throws(BusError) in try w.string("") }
            }
            try w.objectPath(ObjectPath.session(n))
        }
    }

    func closeSession(_ call: Call) throws {
        guard case .session(let n) = call.object else {
            throw BusError("org.freedesktop.Secret.Error.NoSession", "no such session")
        }
        let closed = sessions.withLock { s -> Bool in
            guard s.open[n]?.owner == call.sender else { return false }
            s.open[n] = nil
            return true
        }
        guard closed else {
            throw BusError("org.freedesktop.Secret.Error.NoSession", "no session \(n) of this client")
        }
        try reply(call) { _ throws(BusError) in }
    }

    /// A session the caller opened, and how it carries secrets; NoSession for any other.
    func checkSession(_ path: String, for call: Call) throws(BusError) -> SessionAlgorithm {
        guard case .session(let n)? = ObjectPath(path), let session = sessions.withLock({ $0.open[n] }),
            session.owner == call.sender
        else {
            throw BusError("org.freedesktop.Secret.Error.NoSession", "no session \(path) of this client")
        }
        return session.algorithm
    }

}
