import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 29, item 3: a lookup of a service directory found once is answered from what the daemon
/// found, while the vault is unchanged (no index probe: a cold `stat` cost 3.4–4.2× the floor's).
/// Mounted with `-o cache=0`, so that every `stat` reaches the daemon and no kernel cache hides a
/// wrong answer; each check is the very next call after the change it follows.
@Suite("service directories: a lookup answered from what the daemon found (issue 29)")
struct DirectoryLookupTests {
    static func lookup(_ path: String) -> (ok: Bool, errno: Int32) {
        var st = stat()
        let ok = stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
        return (ok, ok ? 0 : errno)
    }

    @Test(
        "found again while unchanged; ENOENT right after the CLI deletes its last item; found right after a new one; found while locked (its data EACCES) and after unlock"
    )
    func seenDirectories() throws {
        try withMount(options: ["cache=0"], setup: { try $0.addGeneric("seen-svc", "a", "s1") }) { box in
            let dir = box.mnt + "/genp/seen-svc"
            for _ in 0..<3 { #expect(Self.lookup(dir).ok, "\(Self.lookup(dir))") }

            let deleted = try box.cli(["delete-generic-password"] + box.unlockArgs + ["-s", "seen-svc", "-a", "a"])
            try #require(deleted.status == 0, "delete: \(deleted.summary)")
            let gone = Self.lookup(dir)
            #expect(!gone.ok && gone.errno == ENOENT, "after the delete: \(gone)")

            try box.addGeneric("seen-svc", "b", "s2")
            #expect(Self.lookup(dir).ok, "after the add: \(Self.lookup(dir))")
            #expect(Self.lookup(box.mnt + "/genp/never-made").errno == ENOENT)

            let lock = try box.cli(["lock", box.mnt])
            try #require(lock.status == 0, "lock: \(lock.summary)")
            // Locked, names stay (the metadata key stays, docs/security.md "Lock state"): the
            // directory is found by the probe, the WhenUnlocked item's data is EACCES.
            #expect(Self.lookup(dir).ok, "locked: \(Self.lookup(dir))")
            let cat = try box.run("/bin/cat", [dir + "/b"])
            #expect(cat.status != 0 && cat.stderr.contains("Permission denied"), "cat while locked: \(cat.summary)")

            let unlock = try box.cli(["unlock", box.mnt, "--passphrase-file", box.passphraseFile])
            try #require(unlock.status == 0, "unlock: \(unlock.summary)")
            #expect(Self.lookup(dir).ok, "after unlock: \(Self.lookup(dir))")
            // Through cat from another process, the item itself.
            #expect(try box.run("/bin/cat", [dir + "/b"]).stdout == "s2")
        }
    }
}
