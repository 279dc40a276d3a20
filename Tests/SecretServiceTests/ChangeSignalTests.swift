import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 30, point 5: D-Bus clients hear of every change, whichever face or process made it. The
/// vault is mounted with the Secret Service on a private bus; `dbus-monitor` listens; the CLI
/// (through the service's API socket: it has no passphrase), the mount and a D-Bus client change
/// items. Each signal must arrive within 2 s of the command's return, name the item's object
/// path, come once per change, and the very next Secret Service read must show the new state.
@Suite("Secret Service signals for changes made by any face (issue 30)")
struct ChangeSignalTests {
    static let collection = "/org/freedesktop/secrets/collection/login"

    @Test(
        "the CLI through the service adds, updates and deletes: ItemCreated, ItemChanged, ItemDeleted within 2 s, one each, and the next read shows it"
    )
    func cliChangesAreSignalled() throws {
        try withSandbox { box in
            let (address, monitor) = try box.mountWithSignalMonitor()
            let item = ["service", "sig-svc", "username", "ann"]

            var seen = monitor.signals.count
            let add = try box.cliThroughService(["add-generic-password", "-s", "sig-svc", "-a", "ann", "-w", "one"])
            try #require(add.status == 0, "add: \(add.summary)")
            let created = monitor.next(after: seen, within: 2) { $0.member == "ItemCreated" }
            let path = try #require(created?.object, "no ItemCreated within 2 s: \(monitor.text)")
            #expect(created?.path == Self.collection && created?.interface == "org.freedesktop.Secret.Collection")
            #expect(try box.itemPath(address, item) == path, "the signal names the item's object path")
            #expect(try box.secretTool(address, ["lookup"] + item).stdout == "one")
            let items = monitor.next(after: seen, within: 2) {
                $0.member == "PropertiesChanged" && $0.path == Self.collection && $0.strings.contains("Items")
            }
            #expect(items != nil, "no PropertiesChanged of Items: \(monitor.text)")

            seen = monitor.signals.count
            let update = try box.cliThroughService(
                ["add-generic-password", "-U", "-s", "sig-svc", "-a", "ann", "-w", "two"])
            try #require(update.status == 0, "update: \(update.summary)")
            let changed = monitor.next(after: seen, within: 2) { $0.member == "ItemChanged" }
            #expect(changed?.object == path && changed?.path == Self.collection, "\(monitor.text)")
            #expect(try box.secretTool(address, ["lookup"] + item).stdout == "two")
            let properties = monitor.next(after: seen, within: 2) {
                $0.member == "PropertiesChanged" && $0.path == path
            }
            #expect(properties?.strings.contains("Modified") == true, "\(monitor.text)")

            seen = monitor.signals.count
            let delete = try box.cliThroughService(["delete-generic-password", "-s", "sig-svc", "-a", "ann"])
            try #require(delete.status == 0, "delete: \(delete.summary)")
            let deleted = monitor.next(after: seen, within: 2) { $0.member == "ItemDeleted" }
            #expect(deleted?.object == path && deleted?.path == Self.collection, "\(monitor.text)")
            let gone = try box.secretTool(address, ["lookup"] + item)
            #expect(gone.status != 0 && gone.stdout.isEmpty, "\(gone.summary)")
            #expect(try box.itemPath(address, item) == nil)

            // One signal per change: nothing doubled, nothing late.
            usleep(500_000)
            let mine = monitor.itemSignals.filter { $0.object == path }.map(\.member)
            #expect(mine == ["ItemCreated", "ItemChanged", "ItemDeleted"], "\(monitor.text)")
        }
    }

    @Test(
        "a create, a write and a rename through the mount are signalled once each; a CreateItem through the Secret Service once, not again by the change stream, and a replace as ItemChanged"
    )
    func mountAndOwnChangesOnce() throws {
        try withSandbox { box in
            let (address, monitor) = try box.mountWithSignalMonitor()
            let dir = box.mnt + "/genp/mnt-sig"
            var seen = monitor.signals.count
            let write = try box.sh("mkdir \(q(dir)) && printf %s mounted > \(q(dir + "/kim"))")
            try #require(write.status == 0, "\(write.summary)")
            let created = monitor.next(after: seen, within: 2) { $0.member == "ItemCreated" }
            let path = try #require(created?.object, "no ItemCreated within 2 s: \(monitor.text)")
            #expect(try box.itemPath(address, ["service", "mnt-sig", "username", "kim"]) == path)
            #expect(
                try box.secretTool(address, ["lookup", "service", "mnt-sig", "username", "kim"]).stdout == "mounted")

            // A rename keeps the object path (class and id): ItemChanged, and the new name reads.
            seen = monitor.signals.count
            let mv = try box.run("/bin/mv", [dir + "/kim", dir + "/kit"], timeout: 15)
            try #require(mv.status == 0, "\(mv.summary)")
            let renamed = monitor.next(after: seen, within: 2) { $0.object == path }
            #expect(renamed?.member == "ItemChanged", "\(monitor.text)")
            #expect(
                try box.secretTool(address, ["lookup", "service", "mnt-sig", "username", "kit"]).stdout == "mounted")

            // Through the Secret Service itself: its own ItemCreated, and no second one.
            seen = monitor.signals.count
            let store = try box.secretTool(
                address, ["store", "--label=Own", "service", "own-sig", "username", "lou"], stdin: Array("own".utf8))
            try #require(store.status == 0, "secret-tool store: \(store.summary)")
            let own = try #require(try box.itemPath(address, ["service", "own-sig", "username", "lou"]))
            #expect(monitor.next(after: seen, within: 2) { $0.object == own }?.member == "ItemCreated")
            // Stored again (libsecret's replace): the same item changed, ItemChanged once.
            seen = monitor.signals.count
            let again = try box.secretTool(
                address, ["store", "--label=Own", "service", "own-sig", "username", "lou"], stdin: Array("own2".utf8))
            try #require(again.status == 0, "secret-tool store again: \(again.summary)")
            #expect(monitor.next(after: seen, within: 2) { $0.object == own }?.member == "ItemChanged")
            #expect(try box.secretTool(address, ["lookup", "service", "own-sig", "username", "lou"]).stdout == "own2")

            usleep(500_000)
            let created1 = monitor.itemSignals.filter { $0.member == "ItemCreated" }.compactMap(\.object)
            #expect(created1 == [path, own], "one ItemCreated per created item: \(monitor.text)")
            #expect(
                monitor.itemSignals.filter { $0.object == own }.map(\.member) == ["ItemCreated", "ItemChanged"],
                "\(monitor.text)")
            #expect(monitor.itemSignals.filter { $0.member == "ItemDeleted" }.isEmpty, "\(monitor.text)")
        }
    }

    @Test("a change to an item of an access group other than default is never signalled; a default item's is")
    func otherGroupsAreNotSignalled() throws {
        try withSandbox { box in
            // The CLI's own program is in `team`, so it may put an item there through the service.
            let bin = try requireBinary()
            let group = try box.cli(["access-group", "add"] + box.unlockArgs + ["team", bin])
            try #require(group.status == 0, "access-group add: \(group.summary)")
            let (address, monitor) = try box.mountWithSignalMonitor()

            let hidden = ["-s", "hidden-svc", "-a", "hal"]
            let add = try box.cliThroughService(
                ["add-generic-password"] + hidden + ["-w", "h1", "--access-group", "team"])
            try #require(add.status == 0, "add: \(add.summary)")
            let found = try box.cliThroughService(["find-generic-password"] + hidden)
            #expect(found.status == 0 && found.stdout.contains("team"), "the item is in team: \(found.summary)")
            let update = try box.cliThroughService(["add-generic-password", "-U"] + hidden + ["-w", "h2"])
            #expect(update.status == 0, "update: \(update.summary)")
            let delete = try box.cliThroughService(["delete-generic-password"] + hidden)
            #expect(delete.status == 0, "delete: \(delete.summary)")

            // A default item after them (the CLI's first group is `team`): its signal comes, and
            // it is the only one.
            let sentinel = try box.cliThroughService(
                ["add-generic-password", "-s", "open-svc", "-a", "ola", "-w", "o1", "--access-group", "default"])
            try #require(sentinel.status == 0, "add: \(sentinel.summary)")
            let created = monitor.next(after: 0, within: 2) { $0.member == "ItemCreated" }
            let path = try #require(created?.object, "no ItemCreated within 2 s: \(monitor.text)")
            #expect(try box.itemPath(address, ["service", "open-svc", "username", "ola"]) == path)
            usleep(500_000)
            #expect(monitor.itemSignals.map(\.object) == [path], "only the default item: \(monitor.text)")
            #expect(
                monitor.signals.filter { $0.member == "PropertiesChanged" }.count == 1,
                "only the default item's Items change: \(monitor.text)")
        }
    }
    @Test(
        "an item moved out of default is ItemDeleted to clients, moved back ItemCreated; its change while in another group is not signalled"
    )
    func movedBetweenGroups() throws {
        try withSandbox { box in
            // mv moves the item into `team`; the CLI changes it there.
            for program in ["/usr/bin/mv", try requireBinary()] {
                let group = try box.cli(["access-group", "add"] + box.unlockArgs + ["team", program])
                try #require(group.status == 0, "access-group add: \(group.summary)")
            }
            let (address, monitor) = try box.mountWithSignalMonitor()
            let item = ["service", "mv-svc", "username", "mia"]
            let add = try box.cliThroughService(
                ["add-generic-password", "-s", "mv-svc", "-a", "mia", "-w", "m1", "--access-group", "default"])
            try #require(add.status == 0, "add: \(add.summary)")
            let created = monitor.next(after: 0, within: 2) { $0.member == "ItemCreated" }
            let path = try #require(created?.object, "no ItemCreated within 2 s: \(monitor.text)")

            let dir = box.mnt + "/genp/mv-svc"
            var seen = monitor.signals.count
            let out = try box.run("/usr/bin/mv", [dir + "/mia", dir + "/mia;accessGroup=team"], timeout: 15)
            try #require(out.status == 0, "mv into team: \(out.summary)")
            let deleted = monitor.next(after: seen, within: 2) { $0.object == path }
            #expect(deleted?.member == "ItemDeleted", "\(monitor.text)")
            #expect(try box.itemPath(address, item) == nil, "a client outside team still finds it")

            let update = try box.cliThroughService([
                "add-generic-password", "-U", "-s", "mv-svc", "-a", "mia", "-w", "m2",
            ])
            #expect(update.status == 0, "update in team: \(update.summary)")

            seen = monitor.signals.count
            let back = try box.run("/usr/bin/mv", [dir + "/mia;accessGroup=team", dir + "/mia"], timeout: 15)
            try #require(back.status == 0, "mv back: \(back.summary)")
            let again = monitor.next(after: seen, within: 2) { $0.object == path }
            #expect(again?.member == "ItemCreated", "\(monitor.text)")
            #expect(try box.secretTool(address, ["lookup"] + item).stdout == "m2")

            usleep(500_000)
            let mine = monitor.itemSignals.filter { $0.object == path }.map(\.member)
            #expect(mine == ["ItemCreated", "ItemDeleted", "ItemCreated"], "\(monitor.text)")
        }
    }
    @Test("a D-Bus client's own CreateItem, replace and Delete of an item in another group are not signalled either")
    func ownChangesInAnotherGroup() throws {
        try withSandbox { box in
            // secret-tool is in `team` (its first group: its items go there), served on its pid.
            let group = try box.cli(["access-group", "add"] + box.unlockArgs + ["team", "/usr/bin/secret-tool"])
            try #require(group.status == 0, "access-group add: \(group.summary)")
            let (address, monitor) = try box.mountWithSignalMonitor(options: ["secret_service_trust_pid"])
            let item = ["service", "team-sig", "username", "tia"]
            let store = try box.secretTool(address, ["store", "--label=Team"] + item, stdin: Array("t1".utf8))
            try #require(store.status == 0, "secret-tool store: \(store.summary)")
            #expect(try box.secretTool(address, ["lookup"] + item).stdout == "t1")
            let outside = try box.cliThroughService(["find-generic-password", "-s", "team-sig"])
            #expect(outside.status == 44, "the item is not in team: \(outside.summary)")
            let replace = try box.secretTool(address, ["store", "--label=Team"] + item, stdin: Array("t2".utf8))
            #expect(replace.status == 0, "secret-tool store again: \(replace.summary)")
            #expect(try box.secretTool(address, ["lookup"] + item).stdout == "t2")
            let clear = try box.secretTool(address, ["clear"] + item)
            #expect(clear.status == 0, "secret-tool clear: \(clear.summary)")

            let sentinel = try box.cliThroughService(["add-generic-password", "-s", "open-sig", "-a", "oz", "-w", "o"])
            try #require(sentinel.status == 0, "add: \(sentinel.summary)")
            let created = monitor.next(after: 0, within: 2) { $0.member == "ItemCreated" }
            let path = try #require(created?.object, "no ItemCreated within 2 s: \(monitor.text)")
            #expect(try box.itemPath(address, ["service", "open-sig", "username", "oz"]) == path)
            usleep(500_000)
            #expect(monitor.itemSignals.map(\.object) == [path], "only the default item: \(monitor.text)")
            #expect(monitor.signals.filter { $0.member == "PropertiesChanged" }.count == 1, "\(monitor.text)")
        }
    }
    @Test(
        "an import of 300 items through the service, one commit: 300 ItemCreated, each item once, and the collection's Items"
    )
    func importIsSignalledOncePerItem() throws {
        try withSandbox { box in
            let (address, monitor) = try box.mountWithSignalMonitor()
            let file = box.w + "/items.csv"
            let rows = (1...300).map { "bulk-sig,user\($0),pw\($0)" }
            try ("title,account,password\n" + rows.joined(separator: "\n") + "\n").write(
                toFile: file, atomically: true, encoding: .utf8)
            let imported = try box.cliThroughService(
                ["import-csv", "generic", file, "--columns", "title=title,account=account,password=password"])
            try #require(imported.status == 0 && imported.stdout.contains("300 added"), "\(imported.summary)")
            let all = waitUntil(5) { monitor.itemSignals.count >= 300 }
            #expect(all, "\(monitor.itemSignals.count) of 300 within 5 s")
            usleep(500_000)
            let created = monitor.itemSignals.filter { $0.member == "ItemCreated" }.compactMap(\.object)
            #expect(created.count == 300 && Set(created).count == 300, "\(created.count) signals")
            #expect(monitor.itemSignals.count == 300, "only ItemCreated: \(monitor.itemSignals.count)")
            let found = itemPaths(try box.secretTool(address, ["search", "--all", "service", "bulk-sig"]))
            #expect(Set(found) == Set(created), "the signals name the items a search finds")
            let items = monitor.signals.filter { $0.member == "PropertiesChanged" && $0.strings.contains("Items") }
            #expect(!items.isEmpty, "no PropertiesChanged of Items")
        }
    }
}
