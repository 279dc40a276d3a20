import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess

/// The replay of a change in `/cert` or `/keys` (ReplayPlan.swift): items named by label,
/// directly in the class directory. Two items may share a label, and the directory shows one
/// name for them (FlatClassDirectory): so a name another item of the default group still shows is
/// neither made again nor removed. Its cached entry is dropped instead, so the next lookup finds
/// the item it now stands for.
extension KeychainFileSystem {
    func flatReplaySteps(for change: ItemChange) -> [ReplayStep] {
        let c = change.itemClass
        let classIno = Inode.classDirectory(c)
        let (beforeAttributes, afterAttributes) = access.attributes(of: change)
        func leaf(_ attributes: Attributes?) -> String? {
            guard let attributes else { return nil }
            var group = Caller.defaultAccessGroup
            if case .string(let g)? = attributes[Schema.accessGroup] { group = g }
            return group == Caller.defaultAccessGroup ? PathCodec.leaf(of: c, attributes) : nil
        }
        let before = leaf(beforeAttributes)
        let after = leaf(afterAttributes)
        let ino = Inode.item(c, id: change.id)
        let now =
            after == nil ? nil : (try? access.everyoneSession().attributes(id: change.id, itemClass: c)).map(itemStat)
        let gone = NodeStat(ino: ino, isDirectory: false, size: 0, modified: Date(), created: mountTime)
        func answers(_ names: [(String, NodeStat?)]) -> [ReplayStep.NameKey: NodeStat?] {
            var out: [ReplayStep.NameKey: NodeStat?] = [
                .init(parent: Inode.root, name: c.rawValue): directoryStat(classIno)
            ]
            for (name, stat) in names { out[.init(parent: classIno, name: name)] = .some(stat) }
            return out
        }
        func path(_ leaf: String) -> String { c.rawValue + "/" + leaf }
        // Another item of the default group shows this name (its label, shared).
        func shown(_ leaf: String) -> Bool { flatNameShown(c, leaf, except: change.id) }
        var steps: [ReplayStep] = []
        func remove(_ b: String) {
            if shown(b) {
                notify(.entry(parent: classIno, name: b))
            } else {
                steps.append(ReplayStep(call: .remove(path(b)), names: answers([(b, gone)]), node: gone))
            }
        }
        switch (change.kind, before, after, now) {
        case (.added, _, let a?, let stat?), (.renamed, nil, let a?, let stat?):
            if !shown(a) { steps.append(ReplayStep(call: .makeFile(path(a)), names: answers([(a, nil)]), node: stat)) }
        case (.changed, _, let a?, let stat?):
            let call: ReplayStep.Call = change.dataChanged ? .writeData(path(a)) : .touchAttributes(path(a))
            steps.append(ReplayStep(call: call, names: answers([(a, stat)]), node: stat))
        case (.removed, let b?, _, _), (.renamed, let b?, nil, _):
            remove(b)
        case (.renamed, let b?, let a?, let stat?):
            if b != a && !shown(b) && !shown(a) {
                steps.append(
                    ReplayStep(call: .move(path(b), path(a)), names: answers([(b, stat), (a, nil)]), node: stat))
            } else if b != a {
                remove(b)
                if !shown(a) {
                    steps.append(ReplayStep(call: .makeFile(path(a)), names: answers([(a, nil)]), node: stat))
                }
            }
        default:
            break
        }
        return steps
    }

    /// Whether an item of the default group other than `id` is named `leaf` in `/cert` or `/keys`.
    private func flatNameShown(_ itemClass: ItemClass, _ leaf: String, except id: Int64) -> Bool {
        guard let key = PathCodec.parseLeaf(itemClass, leaf, in: [:]), let label = key[Schema.label] else {
            return false
        }
        let query = Query(itemClass, [Schema.label: label], matchLimit: .all, synchronizableAny: true)
        guard let found = try? access.everyoneSession().matching(query) else { return false }
        return found.contains { $0.id != id && PathCodec.same(PathCodec.leaf(of: itemClass, $0.attributes), leaf) }
    }
}
