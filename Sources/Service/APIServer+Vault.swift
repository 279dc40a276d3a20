import FoundationEssentials
import Glibc
import Keychain
import KeychainAPI
import KeychainAccess

// The API's vault verbs (docs/service.md): identities, create-keypair, an import's batch, the
// access policy's reading and a backup, answered through the request's `KeychainSession`.

extension APIServer {
    /// The reply to a vault verb, or nil when `request` is none.
    func answerVaultVerb(_ request: APIRequest, session: KeychainSession, by peer: PeerProcess) throws -> APIReply? {
        switch request {
        case .identities:
            return .items(try session.identities().flatMap { [WireItem($0.certificate), WireItem($0.key)] })
        case .createKeyPair(let algorithm, let attributes):
            let (item, publicKey) = try session.createKeyPair(algorithm, attributes)
            return .keyPair(WireItem(item), publicKey: publicKey)
        case .storeBatch(let items, let updateExisting):
            do {
                return .stored(try session.storeBatch(items.map(\.item), updateExisting: updateExisting))
            } catch let refused as BatchRefused {
                return .refused(
                    refused.refusals.map {
                        WireRefusal(index: $0.index, status: $0.error.status, message: $0.error.message)
                    })
            }
        case .accessPolicy:
            return .policy(try session.accessPolicy())
        case .backup(let destination):
            // The client made the path absolute: the service's working directory is not its.
            guard destination.hasPrefix("/") else {
                return .failure(.param, "a backup's destination must be an absolute path")
            }
            let summary = try session.backup(to: destination)
            Log.info("api: backup of \(keychain.path) written to \(destination) for \(peer.identity.description)")
            return .backup(items: summary.items, format: summary.format, counter: summary.counter)
        default:
            return nil
        }
    }
}
