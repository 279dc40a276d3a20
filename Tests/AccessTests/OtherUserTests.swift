import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// Issue 5, part 4: other users. Mounts are private by default; `-o allow_other` is refused
// without `default_permissions`; with both, a real second user still gets EACCES.

extension Sandbox {
    /// Makes sure /etc/fuse.conf has `user_allow_other`, restoring the file at teardown.
    func ensureUserAllowOther() throws {
        let path = "/etc/fuse.conf"
        let original = FileManager.default.contents(atPath: path)
        let text = original.map { String(decoding: $0, as: UTF8.self) } ?? ""
        let present = text.split(separator: "\n").contains {
            $0.trimmingCharacters(in: .whitespaces) == "user_allow_other"
        }
        guard !present else { return }
        onTeardown {
            if let original { try? original.write(to: URL(fileURLWithPath: path)) } else { unlink(path) }
        }
        try Data((text + (text.hasSuffix("\n") || text.isEmpty ? "" : "\n") + "user_allow_other\n").utf8).write(
            to: URL(fileURLWithPath: path))
        chmod(path, 0o644)
    }

    /// A real second user (no home, no login shell), deleted at teardown.
    func addUser() throws -> String {
        let chars = Array("abcdefghijklmnopqrstuvwxyz0123456789")
        let user = "kcfst" + String((0..<8).map { _ in chars.randomElement()! })
        onTeardown { [self] in
            _ = try? run("/usr/sbin/userdel", [user], timeout: 20)
        }
        let r = try run("/usr/sbin/useradd", ["-M", "-N", "-r", "-s", "/usr/sbin/nologin", user], timeout: 20)
        guard r.status == 0 else { throw HarnessError("useradd \(user): \(r.summary)") }
        return user
    }
}

func userExists(_ user: String) -> Bool {
    ((try? String(contentsOfFile: "/etc/passwd", encoding: .utf8)) ?? "").split(separator: "\n").contains {
        $0.hasPrefix(user + ":")
    }
}

extension AccessSuite {
    @Suite("other users") struct OtherUserTests {
        @Test("a real second user gets EACCES: private mount, and allow_other,default_permissions")
        func secondUser() throws {
            _ = try #require(keychainfsBinary, "keychainfs binary not found; set KEYCHAINFS_BIN")
            let box = try Sandbox("second-user")
            var createdUser: String?
            defer {
                box.teardown()
                if let createdUser { #expect(!userExists(createdUser), "test user \(createdUser) was not removed") }
            }
            try box.initVault()
            try box.addGeneric("svc", "acct", "other-user-secret")
            let user = try box.addUser()
            createdUser = user
            // The way to the mount is open to everyone, so a refusal comes from the mount itself.
            chmod(box.root, 0o755)
            chmod(box.mnt, 0o755)
            let publicFile = box.root + "/public.txt"
            try Data("public\n".utf8).write(to: URL(fileURLWithPath: publicFile))
            chmod(publicFile, 0o644)
            let control = try box.run("/usr/sbin/runuser", ["-u", user, "--", "/usr/bin/cat", publicFile], timeout: 15)
            try #require(
                control.status == 0 && control.stdout == "public\n",
                "the second user cannot reach the sandbox: \(control.summary)")
            let file = box.mnt + "/genp/svc/acct"

            // 1. Default: private.
            try box.mount()
            let owner = try box.run("/usr/bin/cat", [file], timeout: 10)
            #expect(owner.status == 0 && owner.stdout == "other-user-secret", "the mounting user: \(owner.summary)")
            let denied = try box.run("/usr/sbin/runuser", ["-u", user, "--", "/usr/bin/cat", file], timeout: 15)
            #expect(
                denied.status == 1 && denied.stderr.contains("Permission denied"),
                "second user, private mount: \(denied.summary)")
            #expect(!denied.stdout.contains("other-user-secret"))
            try box.unmount()

            // 2. allow_other + default_permissions: the mount is shared, the items are not.
            try box.ensureUserAllowOther()
            try box.mount(["allow_other,default_permissions"])
            let owner2 = try box.run("/usr/bin/cat", [file], timeout: 10)
            #expect(
                owner2.status == 0 && owner2.stdout == "other-user-secret",
                "the mounting user with allow_other: \(owner2.summary)")
            let denied2 = try box.run("/usr/sbin/runuser", ["-u", user, "--", "/usr/bin/cat", file], timeout: 15)
            #expect(
                denied2.status == 1 && denied2.stderr.contains("Permission denied"),
                "second user, allow_other: \(denied2.summary)")
            #expect(!denied2.stdout.contains("other-user-secret"))
            let ls2 = try box.run(
                "/usr/sbin/runuser", ["-u", user, "--", "/usr/bin/ls", box.mnt + "/genp"], timeout: 15)
            #expect(
                ls2.status != 0 && ls2.stderr.contains("Permission denied"), "second user listing /genp: \(ls2.summary)"
            )
            #expect(!ls2.stdout.contains("svc"))
        }

        @Test("-o allow_other without default_permissions is refused with exit 2")
        func allowOtherAlone() throws {
            try withSandbox { box in
                let r = try box.cli(
                    ["mount", box.vault, box.mnt, "--passphrase-file", box.passphraseFile, "-o", "allow_other"],
                    timeout: 20)
                #expect(r.status == 2, "mount -o allow_other: \(r.summary)")
                #expect(r.stderr.contains("default_permissions"), "the refusal does not say why: \(r.summary)")
                #expect(!box.isMounted, "a mount exists after the refusal")
                #expect(box.daemons().isEmpty, "a daemon runs after the refusal")
            }
        }
    }
}
