#if canImport(Glibc)
    import Glibc
#endif
import Keychain
import KeychainAccess
import SystemPackage

/// The one place where a failure of the FUSE face becomes the errno the kernel is answered
/// with. Nodes throw what they have: an `Errno` of their own (EISDIR, EXDEV…) or the core's
/// `KeychainError`, whose status maps through the table below. Anything else
/// is a bug: it is logged with the operation that met it, then answered EIO.
public enum ErrnoConversion {
    /// The errno for `error`, met while serving `operation` (an operation name and inode, never
    /// a secret). Damage and tampering (errSecDecode) are always logged; other statuses only in
    /// verbose mode, because ENOENT and EACCES are the daily answers of a keychain.
    public static func errno(for error: any Error, during operation: @autoclosure () -> String) -> Errno {
        switch error {
        case let e as Errno:
            return e
        case let e as KeychainError:
            if e.status == .decode {
                Log.error("\(operation()): \(e.message)")
            } else {
                Log.debug("\(operation()): \(e.status.name): \(e.message)")
            }
            return Errno(e.status)
        default:
            Log.error("\(operation()): unexpected \(type(of: error)): \(error); answering EIO")
            return .ioError
        }
    }
}

extension Errno {
    /// The errno a keychain status answers at the file level (docs/errors.md).
    public init(_ status: KeychainStatus) { self.init(rawValue: status.errno) }
}

/// The FUSE face's error table: what each keychain status answers at the file level
/// (docs/errors.md; a test keeps the two equal).
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
}
