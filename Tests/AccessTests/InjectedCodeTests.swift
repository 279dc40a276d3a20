import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// Issue 27, point 3: code injected into an allowed program gets none of its groups on the mount
// either. /usr/bin/cat is in group `team`; started with LD_PRELOAD (or LD_AUDIT, or
// LD_LIBRARY_PATH) or traced, it is judged as a program in no group: the team item is ENOENT,
// and the audit line says why. cat itself still reads it at once.

extension AccessSuite {
    @Suite("code injected into an allowed program") struct InjectedCodeTests {
        @Test(
            "cat in group team reads the item; cat with LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH or under strace does not, and the audit says why"
        )
        func injectedCodeRefused() throws {
            try withMount(setup: { box in
                let add = try box.cli(["access-group", "add"] + box.unlockArgs + ["team", "/usr/bin/cat"])
                try #require(add.status == 0, "access-group add: \(add.summary)")
                try box.addGeneric("svc", "acct", "team-only", extra: ["--access-group", "team"])
            }) { box in
                let teamPath = box.mnt + "/genp/svc/acct;accessGroup=team"
                let allowed = try box.spawn("/usr/bin/cat", [teamPath]).wait(timeout: 15)
                #expect(allowed.status == 0 && allowed.stdout == "team-only", "\(allowed.summary)")

                // An empty library to preload (a real ELF object, so the loader loads it).
                let library = box.root + "/w/empty.so"
                let source = box.root + "/w/empty.c"
                try Data("int keychainfs_test_empty;\n".utf8).write(to: URL(fileURLWithPath: source))
                let cc = try box.run("/usr/bin/gcc", ["-shared", "-fPIC", "-o", library, source], timeout: 60)
                try #require(cc.status == 0, "gcc: \(cc.summary)")
                for (name, value) in [("LD_PRELOAD", library), ("LD_AUDIT", library), ("LD_LIBRARY_PATH", box.root)] {
                    let injected = try box.spawn("/usr/bin/cat", [teamPath], env: [name: value]).wait(timeout: 15)
                    #expect(
                        injected.status != 0 && !injected.stdout.contains("team-only"), "\(name): \(injected.summary)")
                    #expect(injected.stderr.contains("No such file or directory"), "\(name): \(injected.stderr)")
                    #expect(
                        box.audit.split(separator: "\n").contains { $0.contains("started with \(name)") },
                        "no audit line naming \(name):\n\(box.audit.suffix(1200))")
                }
                let traced = try box.run(
                    "/usr/bin/strace", ["-f", "-o", "/dev/null", "/usr/bin/cat", teamPath], timeout: 30)
                #expect(traced.status != 0 && !traced.stdout.contains("team-only"), "traced: \(traced.summary)")
                #expect(box.audit.contains("traced by pid"), "\(box.audit.suffix(1200))")
                // And the allowed program, untouched, still reads at once.
                let again = try box.spawn("/usr/bin/cat", [teamPath]).wait(timeout: 15)
                #expect(again.stdout == "team-only", "\(again.summary)")
            }
        }
    }
}
