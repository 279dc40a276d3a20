import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess

// Signals for changes the Secret Service did not make (issue 30, point 5): an item added,
// changed, renamed or deleted through the mount, the CLI or a helper (through the service's API
// socket), the ssh agent or the core's own work is announced to D-Bus clients as if it had been
// made through the bus, so libsecret clients refresh. The provider's own changes (origin `dbus`)
// are signalled by the method that made them (CollectionObject.swift, ItemObject.swift): one
// signal per change.

extension SecretServiceProvider {
    /// The face that made a change through this provider: its changes are signalled by the
    /// method that made them, after its reply.
    static let ownOrigin = "dbus"

    /// `Keychain.onCommit`'s observer, on the committing thread: keeps the changes of the classes
    /// the provider shows that it did not make itself, and wakes the bus thread. Nothing here
    /// waits on the bus or takes a lock a bus call holds while it calls the core.
    func committed(_ changes: [ItemChange]) {
        let shown = changes.filter { $0.origin != Self.ownOrigin && ObjectPath.itemClasses.contains($0.itemClass) }
        guard !shown.isEmpty else { return }
        let wasEmpty = pendingChanges.withLock { p -> Bool in
            guard !p.busEnded else { return false }
            defer { p.changes.append(contentsOf: shown) }
            return p.changes.isEmpty
        }
        if wasEmpty { wakeBusThread() }
    }

    /// Whether a change the provider made to `item` is signalled (by the method that made it):
    /// the same rule as for changes made elsewhere (`signal(for:names:)`), an item of the
    /// `default` access group only.
    static func isSignalled(_ item: KeychainItem) -> Bool { item.accessGroup == Caller.defaultAccessGroup }

    /// What a change is to a D-Bus client that may see the `default` access group: an item
    /// that appeared, changed or went away, or nothing (it was never in `default`).
    enum ChangeSignal: Equatable {
        case created, changed, deleted
    }

    /// A change as a client sees it. A signal reaches every client of the bus, and the bus
    /// cannot tell them apart, so only what every client may see is signalled: an item in the
    /// `default` access group (every process is in it). A change of an item of another group
    /// is never signalled (its object path would tell clients outside the group that it
    /// exists); an item moved into `default` is created to them, one moved out of it deleted.
    /// A change whose names cannot be opened is not signalled either.
    static func signal(for change: ItemChange, names: ItemChange.Names) -> ChangeSignal? {
        let before = names.before?.accessGroup == Caller.defaultAccessGroup
        let after = names.after?.accessGroup == Caller.defaultAccessGroup
        switch change.kind {
        case .added: return after ? .created : nil
        case .removed: return before ? .deleted : nil
        case .changed: return after ? .changed : nil
        // An item's object path is its class and id, which a rename keeps.
        case .renamed: return before && after ? .changed : after ? .created : before ? .deleted : nil
        }
    }

    /// On the bus thread: ItemCreated, ItemChanged or ItemDeleted on the login collection for
    /// each change a client may see, with the item's object path; PropertiesChanged of a
    /// changed item's properties, and of the collection's `Items` once when items came or went.
    func signalChanges(_ changes: [ItemChange]) {
        var itemsChanged = false
        for change in changes {
            guard let kind = Self.signal(for: change, names: access.names(of: change)) else { continue }
            let path = ObjectPath.itemPath(change.itemClass, change.id)
            let member: String
            switch kind {
            case .created: member = "ItemCreated"
            case .changed: member = "ItemChanged"
            case .deleted: member = "ItemDeleted"
            }
            emit(ObjectPath.collectionPath, Introspection.collection, member) { w throws(BusError) in
                try w.objectPath(path)
            }
            if kind == .changed {
                // Which of them changed is not known here (a secret, a label, the attributes).
                propertiesChanged(path, Introspection.item, ["Attributes", "Label", "Modified"])
            } else {
                itemsChanged = true
            }
        }
        if itemsChanged { propertiesChanged(ObjectPath.collectionPath, Introspection.collection, ["Items"]) }
    }
}
