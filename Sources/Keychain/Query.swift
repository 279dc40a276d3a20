import FoundationEssentials
import Glibc

/// kSecMatchLimit.
public enum MatchLimit: Hashable, Sendable {
    case one
    case all
    case count(Int)
}

/// kSecUseAuthenticationUI: what to do with items that would need a prompt.
public enum AuthenticationUI: Sendable {
    /// Prompt (through the caller's presence verifier).
    case allow
    /// errSecInteractionNotAllowed instead of prompting.
    case fail
    /// Leave such items out of the results silently.
    case skip
}

/// A query, as the dictionary passed to SecItemCopyMatching / Update / Delete.
/// Fields left nil are "not in the dictionary": the rules about which keys each call
/// accepts (no kSecReturn… or kSecMatch… in an update query, no match limit in a delete)
/// are checked against exactly what the caller set.
public struct Query: Sendable {
    public var itemClass: ItemClass
    /// Attribute values that must match. May include accessGroup and synchronizable.
    public var attributes: Attributes
    public var matchLimit: MatchLimit?
    public var caseInsensitive: Bool?
    public var returnData: Bool?
    public var returnAttributes: Bool?
    /// kSecAttrSynchronizableAny: match synchronizable and non-synchronizable items alike.
    public var synchronizableAny: Bool
    /// Match by persistent reference (the item's id), as kSecValuePersistentRef.
    public var persistentReference: Int64?
    public var authenticationUI: AuthenticationUI?

    public init(
        _ itemClass: ItemClass, _ attributes: Attributes = [:], matchLimit: MatchLimit? = nil,
        caseInsensitive: Bool? = nil, returnData: Bool? = nil, returnAttributes: Bool? = nil,
        synchronizableAny: Bool = false, persistentReference: Int64? = nil,
        authenticationUI: AuthenticationUI? = nil
    ) {
        self.itemClass = itemClass
        self.attributes = attributes
        self.matchLimit = matchLimit
        self.caseInsensitive = caseInsensitive
        self.returnData = returnData
        self.returnAttributes = returnAttributes
        self.synchronizableAny = synchronizableAny
        self.persistentReference = persistentReference
        self.authenticationUI = authenticationUI
    }
}

/// One result of copyMatching: its persistent reference, attributes and (if asked) data.
public struct KeychainItem: Sendable {
    /// Stable for the item's lifetime; never reused (kSecValuePersistentRef).
    public let id: Int64
    public let itemClass: ItemClass
    public let attributes: Attributes
    public let data: [UInt8]?
    /// Length of the secret, known without decrypting it (ciphertext length less overhead).
    public let dataLength: Int
    /// What a face keeps beside a password (SecretExtras.swift), when the data was read and the
    /// item has any: never part of `data`.
    public let extras: [UInt8]?

    public init(
        id: Int64, itemClass: ItemClass, attributes: Attributes, data: [UInt8]?, dataLength: Int? = nil,
        extras: [UInt8]? = nil
    ) {
        self.id = id
        self.itemClass = itemClass
        self.attributes = attributes
        self.data = data
        self.dataLength = dataLength ?? data?.count ?? 0
        self.extras = extras
    }

    public subscript(_ attribute: Attribute) -> AttributeValue? { attributes[attribute] }

    public func string(_ attribute: Attribute) -> String? {
        if case .string(let s)? = attributes[attribute] { return s }
        return nil
    }

    public var accessGroup: String { string(Schema.accessGroup) ?? "" }

    public var accessibility: Accessibility {
        if case .accessibility(let a)? = attributes[Schema.accessible] { return a }
        return .whenUnlocked
    }

    public var accessControl: AccessControl? {
        if case .accessControl(let ac)? = attributes[Schema.accessControl] { return ac }
        return nil
    }

    public var modificationDate: Date? {
        if case .date(let d)? = attributes[Schema.modificationDate] { return d }
        return nil
    }

    public var creationDate: Date? {
        if case .date(let d)? = attributes[Schema.creationDate] { return d }
        return nil
    }

    /// A one-line, secret-free description for messages and logs: class, key attributes, id.
    public var summary: String { Keychain.describe(itemClass, attributes, id: id) }
}

/// Who a user-presence answer is remembered for during the reuse window.
public enum PresenceReuseScope: Sendable, Hashable {
    /// The calling process (pid and start time).
    case process
    /// A scope the face names instead of the process.
    case scope(String)
    /// Nobody: every request asks.
    case never
}

/// Who is asking. Opaque to the faces: only the door's owner makes one (`KeychainAccess`, by one
/// rule: `AccessLayer.caller(…)`, `holderCaller`, `ownProcessCaller`), through the
/// `@_spi(CallerRule)` initialiser and setters; a face reads what it needs for its protocol
/// (a description for a prompt, the groups for a cache key), may narrow what it was given (no
/// prompt for a non-blocking open), and asks the core for the rest. The core only ever sees
/// the result.
public struct Caller: Sendable {
    /// The caller's access groups; the first is where its new items go.
    public internal(set) var accessGroups: [String]
    /// Answers a prompt for items with access control; nil when no prompt is possible.
    public internal(set) var presence: (any PresenceVerifier)?
    /// Default kSecUseAuthenticationUI for this caller.
    public var authenticationUI: AuthenticationUI
    /// Who the caller is, for prompts and the audit log ("pid 42 /usr/bin/ssh"); never a secret.
    public internal(set) var processDescription: String
    /// Identifies the process across requests (pid and start time), for the presence reuse window.
    public internal(set) var processKey: String
    /// The process's executable (its /proc/PID/exe), when it was identified: what the access
    /// policy's groups and remembered presence decisions name.
    public internal(set) var executable: String?
    /// What a presence reuse window is kept for: the process (the mount, the CLI), a scope a
    /// face names (the ssh agent: one key and one destination host), or nothing (each request
    /// asks).
    public internal(set) var presenceReuse: PresenceReuseScope = .process
    /// Items whose user presence was already given for this request or handle: the core does
    /// not ask again for them, whatever `authenticationUI` says. Only code that has just asked
    /// adds to it (the core before a write transaction; a face at open, for the handle it
    /// returns), with `granting(presenceFor:)`.
    public internal(set) var presenceGrants: Set<Int64>
    /// The caller's identity rests on a pid that another process may have taken or exec'd
    /// into (the Secret Service on a bus that gives no process handle), and no prompt has
    /// confirmed it yet: a face serves it nothing that rests on its executable's identity.
    public internal(set) var identityUnconfirmed = false
    /// Which face made the request (the session's `via`: `fuse`, `api`, `dbus`, `ssh`, `cli`),
    /// carried onto the changes it commits (`ItemChange.origin`) so that a face can tell its own
    /// changes from the others'; empty for the core's own work. Decides nothing.
    public internal(set) var origin = ""

    @_spi(CallerRule) public init(
        accessGroups: [String] = [Caller.defaultAccessGroup], presence: (any PresenceVerifier)? = nil,
        authenticationUI: AuthenticationUI = .allow, processDescription: String = "", processKey: String = "",
        presenceGrants: Set<Int64> = [], executable: String? = nil
    ) {
        self.accessGroups = accessGroups
        self.presence = presence
        self.authenticationUI = authenticationUI
        self.processDescription = processDescription
        self.processKey = processKey
        self.presenceGrants = presenceGrants
        self.executable = executable
    }

    /// This caller, with user presence for `itemID` taken as given (it was just asked).
    @_spi(CallerRule) public func granting(presenceFor itemID: Int64) -> Caller {
        var copy = self
        copy.presenceGrants.insert(itemID)
        return copy
    }

    /// Whether using this item's data needs a presence prompt for this caller: its access
    /// control asks for user presence (or the passphrase), and this caller has not given it.
    /// The one presence rule: the core checks it before a read or write, and the Secret
    /// Service reports such an item Locked to this caller.
    public func needsPresence(for item: KeychainItem) -> Bool {
        guard let control = item.accessControl, control.requiresPresence else { return false }
        return !presenceGrants.contains(item.id)
    }

    /// The one visibility rule: a caller sees, reads and writes the items of its own access
    /// groups only; items of other groups are not found (never "permission denied").
    public func canSee(accessGroup: String) -> Bool {
        accessGroups.contains(accessGroup)
    }

    /// With no access policy, every process of the user is in this group.
    public static let defaultAccessGroup = "default"
    /// Who a core verb called without a caller acts for (tests, and the core's own work): the
    /// default group, no prompt. Nothing can raise it: there is no settable default.
    public static let `default` = Caller()

    /// The same process with the groups and remembered answers the policy gives its executable
    /// now (an open handle re-judged after a policy change), for the door's owner only.
    @_spi(CallerRule) public func regrouped(_ groups: [String], granted: Set<Int64>) -> Caller {
        var copy = self
        copy.accessGroups = groups
        copy.presenceGrants.formUnion(granted)
        return copy
    }

    /// The same caller, its changes marked as made through `face` (a session's `via`).
    @_spi(CallerRule) public func originating(_ face: String) -> Caller {
        var copy = self
        copy.origin = face
        return copy
    }

    /// Narrowed: never prompts (no verifier, kSecUseAuthenticationUIFail). Any face may.
    public func withoutPrompts() -> Caller {
        var copy = self
        copy.presence = nil
        copy.authenticationUI = .fail
        return copy
    }

    /// Narrowed: its identity rests on a pid nothing pinned, so nothing that rests on its
    /// executable is served (no remembered answers; the face keeps other groups Locked). Any
    /// face may.
    public func unconfirmed() -> Caller {
        var copy = self
        copy.identityUnconfirmed = true
        copy.presenceGrants = []
        return copy
    }

    /// Its identity confirmed by a prompt naming its pid and executable (ScopeLedger).
    @_spi(CallerRule) public func confirmed() -> Caller {
        var copy = self
        copy.identityUnconfirmed = false
        return copy
    }

    /// With presence given for these items (ScopeLedger: a prompt of its scope answered).
    @_spi(CallerRule) public func granting(_ items: Set<Int64>) -> Caller {
        var copy = self
        copy.presenceGrants.formUnion(items)
        return copy
    }

    /// A presence answer reused within `scope` (the ssh agent: one key and one host).
    @_spi(CallerRule) public func reusing(_ scope: PresenceReuseScope) -> Caller {
        var copy = self
        copy.presenceReuse = scope
        return copy
    }

    /// The same caller described otherwise ("pid 42", when /proc gave nothing better).
    @_spi(CallerRule) public func described(as description: String) -> Caller {
        var copy = self
        copy.processDescription = description
        return copy
    }
}

/// The access layer's hook for user presence (a pinentry prompt, …). It returns normally when
/// the user allowed the use, or throws a KeychainError (userCanceled, authFailed,
/// interactionNotAllowed, …).
public protocol PresenceVerifier: Sendable {
    func verify(item: KeychainItem, flags: AccessControlFlags, caller: Caller) throws
}
