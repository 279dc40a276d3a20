import Foundation
import KeychainCrypto
import Testing
import TestSupport

@_spi(CallerRule) import Keychain
@testable import KeychainAccess
@testable import KeychainFS

#if canImport(Glibc)
    import Glibc
#endif

/// The mount's replay of changes made elsewhere (issue 30, point 3; ReplayPlan.swift), for the
/// changes no other face makes yet from outside the mount (sync will): a change of a key
/// attribute (IN_MOVED_FROM, IN_MOVED_TO), of attributes alone (IN_ATTRIB), and an item of an
/// access group not every process is in, which is never replayed (its name must not leak), nor
/// when it leaves the default group for another (the watcher hears a delete). An in-process
/// mount (a real FUSE mount in a temp dir) served by this test, the changes made through a
/// session of another face (`via: "api"`), a real `inotifywait -m -r` watching.
@Suite("the mount replays renames, attribute changes and hides other groups' items (issue 30)", .serialized)
struct ReplayTests {
    @Test(
        "rename, attributes, another group: MOVED_FROM/MOVED_TO, ATTRIB, nothing of the hidden item, DELETE when an item leaves the default group"
    )
    func replaysAndHides() throws {
        let dir = try makeTempDirectory("keychainfs-test-replay")
        defer { _ = try? FileManager.default.removeItem(atPath: dir) }
        let mnt = dir + "/mnt"
        try FileManager.default.createDirectory(atPath: mnt, withIntermediateDirectories: false)
        let passphrase = try SecureBytes(copying: Array("pw".utf8))
        let keychain = try Keychain.create(
            at: dir + "/v.vault", passphrase: passphrase, parameters: .interactive, deviceKeyPath: dir + "/dk")
        try keychain.unlock(passphrase: passphrase)
        let access = AccessLayer(keychain: keychain, audit: nil)
        let fuse = FuseSession(fs: KeychainFileSystem(access: access), mountpoint: mnt, options: MountOptions())
        try fuse.mount()
        let served = DispatchSemaphore(value: 0)
        Thread {
            _ = fuse.run()
            served.signal()
        }.start()
        defer {
            _ = try? spawnProcess("/bin/fusermount3", ["-u", "-z", mnt], env: [:]).wait(timeout: 10)
            #expect(served.wait(timeout: .now() + 10) == .success, "the mount did not end")
        }
        let api = access.session(
            Caller(accessGroups: ["default", "other"], processDescription: "test"), via: "api")
        let genp = mnt + "/genp"
        let alice = try api.add(
            .genericPassword, [Schema.service: .string("r"), Schema.account: .string("alice")], data: Array("a".utf8),
            extras: [])
        let watcher = try InotifyWatch.start(genp)
        defer {
            kill(watcher.pid, SIGTERM)
            _ = watcher.wait(timeout: 5)
        }
        // Another group's item: no event may name it. The next visible add is the marker.
        _ = try api.add(
            .genericPassword,
            [Schema.service: .string("r"), Schema.account: .string("hidden"), Schema.accessGroup: .string("other")],
            data: Array("h".utf8), extras: [])
        _ = try api.add(
            .genericPassword, [Schema.service: .string("r"), Schema.account: .string("marker")], data: Array("m".utf8),
            extras: [])
        var seen = InotifyWatch.expectEvent(watcher, ["CREATE"], genp + "/r/marker")
        #expect(!watcher.stdoutSoFar.contains("hidden"), "an event named another group's item")

        try api.rename(
            id: alice.id, itemClass: .genericPassword,
            to: [Schema.service: .string("r"), Schema.account: .string("bob")], replacing: false, victim: nil)
        seen = InotifyWatch.expectEvent(watcher, ["MOVED_FROM"], genp + "/r/alice", after: seen)
        seen = InotifyWatch.expectEvent(watcher, ["MOVED_TO"], genp + "/r/bob", after: seen)
        var st = stat()
        #expect(stat(genp + "/r/alice", &st) != 0 && stat(genp + "/r/bob", &st) == 0, "the names right after")

        try api.setAttributes(
            id: alice.id, itemClass: .genericPassword, [Schema.label: .string("relabelled")], named: "bob")
        seen = InotifyWatch.expectEvent(watcher, ["ATTRIB"], genp + "/r/bob", after: seen)

        // Into another group: gone for every process that is not in it, so a delete.
        try api.setAttributes(
            id: alice.id, itemClass: .genericPassword, [Schema.accessGroup: .string("other")], named: "bob")
        InotifyWatch.expectEvent(watcher, ["DELETE"], genp + "/r/bob", after: seen)
        #expect(!watcher.stdoutSoFar.contains("hidden"), "an event named another group's item")
    }
}
