import FoundationEssentials
import Glibc
import KeychainCrypto

/// The `session` collection (`/org/freedesktop/secrets/collection/session`, alias `session`), as
/// gnome-keyring, KeePassXC and oo7 serve it: items kept in the provider's memory only, never
/// written to the vault, gone when the provider stops. Clients use it for what must not outlive
/// the login session (python-keyring's and libsecret's own tests store there).
struct SessionCollection {
    /// One item: what a client gave, and when.
    struct Item {
        var label: String
        var attributes: [String: String]
        var secret: [UInt8]
        var contentType: String
        var created: UInt64
        var modified: UInt64
        /// The provider's change counter at its last change: searches answer the most recent first.
        var changed: Int
    }

    var label = "Session"
    var created = SessionCollection.now
    var modified = SessionCollection.now
    private(set) var items: [Int: Item] = [:]
    private var next = 1
    private var clock = 0

    static var now: UInt64 { UInt64(max(0, Date().timeIntervalSince1970)) }

    /// CreateItem: with `replace`, the item with exactly these attributes takes the new label,
    /// secret and content type; otherwise (or with none) a new item. Its number.
    mutating func create(
        label: String, attributes: [String: String], secret: [UInt8], contentType: String, replace: Bool
    ) -> (number: Int, created: Bool) {
        clock += 1
        modified = Self.now
        if replace, let n = search(attributes, exact: true).first {
            update(n) {
                $0.label = label
                $0.setSecret(secret, contentType: contentType)
            }
            return (n, false)
        }
        let n = next
        next += 1
        items[n] = Item(
            label: label, attributes: attributes, secret: secret,
            contentType: contentType.isEmpty ? "text/plain" : contentType, created: Self.now,
            modified: Self.now, changed: clock)
        return (n, true)
    }

    /// The items whose attributes include every pair of `query` (all of them when `exact`),
    /// the most recently changed first.
    func search(_ query: [String: String], exact: Bool = false) -> [Int] {
        items.filter { _, item in
            (!exact || item.attributes.count == query.count)
                && query.allSatisfy { k, v in item.attributes[k].map { $0.utf8.elementsEqual(v.utf8) } ?? false }
        }
        .sorted { ($0.value.changed, $0.key) > ($1.value.changed, $1.key) }.map(\.key)
    }

    /// Changes an item (its modification time and place in searches move); false if it is gone.
    @discardableResult
    mutating func update(_ n: Int, _ body: (inout Item) -> Void) -> Bool {
        guard var item = items[n] else { return false }
        clock += 1
        body(&item)
        item.modified = Self.now
        item.changed = clock
        items[n] = item
        return true
    }

    /// Deletes an item, wiping its secret; false if it was gone.
    mutating func delete(_ n: Int) -> Bool {
        guard var item = items.removeValue(forKey: n) else { return false }
        Sodium.wipe(&item.secret)
        modified = Self.now
        return true
    }

    /// Every item's secret wiped (the provider stops).
    mutating func wipe() {
        for n in Array(items.keys) { _ = delete(n) }
    }
}

extension SessionCollection.Item {
    mutating func setSecret(_ value: [UInt8], contentType: String) {
        Sodium.wipe(&secret)
        secret = value
        self.contentType = contentType.isEmpty ? "text/plain" : contentType
    }
}
