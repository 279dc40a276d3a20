import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess

/// What the mount replays of a change made elsewhere (the CLI or a helper through the service,
/// the Secret Service, an import), so that inotify and fanotify watchers of the mount hear it
/// as they would on a local directory (issue 30, point 3). The kernel raises directory events
/// only for operations that pass through its own VFS, so the daemon performs the change's
/// operation on its own mountpoint from a thread of its own (`ChangeReplayer`), and answers the
/// requests that come back from that thread from the step below, never from the store: no
/// prompt, no audit line, no key needed.
///
/// | change | calls replayed | what a watcher hears |
/// |---|---|---|
/// | added | `mkdir` of a new service/server directory, then `mknod` | IN_CREATE (IN_ISDIR for the directory) |
/// | data written | `open(O_WRONLY)`, `futimens` of the mtime, `close` | IN_OPEN, IN_MODIFY, IN_CLOSE_WRITE |
/// | attributes changed | `utimensat` of both times | IN_ATTRIB |
/// | key attribute changed | `rename` (a new directory made first, an emptied one removed after) | IN_MOVED_FROM, IN_MOVED_TO |
/// | deleted | `unlink`, then `rmdir` of a directory it left empty | IN_DELETE (IN_DELETE_SELF on the file's own watch) |
///
/// The kernel shows a replayed event to every watcher of the directory and cannot filter by
/// watcher, so only what every process of the user may see is replayed: items of the `default`
/// access group, read through `AccessLayer.everyoneSession`. A change of an item of another
/// group is never replayed (its name must not leak through an event); with an access policy in
/// force the kernel caches no item's name or attributes, so the mount shows it at once anyway.
/// The mount's own changes are not replayed: they passed through the VFS already.
/// In `/cert` and `/keys` (ReplayPlan+Flat.swift) an item's name is its label, which two items
/// may share (the directory shows one): a replay never makes, moves or removes a name another
/// item still shows. Identities (`/idnt`) are not replayed; their attributes are still dropped
/// at once (`committed`).
struct ReplayStep: Sendable {
    enum Call: Sendable, Equatable {
        case makeFile(String)
        case makeDirectory(String)
        case remove(String)
        case removeDirectory(String)
        case move(String, String)
        case writeData(String)
        case touchAttributes(String)
    }

    struct NameKey: Hashable, Sendable {
        let parent: UInt64
        let name: String
    }

    /// What the call does; paths are relative to the mount's root.
    let call: Call
    /// The daemon's answers to its own lookups during the call: present with its node, or
    /// absent (nil). A name not here is absent.
    let names: [NameKey: NodeStat?]
    /// The node the call makes (mknod, mkdir) or changes (its attributes for setattr).
    let node: NodeStat
}

extension KeychainFileSystem {
    /// Where an item's name is: its class directory, its directory (service/server) and its leaf.
    private struct Place {
        let itemClass: ItemClass
        let directory: String
        let leaf: String
        var directoryIno: UInt64 = 0
        var path: String { itemClass.rawValue + "/" + directory + "/" + leaf }
        var directoryPath: String { itemClass.rawValue + "/" + directory }
    }

    /// The calls that replay `change`, with what the daemon answers during each; none for the
    /// mount's own changes, classes without name lists, and items some process may not see.
    /// `present`: the directories (`genp/<service>`) this replay found or made present to every
    /// process, so that a batch of adds in one directory asks the store once.
    func replaySteps(for change: ItemChange, present: inout Set<String>) -> [ReplayStep] {
        guard change.origin != "fuse" else { return [] }
        if change.itemClass == .certificate || change.itemClass == .key { return flatReplaySteps(for: change) }
        guard change.itemClass == .genericPassword || change.itemClass == .internetPassword else { return [] }
        let names = access.names(of: change)
        func place(_ entry: NameListEntry?) -> Place? {
            guard let entry, entry.accessGroup == Caller.defaultAccessGroup,
                let directory = PathCodec.directory(of: change.itemClass, entry)
            else { return nil }
            var p = Place(
                itemClass: change.itemClass, directory: directory, leaf: PathCodec.leaf(of: change.itemClass, entry))
            p.directoryIno = directories.inode(change.itemClass, directory)
            return p
        }
        let before = place(names.before)
        let after = place(names.after)
        let everyone = access.everyoneSession()
        let ino = Inode.item(change.itemClass, id: change.id)
        // The item as it is now (a later change may have moved on: its own replay follows).
        let now =
            after == nil ? nil : (try? everyone.attributes(id: change.id, itemClass: change.itemClass)).map(itemStat)
        let gone = NodeStat(ino: ino, isDirectory: false, size: 0, modified: Date(), created: mountTime)
        var steps: [ReplayStep] = []
        func lookups(_ p: Place, leaf: NodeStat?) -> [ReplayStep.NameKey: NodeStat?] {
            [
                .init(parent: Inode.root, name: p.itemClass.rawValue): directoryStat(
                    Inode.classDirectory(p.itemClass)),
                .init(parent: Inode.classDirectory(p.itemClass), name: p.directory): directoryStat(p.directoryIno),
                .init(parent: p.directoryIno, name: p.leaf): leaf,
            ]
        }
        func makeDirectoryIfNew(_ p: Place) {
            guard present.insert(p.directoryPath).inserted,
                !directoryHoldsOthers(p.itemClass, p.directory, except: change.id)
            else { return }
            var answers = lookups(p, leaf: nil)
            answers[.init(parent: Inode.classDirectory(p.itemClass), name: p.directory)] = .some(nil)
            steps.append(
                ReplayStep(call: .makeDirectory(p.directoryPath), names: answers, node: directoryStat(p.directoryIno)))
        }
        func removeDirectoryIfEmptied(_ p: Place) {
            guard !directoryHoldsOthers(p.itemClass, p.directory, except: change.id) else {
                present.insert(p.directoryPath)
                return
            }
            present.remove(p.directoryPath)
            var answers = lookups(p, leaf: nil)
            answers[.init(parent: p.directoryIno, name: p.leaf)] = .some(nil)
            steps.append(
                ReplayStep(call: .removeDirectory(p.directoryPath), names: answers, node: directoryStat(p.directoryIno))
            )
        }
        switch (change.kind, before, after, now) {
        case (.added, _, let a?, let stat?), (.renamed, nil, let a?, let stat?):
            makeDirectoryIfNew(a)
            steps.append(ReplayStep(call: .makeFile(a.path), names: lookups(a, leaf: nil), node: stat))
        case (.changed, _, let a?, let stat?):
            let call: ReplayStep.Call = change.dataChanged ? .writeData(a.path) : .touchAttributes(a.path)
            steps.append(ReplayStep(call: call, names: lookups(a, leaf: stat), node: stat))
        case (.removed, let b?, _, _), (.renamed, let b?, nil, _):
            steps.append(ReplayStep(call: .remove(b.path), names: lookups(b, leaf: gone), node: gone))
            removeDirectoryIfEmptied(b)
        case (.renamed, let b?, let a?, let stat?):
            if b.directoryPath != a.directoryPath { makeDirectoryIfNew(a) }
            // The old name present, the new one absent; the directories on both paths present.
            let answers = lookups(a, leaf: nil).merging(lookups(b, leaf: stat)) { _, old in old }
            steps.append(ReplayStep(call: .move(b.path, a.path), names: answers, node: stat))
            if b.directoryPath != a.directoryPath { removeDirectoryIfEmptied(b) }
        default:
            break
        }
        return steps
    }

    /// Whether a service/server directory shows an item other than `id` to every process, or
    /// was made empty by mkdir: then a replayed add does not make it, nor a delete remove it.
    private func directoryHoldsOthers(_ itemClass: ItemClass, _ spelling: String, except id: Int64) -> Bool {
        if directories.emptyDirectory(itemClass, spelling) != nil { return true }
        let grouping = Schema.groupingAttribute(of: itemClass)
        guard let value = PathCodec.parseDirectory(itemClass, spelling)?[grouping] else { return true }
        // A generic password's directory is its service: two matches tell. A server's items
        // may sit in several directories (protocol, port): they are read.
        let limit: MatchLimit = itemClass == .genericPassword ? .count(2) : .all
        let query = Query(itemClass, [grouping: value], matchLimit: limit, synchronizableAny: true)
        guard let found = try? access.everyoneSession().matching(query) else { return false }
        return found.contains {
            $0.id != id
                && PathCodec.directory(of: itemClass, $0.attributes).map { PathCodec.same($0, spelling) } == true
        }
    }
}
