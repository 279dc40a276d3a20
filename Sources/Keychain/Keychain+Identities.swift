import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

// Identities: a certificate joined with its private key; they have no row of their own.

extension Keychain {
    // MARK: Identities

    /// An identity: a certificate joined with the private key whose applicationLabel equals
    /// the certificate's publicKeyHash. It has no row of its own.
    public struct Identity: Sendable {
        public let certificate: KeychainItem
        public let key: KeychainItem
        public var id: Int64 { certificate.id }
        public var label: String { certificate.string(Schema.label) ?? "" }
        public init(certificate: KeychainItem, key: KeychainItem) {
            self.certificate = certificate
            self.key = key
        }
    }

    /// Every identity the caller can see (a certificate with a matching private key).
    public func identities(caller callerArgument: Caller? = nil) throws -> [Identity] {
        try identities(in: callContext(callerArgument))
    }

    func identities(in call: CallContext) throws -> [Identity] {
        func all(_ c: ItemClass) throws -> [KeychainItem] {
            do {
                return try copyMatching(Query(c, matchLimit: .all, synchronizableAny: true), in: call)
            } catch KeychainStatus.itemNotFound { return [] }
        }
        var privateKeys: [[UInt8]: KeychainItem] = [:]
        for key in try all(.key) {
            guard case .number(KeyData.classPrivate)? = key[Schema.named("keyClass")],
                case .data(let label)? = key[Schema.named("applicationLabel")], !label.isEmpty
            else { continue }
            if privateKeys[label] == nil { privateKeys[label] = key }
        }
        return try all(.certificate).compactMap { cert in
            guard case .data(let hash)? = cert[Schema.named("publicKeyHash")], let key = privateKeys[hash] else {
                return nil
            }
            return Identity(certificate: cert, key: key)
        }
    }

    /// The identity of one certificate, with both halves' data if asked (each read goes
    /// through the usual access checks).
    public func identity(certificateID: Int64, withData: Bool, caller callerArgument: Caller? = nil) throws -> Identity
    {
        try identity(certificateID: certificateID, withData: withData, in: callContext(callerArgument))
    }

    func identity(certificateID: Int64, withData: Bool, in call: CallContext) throws -> Identity {
        guard let found = try identities(in: call).first(where: { $0.id == certificateID }) else {
            throw KeychainError(.itemNotFound, "identity of certificate item \(certificateID) not found")
        }
        guard withData else { return found }
        return Identity(
            certificate: try item(
                id: found.certificate.id, itemClass: .certificate, synchronizable: false,
                withData: true, in: call),
            key: try item(id: found.key.id, itemClass: .key, synchronizable: false, withData: true, in: call))
    }

    /// What an identity is as one file: the certificate as PEM followed by the private key's
    /// bytes as stored. Both halves are read through the usual access checks (visibility, lock
    /// state, user presence).
    public func identityBundle(certificateID: Int64, caller callerArgument: Caller? = nil) throws -> [UInt8] {
        let full = try identity(certificateID: certificateID, withData: true, in: callContext(callerArgument))
        return CertificateData.pem(full.certificate.data ?? []) + (full.key.data ?? [])
    }
}
