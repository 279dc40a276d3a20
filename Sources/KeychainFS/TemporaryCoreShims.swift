// TEMPORARY until the core branch lands (deleted at merge).
import Foundation
import Keychain
extension Caller {
    func canSee(accessGroup: String) -> Bool { accessGroups.contains(accessGroup) }
    func granting(presenceFor itemID: Int64) -> Caller { var c = self; c.presence = Granted(); return c }
}
struct Granted: PresenceVerifier { func verify(item: KeychainItem, flags: AccessControlFlags, caller: Caller) throws {} }
extension Keychain {
    func identityBundle(certificateID: Int64, caller: Caller? = nil) throws -> [UInt8] {
        let i = try identity(certificateID: certificateID, withData: true, caller: caller)
        return FileContent.of(.certificate, i.certificate.data ?? []) + (i.key.data ?? [])
    }
}
