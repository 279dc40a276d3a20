import FoundationEssentials
import Glibc
import Keychain

/// The ssh agent protocol (draft-miller-ssh-agent) as far as a vault-backed agent answers it:
/// list identities, sign, the `session-bind@openssh.com` extension. Adding and removing keys
/// is refused: keys enter the vault through `create-keypair`, `import` or the mount, where the
/// vault's rules (access group, protection class, extractability) are given explicitly.
public enum AgentMessage {
    public static let failure: UInt8 = 5, success: UInt8 = 6
    public static let requestIdentities: UInt8 = 11, identitiesAnswer: UInt8 = 12
    public static let signRequest: UInt8 = 13, signResponse: UInt8 = 14
    public static let addIdentity: UInt8 = 17, removeIdentity: UInt8 = 18, removeAll: UInt8 = 19
    public static let addSmartcard: UInt8 = 20, removeSmartcard: UInt8 = 21, lock: UInt8 = 22, unlock: UInt8 = 23
    public static let addIdentityConstrained: UInt8 = 25, addSmartcardConstrained: UInt8 = 26
    public static let `extension`: UInt8 = 27
    /// OpenSSH's limit on one message (AGENT_MAX_LEN).
    public static let maxLength = 256 * 1024
}

/// What the agent asks the vault, for one connection's caller.
public protocol AgentBackend: Sendable {
    /// The keys this connection may use, given what it has bound (its destination).
    func identities(session: AgentSession) throws -> [SSHIdentity]
    /// A signature by the key whose public key blob is `publicKey`, if this connection may use
    /// it here (errSecItemNotFound if not).
    func sign(publicKey: [UInt8], data: [UInt8], flags: UInt32, session: AgentSession) throws -> [UInt8]
    /// `ssh-add -x`: forget the vault's keys until `unlock`.
    func lock() throws
    /// `ssh-add -X`: the vault's passphrase unlocks it again.
    func unlock(passphrase: [UInt8]) throws
}

/// What one connection has told the agent about itself (session-bind).
public struct AgentSession: Sendable {
    /// The server's host key blob of each bound session, in order; the last is the destination.
    public var hostKeys: [[UInt8]] = []
    /// Whether a bind said the connection is forwarded (`ssh -A` on another host).
    public var forwarded = false
    public init() {}
}

/// One request and its reply; `session` carries what session-bind recorded.
public struct AgentRequestHandler: Sendable {
    let backend: any AgentBackend
    /// Why the last request failed, for the agent's log (never key material).
    public private(set) var lastFailure: String?

    public init(backend: any AgentBackend) { self.backend = backend }

    public mutating func reply(to message: [UInt8], session: inout AgentSession) -> [UInt8] {
        lastFailure = nil
        guard let type = message.first else { return fail("an empty message") }
        var r = WireReader(Array(message.dropFirst()))
        switch type {
        case AgentMessage.requestIdentities:
            do {
                let ids = try backend.identities(session: session)
                var w = SSHWire()
                w.byte(AgentMessage.identitiesAnswer)
                w.uint32(UInt32(ids.count))
                for id in ids {
                    w.string(id.publicBlob)
                    w.string(id.label)
                }
                return w.bytes
            } catch {
                return fail("listing keys: \(error)")
            }
        case AgentMessage.signRequest:
            guard let blob = r.string(), let data = r.string(), let flags = r.uint32() else {
                return fail("a malformed sign request")
            }
            do {
                let signature = try backend.sign(publicKey: blob, data: data, flags: flags, session: session)
                var w = SSHWire()
                w.byte(AgentMessage.signResponse)
                w.string(signature)
                return w.bytes
            } catch let e as KeychainError where e.status == .itemNotFound {
                return fail("a sign request for a key this caller cannot use")
            } catch {
                return fail("signing: \(error)")
            }
        case AgentMessage.extension:
            guard let name = r.string().map({ String(decoding: $0, as: UTF8.self) }) else {
                return fail("a malformed extension request")
            }
            guard name == "session-bind@openssh.com" else { return fail("extension \(name) is not supported") }
            guard let hostKey = r.string(), let sessionID = r.string(), let signature = r.string(),
                let forwarding = r.byte()
            else {
                return fail("a malformed session-bind")
            }
            // The host key must have signed this session's identifier, or the destination the
            // prompt and the audit name could be anyone's claim.
            guard sshSignatureIsValid(publicKey: hostKey, signature: signature, data: sessionID) else {
                return fail("a session-bind whose host key signature does not verify")
            }
            session.hostKeys.append(hostKey)
            if forwarding != 0 { session.forwarded = true }
            return [AgentMessage.success]
        case AgentMessage.addIdentity, AgentMessage.addIdentityConstrained, AgentMessage.removeIdentity,
            AgentMessage.removeAll, AgentMessage.addSmartcard, AgentMessage.addSmartcardConstrained,
            AgentMessage.removeSmartcard:
            return fail(
                "adding and removing keys through the agent is refused: use keychainfs create-keypair or import")
        case AgentMessage.lock, AgentMessage.unlock:
            // ssh-add -x / -X: the lock password is ignored when locking (locking is always
            // safe); unlocking takes the vault's passphrase, never a password of the agent's own.
            guard var passphrase = r.string() else { return fail("a malformed lock request") }
            defer { passphrase.withUnsafeMutableBytes { $0.initializeMemory(as: UInt8.self, repeating: 0) } }
            do {
                if type == AgentMessage.lock { try backend.lock() } else { try backend.unlock(passphrase: passphrase) }
                return [AgentMessage.success]
            } catch {
                return fail(type == AgentMessage.lock ? "locking: \(error)" : "unlocking: \(error)")
            }
        default:
            return fail("message type \(type) is not supported")
        }
    }

    private mutating func fail(_ why: String) -> [UInt8] {
        lastFailure = why
        return [AgentMessage.failure]
    }
}

/// Reading the SSH wire encoding; nil on anything short.
struct WireReader {
    let bytes: [UInt8]
    var i = 0
    init(_ b: [UInt8]) { bytes = b }
    mutating func byte() -> UInt8? {
        guard i < bytes.count else { return nil }
        defer { i += 1 }
        return bytes[i]
    }
    mutating func uint32() -> UInt32? {
        guard i + 4 <= bytes.count else { return nil }
        defer { i += 4 }
        return bytes[i..<(i + 4)].reduce(0) { $0 << 8 | UInt32($1) }
    }
    mutating func string() -> [UInt8]? {
        guard let n = uint32().map(Int.init), n <= bytes.count - i else { return nil }
        defer { i += n }
        return Array(bytes[i..<(i + n)])
    }
}
