#if canImport(Glibc)
    import Glibc
#endif

/// The one place that maps keychain status codes to what the front ends report:
/// an errno for the filesystem, an exit code for the CLI and a D-Bus error name for the
/// Secret Service provider. docs/errors.md, docs/cli.md and docs/secret-service.md document
/// these tables; change them together.
extension KeychainStatus {
    /// The errno a filesystem call returns for this status.
    public var errno: Int32 {
        switch self {
        case .success: 0
        case .itemNotFound, .noSuchKeychain: ENOENT
        case .duplicateItem, .duplicateKeychain: EEXIST
        case .param, .noSuchClass: EINVAL
        case .noSuchAttr: ENODATA
        case .interactionNotAllowed, .authFailed, .missingEntitlement, .writePermission: EACCES
        case .interactionRequired: EAGAIN
        case .userCanceled: ECANCELED
        case .readOnlyAttr, .readOnly, .dataNotAvailable: EPERM
        case .dataTooLarge: EFBIG
        case .decode: EIO
        case .unimplemented: EOPNOTSUPP
        case .allocate: ENOMEM
        case .notAvailable: EAGAIN
        default: EIO
        }
    }

    /// The exit code of a CLI command that failed with this status: the OSStatus's low byte,
    /// as macOS `security` exits (errSecItemNotFound −25300 → 44, errSecDuplicateItem −25299
    /// → 45, errSecAuthFailed −25293 → 51), so scripts written for `security` read ours alike.
    /// A status whose low byte is 0 or 2 would read as success or as a usage error (2, which
    /// never reaches the core); it exits 1 instead. No status keychainfs throws has such a
    /// byte; the rule covers OSStatus values it may pass on from elsewhere (the daemon's reply).
    public var exitCode: Int32 {
        if self == .success { return 0 }
        let lowByte = Int32(UInt8(truncatingIfNeeded: rawValue))
        return lowByte == 0 || lowByte == 2 ? 1 : lowByte
    }

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
