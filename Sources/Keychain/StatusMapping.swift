#if canImport(Glibc)
    import Glibc
#endif

/// The one place that maps keychain status codes to what the front ends report:
/// an errno for the filesystem and an exit code for the CLI. docs/errors.md and
/// docs/cli.md document these two tables; change them together.
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

    /// The exit code of a CLI command that failed with this status. 44 and 45 are what
    /// macOS `security` returns for item-not-found and duplicate-item; every other failure
    /// is 1 (2 is reserved for usage errors, which never reach the core).
    public var exitCode: Int32 {
        switch self {
        case .success: 0
        case .itemNotFound: 44
        case .duplicateItem: 45
        default: 1
        }
    }
}
