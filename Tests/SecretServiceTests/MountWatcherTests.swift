import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 30, point 3, for the Secret Service's changes: an item created (its service's directory
/// new: IN_CREATE), a label set (attributes alone: IN_ATTRIB), a secret set (IN_MODIFY), a
/// delete (IN_DELETE, and the emptied directory's). One service hosts the mount and the Secret
/// Service (`-o secret_service_address`); a watcher of the mount hears each change within 2 s
/// and the next read through the mount shows it. (Setting an item's Attributes changes its kept
/// map, never its name: docs/secret-service.md; the replay of a rename is ReplayTests'.)
@Suite("watchers of the mount hear the Secret Service's changes (issue 30)")
struct MountWatcherTests {
    static let script = """
        import secretstorage, sys
        conn = secretstorage.dbus_init()
        coll = secretstorage.get_default_collection(conn)
        step = sys.argv[1]
        if step == "create":
            coll.create_item("watched", {"service": "ssw", "username": "alice"}, b"s1")
        else:
            item = next(coll.search_items({"service": "ssw"}))
            if step == "label":
                item.set_label("relabelled")
            elif step == "secret":
                item.set_secret(b"second")
            elif step == "delete":
                item.delete()
        """

    @Test("CreateItem, Label, SetSecret, Delete: CREATE, ATTRIB, MODIFY, DELETE")
    func secretServiceChangesReachWatchers() throws {
        try withSandbox { box in
            let (_, address) = try box.startBus()
            try box.mount(["secret_service_address=" + address.replacingOccurrences(of: ",", with: "\\,")])
            let genp = box.mnt + "/genp"
            try #require(
                (try box.run("/bin/ls", [genp])).status == 0, "the mount with the Secret Service did not start")
            func step(_ name: String) throws {
                let r = try box.python(address, Self.script, [name])
                try #require(r.status == 0, "\(name): \(r.summary)")
            }
            let watcher = try InotifyWatch.start(box, genp)
            defer {
                kill(watcher.pid, SIGTERM)
                _ = watcher.wait(timeout: 5)
            }
            try step("create")
            var seen = InotifyWatch.expectEvent(watcher, ["CREATE", "ISDIR"], genp + "/ssw")
            #expect(try box.run("/bin/cat", [genp + "/ssw/alice"]).stdout == "s1", "cat right after CreateItem")

            try step("label")
            seen = InotifyWatch.expectEvent(watcher, ["ATTRIB"], genp + "/ssw/alice", after: seen)
            #expect(
                try box.run("/usr/bin/getfattr", ["--only-values", "-n", "user.keychain.label", genp + "/ssw/alice"])
                    .stdout == "relabelled", "the label right after it was set")

            try step("secret")
            seen = InotifyWatch.expectEvent(watcher, ["MODIFY"], genp + "/ssw/alice", after: seen)
            #expect(try box.run("/bin/cat", [genp + "/ssw/alice"]).stdout == "second", "cat right after SetSecret")
            var st = stat()

            try step("delete")
            seen = InotifyWatch.expectEvent(watcher, ["DELETE"], genp + "/ssw/alice", after: seen)
            InotifyWatch.expectEvent(watcher, ["DELETE", "ISDIR"], genp + "/ssw", after: seen)
            #expect(stat(genp + "/ssw/alice", &st) != 0, "stat right after Delete")
        }
    }
}
