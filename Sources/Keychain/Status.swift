/// A keychain result code. The raw values are Apple's OSStatus numbers (SecBase.h), so
/// scripts and people who know Keychain Services recognise them. A struct rather than an
/// enum so that it can be matched in `catch` and still carry any code we receive.
public struct KeychainStatus: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }

    public static let success = KeychainStatus(rawValue: 0)
    public static let unimplemented = KeychainStatus(rawValue: -4)
    public static let io = KeychainStatus(rawValue: -36)
    public static let param = KeychainStatus(rawValue: -50)
    public static let writePermission = KeychainStatus(rawValue: -61)
    public static let allocate = KeychainStatus(rawValue: -108)
    public static let userCanceled = KeychainStatus(rawValue: -128)
    public static let notAvailable = KeychainStatus(rawValue: -25291)
    public static let readOnly = KeychainStatus(rawValue: -25292)
    public static let authFailed = KeychainStatus(rawValue: -25293)
    public static let noSuchKeychain = KeychainStatus(rawValue: -25294)
    public static let duplicateKeychain = KeychainStatus(rawValue: -25296)
    public static let duplicateItem = KeychainStatus(rawValue: -25299)
    public static let itemNotFound = KeychainStatus(rawValue: -25300)
    public static let dataTooLarge = KeychainStatus(rawValue: -25302)
    public static let noSuchAttr = KeychainStatus(rawValue: -25303)
    public static let noSuchClass = KeychainStatus(rawValue: -25306)
    public static let interactionNotAllowed = KeychainStatus(rawValue: -25308)
    public static let readOnlyAttr = KeychainStatus(rawValue: -25309)
    public static let interactionRequired = KeychainStatus(rawValue: -25315)
    public static let dataNotAvailable = KeychainStatus(rawValue: -25316)
    public static let decode = KeychainStatus(rawValue: -26275)
    public static let missingEntitlement = KeychainStatus(rawValue: -34018)

    /// Every status keychainfs names, in the order docs/errors.md lists them (a test keeps the
    /// two equal, so a new status cannot go undocumented).
    public static let known: [KeychainStatus] = [
        .success, .itemNotFound, .duplicateItem, .param, .noSuchAttr, .readOnlyAttr, .interactionNotAllowed,
        .authFailed, .missingEntitlement, .writePermission, .readOnly, .dataNotAvailable, .noSuchClass,
        .interactionRequired, .userCanceled, .dataTooLarge, .decode, .noSuchKeychain, .duplicateKeychain,
        .unimplemented, .notAvailable,
        .allocate, .io,
    ]

    /// Apple's constant name, e.g. `errSecItemNotFound`.
    public var name: String {
        switch self {
        case .success: "errSecSuccess"
        case .unimplemented: "errSecUnimplemented"
        case .io: "errSecIO"
        case .param: "errSecParam"
        case .writePermission: "errSecWrPerm"
        case .allocate: "errSecAllocate"
        case .userCanceled: "errSecUserCanceled"
        case .notAvailable: "errSecNotAvailable"
        case .readOnly: "errSecReadOnly"
        case .authFailed: "errSecAuthFailed"
        case .noSuchKeychain: "errSecNoSuchKeychain"
        case .duplicateKeychain: "errSecDuplicateKeychain"
        case .duplicateItem: "errSecDuplicateItem"
        case .itemNotFound: "errSecItemNotFound"
        case .dataTooLarge: "errSecDataTooLarge"
        case .noSuchAttr: "errSecNoSuchAttr"
        case .noSuchClass: "errSecNoSuchClass"
        case .interactionNotAllowed: "errSecInteractionNotAllowed"
        case .readOnlyAttr: "errSecReadOnlyAttr"
        case .interactionRequired: "errSecInteractionRequired"
        case .dataNotAvailable: "errSecDataNotAvailable"
        case .decode: "errSecDecode"
        case .missingEntitlement: "errSecMissingEntitlement"
        default: "OSStatus \(rawValue)"
        }
    }

    public var description: String { "\(name) (\(rawValue))" }
}

/// The one error type the core throws: a status and a one-line message that names the
/// item (by its non-secret attributes or id) and the cause. Messages never contain secrets.
public struct KeychainError: Error, Equatable, Sendable, CustomStringConvertible {
    public let status: KeychainStatus
    public let message: String

    public init(_ status: KeychainStatus, _ message: String) {
        self.status = status
        self.message = message
    }

    public var description: String { message }
}

public func ~= (pattern: KeychainStatus, error: any Error) -> Bool {
    (error as? KeychainError)?.status == pattern
}
