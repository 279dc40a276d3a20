import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

// Checks before anything is written or read: attributes against the schema, sizes,
// entitlement to a group, the protection class of a synchronizable item, the lock state
// (class key present) and user presence.

extension Keychain {
    // MARK: Validation

    func validate(_ attributes: Attributes, in itemClass: ItemClass, forUpdate: Bool) throws {
        for (attribute, value) in attributes {
            guard Schema.belongs(attribute, to: itemClass) else {
                throw KeychainError(.noSuchAttr, "attribute '\(attribute.name)' does not belong to class \(itemClass)")
            }
            guard value.fits(attribute.type) else {
                throw KeychainError(.param, "attribute '\(attribute.name)' has a value of the wrong type")
            }
            if forUpdate && attribute.access != .readWrite {
                throw KeychainError(.readOnlyAttr, "attribute '\(attribute.name)' is read-only")
            }
            guard value.byteCount <= Self.maxAttributeSize else {
                throw KeychainError(
                    .dataTooLarge,
                    "attribute '\(attribute.name)' is \(value.byteCount) bytes, over the limit of \(Self.maxAttributeSize) bytes"
                )
            }
            if case .accessControl(let ac) = value, !AccessControlFlags.supported.isSuperset(of: ac.flags) {
                throw KeychainError(
                    .unimplemented,
                    "access-control flags '\(ac.flags.subtracting(.supported).text)' cannot be enforced on Linux")
            }
        }
    }

    func checkDataSize(_ data: [UInt8], _ itemClass: ItemClass, _ attributes: Attributes) throws {
        guard data.count <= Self.maxDataSize else {
            throw KeychainError(
                .dataTooLarge,
                "the secret for \(Self.describe(itemClass, attributes)) is \(data.count) bytes, over the limit of \(Self.maxDataSize) bytes (1 MiB)"
            )
        }
    }

    func checkEntitlement(_ attributes: Attributes, caller: Caller) throws {
        if case .string(let g)? = attributes[Schema.accessGroup], !caller.canSee(accessGroup: g) {
            throw KeychainError(.missingEntitlement, "the caller is not entitled to access group '\(g)'")
        }
    }

    func checkSynchronizable(_ attributes: Attributes, _ itemClass: ItemClass) throws {
        if case .bool(true)? = attributes[Schema.synchronizable], Self.accessibility(of: attributes).isThisDeviceOnly {
            throw KeychainError(.param, "a synchronizable item cannot be \(Self.accessibility(of: attributes).name)")
        }
    }

    func accessControl(of attributes: Attributes) -> AccessControl? {
        if case .accessControl(let ac)? = attributes[Schema.accessControl] { return ac }
        return nil
    }

    static func accessibility(of attributes: Attributes) -> Accessibility {
        if case .accessibility(let a)? = attributes[Schema.accessible] { return a }
        return .whenUnlocked
    }

    /// The lock-state check: the class key of `protection` as the call's keys hold it
    /// (dropped by `lock()` for WhenUnlocked classes, absent for ThisDeviceOnly classes on
    /// another machine).
    /// `name` is spelled only for the error: spelling it (the item's attributes) on every
    /// read cost 2% of an open.
    func classKey(_ protection: Accessibility, keys: Keys, for name: @autoclosure () -> String) throws -> SecureBytes {
        if let key = keys.classKeys[protection] { return key }
        if protection.isThisDeviceOnly && keys.deviceMismatch {
            throw KeychainError(
                .interactionNotAllowed,
                "\(name()) is \(protection.name), and this vault's device key is not on this machine")
        }
        throw KeychainError(.interactionNotAllowed, "\(name()) is \(protection.name), and the keychain is locked")
    }

    func checkPresence(_ item: KeychainItem, caller: Caller, ui: AuthenticationUI) throws {
        // Not needed, or asked already (before this write transaction, or at open for a file
        // handle).
        guard caller.needsPresence(for: item), let ac = item.accessControl else { return }
        switch ui {
        case .skip: throw SkipItem.skip
        case .fail:
            // kSecUseAuthenticationUIFail. Apple answers errSecInteractionNotAllowed; keychainfs
            // says errSecInteractionRequired, so that a non-blocking open can tell "would have
            // to ask" (EAGAIN) from "locked" (EACCES).
            throw KeychainError(
                .interactionRequired, "\(item.summary) needs user presence, and prompting is not allowed here")
        case .allow:
            guard let presence = caller.presence else {
                throw KeychainError(
                    .interactionNotAllowed, "\(item.summary) needs user presence, and there is no way to ask")
            }
            try presence.verify(item: item, flags: ac.flags, caller: caller)
        }
    }
}
