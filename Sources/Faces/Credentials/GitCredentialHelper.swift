import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess

/// git's three helper operations over internet-password items. Each answers git in git's
/// terms and says on stderr (`notes`) why it could not, so that "not found" is never silent
/// about a locked vault or an item that needs user presence.
public struct GitCredentialHelper {
    /// The keychain service's socket, or the vault this helper opened (`HelperVault.openDoor`).
    public let door: any KeychainDoor
    /// One line each: why something git asked for was not answered. Never secret.
    public private(set) var notes: [String] = []

    public init(door: any KeychainDoor) {
        self.door = door
    }

    /// `get`: the credential for git's location, or nil (git then tries its next helper or
    /// prompts). With a username, only that account's item; without one, the oldest match.
    /// Without a path (git sends one only with `credential.useHttpPath`), any path matches.
    public mutating func get(_ request: GitCredential) throws -> GitCredential? {
        let location: InternetLocation
        do { location = try InternetLocation(request) } catch {
            notes.append(error.message)
            return nil
        }
        let candidates: [KeychainItem]
        do {
            candidates = try door.copyMatching(
                Query(
                    .internetPassword, location.query(account: request.username), matchLimit: .all,
                    synchronizableAny: true))
        } catch KeychainStatus.itemNotFound {
            return nil
        }
        for candidate in candidates.sorted(by: { $0.id < $1.id }) where location.accepts(port: candidate.port) {
            let item: KeychainItem
            do {
                item = try door.item(id: candidate.id, itemClass: .internetPassword, withData: true)
            } catch let e as KeychainError where e.status != .itemNotFound {
                notes.append("\(e.message) (\(e.status.name))")
                continue
            }
            let password = item.data ?? []
            let extras = StoredExtras.decode(item.extras)
            if let expiry = extras["password_expiry_utc"].flatMap(Int64.init),
                expiry <= Int64(Date().timeIntervalSince1970)
            {
                notes.append("\(candidate.summary): the password expired (password_expiry_utc)")
                continue
            }
            guard let text = String(validating: password, as: UTF8.self), !text.contains("\n") else {
                notes.append("\(candidate.summary): the password holds a newline or is not UTF-8; git cannot take it")
                continue
            }
            // git's answer is `key=value` lines: an account holding a line break would add lines
            // of its own (`host=…`, `password=…`) and a NUL would cut it short.
            let username = item.string(Schema.account) ?? ""
            guard !username.contains(where: { $0.isNewline || $0 == "\u{0}" }) else {
                notes.append("\(candidate.summary): the account holds a line break or NUL; git cannot take it")
                continue
            }
            var answer = GitCredential()
            answer.username = username
            answer.password = text
            answer.passwordExpiryUTC = extras["password_expiry_utc"]
            answer.oauthRefreshToken = extras["oauth_refresh_token"]
            return answer
        }
        return nil
    }

    /// `store`: adds the credential, or replaces the data of the item with the same location
    /// and account. Git sends it after the server accepted the password; without a username
    /// and a password there is nothing to keep.
    public mutating func store(_ request: GitCredential) throws {
        guard let username = request.username, let password = request.password else {
            notes.append("store without a username and a password: nothing to keep")
            return
        }
        let location = try InternetLocation(request)
        var attributes = location.stored(account: username)
        attributes[Schema.label] = .string(request.host ?? location.server)
        try door.addOrUpdate(
            .internetPassword, attributes, data: Array(password.utf8), extras: StoredExtras.encode(request.extras))
    }

    /// `erase`: deletes every item matching the fields git gave, as git's own store and cache
    /// helpers and osxkeychain do: an absent username or path matches any account or path; the
    /// port as `accepts(port:)` says (it is part of git's `host`). When git says which password
    /// failed, only the items still holding that password go (another process may have stored
    /// a good one since); the others are kept silently, as git's t0303 asks. Returns how many
    /// items were deleted.
    @discardableResult
    public mutating func erase(_ request: GitCredential) throws -> Int {
        let location = try InternetLocation(request)
        let matching: [KeychainItem]
        do {
            matching = try door.copyMatching(
                Query(
                    .internetPassword, location.query(account: request.username), matchLimit: .all,
                    synchronizableAny: true))
        } catch KeychainStatus.itemNotFound {
            return 0
        }
        var deleted = 0
        for candidate in matching where location.accepts(port: candidate.port) {
            if let rejected = request.password {
                let item = try door.item(id: candidate.id, itemClass: .internetPassword, withData: true)
                guard item.data == Array(rejected.utf8) else { continue }
            }
            do {
                deleted += try door.delete(
                    Query(.internetPassword, synchronizableAny: true, persistentReference: candidate.id))
            } catch KeychainStatus.itemNotFound {
                continue  // gone meanwhile: erased all the same
            }
        }
        return deleted
    }
}

extension KeychainItem {
    /// An internet password's port (0 when it has none).
    var port: Int64 {
        if case .number(let n)? = self[Schema.port] { return n }
        return 0
    }
}
