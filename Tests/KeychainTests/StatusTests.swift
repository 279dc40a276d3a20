#if canImport(Glibc)
    import Glibc
#endif
import Keychain
import Testing

@Suite("Status codes")
struct StatusTests {
    /// Apple's OSStatus values (SecBase.h), as listed in the semantics reference.
    static let apple: [(KeychainStatus, Int32, String)] = [
        (.success, 0, "errSecSuccess"),
        (.unimplemented, -4, "errSecUnimplemented"),
        (.io, -36, "errSecIO"),
        (.param, -50, "errSecParam"),
        (.writePermission, -61, "errSecWrPerm"),
        (.allocate, -108, "errSecAllocate"),
        (.userCanceled, -128, "errSecUserCanceled"),
        (.notAvailable, -25291, "errSecNotAvailable"),
        (.readOnly, -25292, "errSecReadOnly"),
        (.authFailed, -25293, "errSecAuthFailed"),
        (.noSuchKeychain, -25294, "errSecNoSuchKeychain"),
        (.duplicateItem, -25299, "errSecDuplicateItem"),
        (.itemNotFound, -25300, "errSecItemNotFound"),
        (.dataTooLarge, -25302, "errSecDataTooLarge"),
        (.noSuchAttr, -25303, "errSecNoSuchAttr"),
        (.noSuchClass, -25306, "errSecNoSuchClass"),
        (.interactionNotAllowed, -25308, "errSecInteractionNotAllowed"),
        (.readOnlyAttr, -25309, "errSecReadOnlyAttr"),
        (.interactionRequired, -25315, "errSecInteractionRequired"),
        (.dataNotAvailable, -25316, "errSecDataNotAvailable"),
        (.decode, -26275, "errSecDecode"),
        (.missingEntitlement, -34018, "errSecMissingEntitlement"),
    ]

    @Test("status raw values are Apple's OSStatus numbers, with Apple's names")
    func osStatusValues() {
        for (status, value, name) in Self.apple {
            #expect(status.rawValue == value, "\(name)")
            #expect(status.name == name)
            #expect(KeychainStatus(rawValue: value) == status)
            #expect(status.description == "\(name) (\(value))")
        }
        #expect(Set(Self.apple.map(\.1)).count == Self.apple.count, "no two statuses share a value")
        #expect(KeychainStatus(rawValue: -99999).name == "OSStatus -99999")
    }

    @Test("exit codes: the OSStatus low byte (44 item not found, 45 duplicate item), 0 for success")
    func exitCodes() {
        for (status, value, name) in Self.apple {
            let expected: Int32 = status == .success ? 0 : Int32(UInt8(truncatingIfNeeded: value))
            #expect(status.exitCode == expected, "\(name)")
        }
        #expect(KeychainStatus.itemNotFound.exitCode == 44 && KeychainStatus.duplicateItem.exitCode == 45)
        #expect(KeychainStatus(rawValue: -12345).exitCode == 199)
        #expect(KeychainStatus(rawValue: -256).exitCode == 1, "a low byte of 0 is not success")
    }

    @Test("KeychainError matches its status in catch patterns and never carries another")
    func errorMatching() {
        let error: any Error = KeychainError(.itemNotFound, "genp svce=\"x\" not found")
        #expect(KeychainStatus.itemNotFound ~= error)
        #expect(!(KeychainStatus.duplicateItem ~= error))
        #expect(!(KeychainStatus.itemNotFound ~= (CancellationError() as any Error)))
        #expect(KeychainError(.param, "a") == KeychainError(.param, "a"))
        #expect(KeychainError(.param, "a") != KeychainError(.decode, "a"))
        #expect("\(KeychainError(.param, "the message"))" == "the message")
    }
}
