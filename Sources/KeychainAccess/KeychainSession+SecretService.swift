import FoundationEssentials
import Glibc
import Keychain
import KeychainCrypto

// The Secret Service's verbs beside the door's common ones: its search (the core narrows by
// the attribute index, SecretServiceMapping.swift) and the one item an object path names. The
// face keeps its protocol (object paths, sessions, prompts, signals) and its error table; what
// it reads and changes in the keychain goes through here.

extension KeychainSession {
    /// Every password item the caller may see (attributes only) whose Secret Service attributes
    /// include every pair of `query`: one audited search (`names.search`), as SearchItems is;
    /// a listing (`audited: false`: the collection's Items property, introspection) is not an
    /// audited decision, as a directory listing of the mount is not.
    public func secretServiceSearch(_ query: [String: String], audited: Bool = true) throws -> [KeychainItem] {
        do {
            let found = try keychain.secretServiceItems(matching: query, caller: caller)
            if audited { record(nil, .search, allowed: true, count: found.count) }
            return found
        } catch let e as KeychainError {
            if audited { record(nil, .search, e) }
            throw e
        }
    }

    /// The item an object path names, attributes only, if the caller may see it (else
    /// errSecItemNotFound). Not an audited decision by itself (a property read, as a `stat` of the
    /// mount is not); the face audits a lookup it refuses.
    public func visibleItem(id: Int64, itemClass: ItemClass) throws -> KeychainItem {
        try keychain.item(id: id, itemClass: itemClass, withData: false, caller: caller)
    }
}

extension KeychainSession {
    /// The Secret Service's Locked for an item and this caller: the core's rule (its class key
    /// held, user presence given or not needed).
    public func isLocked(_ item: KeychainItem) -> Bool {
        SecretServiceMapping.isLocked(item, in: keychain, for: caller)
    }

    /// "Always allow" answered in a prompt: `executable` may read `itemID` without asking again,
    /// kept in the vault's access policy, which the passphrase typed in that prompt signs. The
    /// face audits the prompt's answer (`dbus-presence`).
    public func rememberPresence(executable: String, itemID: Int64, passphrase: SecureBytes) throws {
        try keychain.rememberPresence(executable: executable, itemID: itemID, passphrase: passphrase)
    }
}
