import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 31: a change another device made reaches this device's D-Bus clients as any other
/// face's does. Devices A and B in one sync group on a private PostgreSQL (TestSupport's
/// SyncPeers); B mounted with its Secret Service on a private bus and `dbus-monitor` listening;
/// A changes an item through its mount.
@Suite("Secret Service signals for changes pulled from another device (issue 31)")
struct SyncSignalTests {
    @Test("an item added, changed and removed on A is ItemCreated, ItemChanged, ItemDeleted on B's bus")
    func pulledChangesAreSignalled() throws {
        try withSyncPeers(
            mount: false, setup: { try $0.a.addGeneric("seed.example", "s", "s", extra: ["--synchronizable"]) }
        ) { p in
            let a = p.a, b = p.b
            try a.mount()
            let (address, monitor) = try b.mountWithSignalMonitor()
            let item = ["service", "sig.example", "username", "ann"]
            let file = SyncPeers.file(a, "sig.example", "ann")

            func lookup() -> String? { try? b.secretTool(address, ["lookup"] + item).stdout }

            try #require(try SyncPeers.write(a, file, "one"))
            let created = monitor.next(after: 0, within: 15) { $0.member == "ItemCreated" }
            let path = try #require(created?.object, "no ItemCreated on B within 15 s: \(monitor.text)")
            #expect(waitUntil(15) { lookup() == "one" }, "B's Secret Service reads \(lookup() ?? "-")")
            #expect(try b.itemPath(address, item) == path, "the signal names the pulled item's object path")

            try #require(try SyncPeers.write(a, file, "two"))
            #expect(waitUntil(15) { lookup() == "two" }, "B's Secret Service reads \(lookup() ?? "-")")
            let changed = monitor.next(after: 0, within: 5) { $0.member == "ItemChanged" && $0.object == path }
            #expect(changed != nil, "no ItemChanged of \(path): \(monitor.text)")

            let rm = try a.run("/bin/rm", [file])
            try #require(rm.status == 0, "rm on A: \(rm.summary)")
            let deleted = monitor.next(after: 0, within: 15) { $0.member == "ItemDeleted" }
            #expect(deleted?.object == path, "no ItemDeleted of \(path): \(monitor.text)")
            #expect(try b.itemPath(address, item) == nil)
            // Created once, deleted once, changed in between. (`printf > file` through A's mount
            // commits twice, the empty item or the truncation first and then the bytes, and each
            // commit is a version that syncs: B hears an ItemChanged per version.)
            let members = monitor.itemSignals.filter { $0.object == path }.map(\.member)
            #expect(members.first == "ItemCreated" && members.last == "ItemDeleted", "\(members)")
            #expect(
                members.dropFirst().dropLast().allSatisfy { $0 == "ItemChanged" } && members.count >= 3,
                "\(members)")
        }
    }
}
