import FoundationEssentials
import Glibc
@_spi(CallerRule) import Keychain

/// What a signature's caller tells the user and the audit log beyond who it is: where the
/// signature goes, how long a presence answer may be reused, and which hosts the key must be
/// for (the ssh agent's destination, from session-bind).
public struct SSHSignContext {
    /// Added to the caller's description in a presence prompt (" connecting to github.com …").
    public var destination: String
    /// What a presence answer is remembered for (the ssh agent: one key and one host), or never.
    public var presenceReuse: PresenceReuseScope
    /// The face's own words on the audit line (`host=SHA256:… forwarded=no`).
    public var auditDetail: String
    /// Whether a key with this `sshHosts` value may be used for this request.
    public var hostsAllow: (String) -> Bool

    public init(
        destination: String, presenceReuse: PresenceReuseScope, auditDetail: String,
        hostsAllow: @escaping (String) -> Bool
    ) {
        self.destination = destination
        self.presenceReuse = presenceReuse
        self.auditDetail = auditDetail
        self.hostsAllow = hostsAllow
    }
}

extension KeychainSession {
    /// The ssh keys this caller may see, from their stored public halves: no private key is
    /// decrypted. A listing hands out public keys only and names no secret, so, like a
    /// directory listing of the mount, it is not an audited decision.
    public func sshIdentities() throws -> SSHIdentityListing {
        try keychain.sshIdentities(caller: caller)
    }

    /// A signature by the key whose public half is `publicKey`, found by its stored hash: only
    /// that key is decrypted, after the core's checks (the host restriction, visibility, lock
    /// state, user presence asked with `context.destination`). Audited as `ssh-sign`, allowed
    /// or not, with the context's detail.
    public func sshSign(publicKey: [UInt8], data: [UInt8], flags: UInt32, context: SSHSignContext) throws -> [UInt8] {
        let signer = caller.described(as: caller.processDescription + context.destination).reusing(
            context.presenceReuse)
        let id: Int64
        do {
            id = try keychain.sshKey(publicKey: publicKey, caller: caller, hostsAllow: context.hostsAllow)
        } catch let e as KeychainError {
            record(nil, .sshSign, e, detail: context.auditDetail)
            throw e
        }
        do {
            let signature = try keychain.sshSign(
                keyID: id, publicKey: publicKey, data: data, flags: flags, caller: signer, ui: .allow)
            record(id, .sshSign, allowed: true, detail: context.auditDetail)
            return signature
        } catch let e as KeychainError {
            record(id, .sshSign, e, detail: context.auditDetail)
            throw e
        }
    }
}
