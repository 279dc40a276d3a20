import Keychain

/// The Secret Service's error table: the D-Bus error a call answers with for a keychain status
/// (docs/secret-service.md). The face's own, as the errno table is the mount's.
extension KeychainStatus {
    /// The D-Bus error a Secret Service call answers with for this status. A keychain that
    /// cannot give the secret now is `IsLocked` (never "no such object": a client must not take
    /// a locked keychain for a missing secret and store or delete anew).
    public var secretServiceErrorName: String {
        switch self {
        case .interactionNotAllowed, .interactionRequired, .authFailed: "org.freedesktop.Secret.Error.IsLocked"
        case .itemNotFound, .noSuchKeychain: "org.freedesktop.Secret.Error.NoSuchObject"
        case .param, .noSuchAttr, .noSuchClass, .dataTooLarge, .readOnlyAttr: "org.freedesktop.DBus.Error.InvalidArgs"
        case .missingEntitlement, .writePermission, .readOnly: "org.freedesktop.DBus.Error.AccessDenied"
        case .unimplemented: "org.freedesktop.DBus.Error.NotSupported"
        default: "org.freedesktop.DBus.Error.Failed"
        }
    }
}
