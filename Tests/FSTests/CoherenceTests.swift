import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 30, point 2 (first step): a change another face of the service commits (the CLI through
/// the service, here) drops the kernel's cached attributes of the item before the CLI returns, so
/// the very next `stat` through the mount, in this process and in another, shows the new state
/// (before: the old size for up to the kernel's one-second attribute cache).
@Suite("the mount is coherent at once for changes made by the service's other faces (issue 30)")
struct CoherenceTests {
    static func size(_ path: String) -> Int? {
        var st = stat()
        return stat(path, &st) == 0 ? Int(st.st_size) : nil
    }

    @Test(
        "stat right after a CLI update shows the new size, here and from another process; right after a CLI delete, ENOENT"
    )
    func statAfterCLIUpdate() throws {
        try withMount(setup: { try $0.addGeneric("coh", "acct", "short") }) { box in
            let file = box.mnt + "/genp/coh/acct"
            for round in 1...5 {
                // The kernel caches the attributes the stat read (one second by default).
                #expect(Self.size(file) != nil)
                let secret = String(repeating: "x", count: 10 + round * 7)
                let update = try box.cli(
                    ["add-generic-password", "-U"] + box.unlockArgs + ["-s", "coh", "-a", "acct", "-w", secret])
                try #require(update.status == 0, "update: \(update.summary)")
                #expect(Self.size(file) == secret.utf8.count, "round \(round): stat here")
                let other = try box.run("/usr/bin/stat", ["-c", "%s", file])
                #expect(other.stdout == "\(secret.utf8.count)\n", "round \(round): stat in another process")
                #expect(try box.run("/bin/cat", [file]).stdout == secret)
            }
            // Deleted by the CLI: the next stat (its attributes dropped, the daemon asked) is ENOENT.
            #expect(Self.size(file) != nil)
            let delete = try box.cli(["delete-generic-password"] + box.unlockArgs + ["-s", "coh", "-a", "acct"])
            try #require(delete.status == 0, "delete: \(delete.summary)")
            #expect(Self.size(file) == nil && errno == ENOENT, "stat right after the delete")
            #expect(try box.run("/usr/bin/stat", ["-c", "%s", file]).status != 0)
        }
    }
}
