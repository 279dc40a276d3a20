import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 3, point 1: mount, unmount, SIGTERM, stale mounts, one daemon per vault.
@Suite("mount and unmount")
struct MountTests {

    @Test("background mount serves the vault, logs to XDG_STATE_HOME, unmount exits 0")
    func backgroundMountAndUnmount() throws {
        try withMount(setup: { try $0.addGeneric("svc", "alice", "s3cret") }) { box in
            let r = try box.sh("cat \(q(box.mnt + "/genp/svc/alice"))")
            #expect(r.status == 0 && r.stdout == "s3cret", "\(r.summary)")
            // The backgrounded daemon logs to a file, not to a closed stdout.
            #expect(box.log.contains("mounted"), "daemon log: \(box.log)")
            let source = MountInfo.keychainMounts(at: box.mnt).first?.source
            #expect(source == box.vault, "mount source \(source ?? "nil")")

            let u = try box.cli(["unmount", box.mnt])
            #expect(u.status == 0, "unmount: \(u.summary)")
            #expect(!box.isMounted, "still in mountinfo after unmount")
            // The daemon ends after an unmount.
            #expect(waitUntil(5) { box.ownDaemons().isEmpty }, "daemon still running: \(box.ownDaemons())")
            // Unmounting what is not mounted is an error, with a message.
            let again = try box.cli(["unmount", box.mnt])
            #expect(again.status != 0 && again.stderr.contains("not a keychainfs mount"), "\(again.summary)")
        }
    }

    @Test("foreground daemon (-f) unmounts on SIGTERM and exits 0")
    func foregroundSigterm() throws {
        try withMount(foreground: true, setup: { try $0.addGeneric("svc", "a", "x") }) { box in
            let fg = try #require(box.foregroundDaemon)
            let r = try box.sh("cat \(q(box.mnt + "/genp/svc/a"))")
            #expect(r.stdout == "x", "\(r.summary)")
            #expect(kill(fg.pid, SIGTERM) == 0)
            let result = fg.wait(timeout: 10)
            #expect(!result.timedOut, "daemon did not exit on SIGTERM")
            #expect(result.status == 0, "SIGTERM must unmount cleanly with exit 0; got \(result.summary)")
            #expect(!box.isMounted, "mount still present after SIGTERM")
        }
    }

    @Test("foreground daemon exits 0 when unmounted with keychainfs unmount")
    func foregroundUnmount() throws {
        try withMount(foreground: true) { box in
            let fg = try #require(box.foregroundDaemon)
            let u = try box.cli(["unmount", box.mnt])
            #expect(u.status == 0, "unmount: \(u.summary)")
            let result = fg.wait(timeout: 10)
            #expect(!result.timedOut && result.status == 0, "daemon after unmount: \(result.summary)")
            #expect(!box.isMounted)
        }
    }

    @Test("background daemon unmounts on SIGTERM")
    func backgroundSigterm() throws {
        try withMount { box in
            let pid = try box.signalDaemon(SIGTERM)
            #expect(waitUntil(5) { !box.isMounted }, "mount still present 5 s after SIGTERM")
            #expect(waitUntil(5) { !box.isAlive(pid) }, "daemon \(pid) still running after SIGTERM")
            #expect(!box.log.contains("error"), "daemon log reports an error on SIGTERM: \(box.log)")
        }
    }

    @Test("a stale mount left by kill -9 is cleared by the next mount")
    func staleMountClearedByMount() throws {
        try withMount(setup: { try $0.addGeneric("svc", "a", "survivor") }) { box in
            // The mountpoint was just looked at (a shell prompt, ls): its attributes are in the
            // kernel's cache for the attribute timeout (1 s).
            _ = try box.sh("cat \(q(box.mnt + "/genp/svc/a")) && stat \(q(box.mnt)) >/dev/null")
            let socket = try box.sh("getfattr --only-values -n user.keychainfs.control \(q(box.mnt))").stdout
            #expect(
                socket.hasPrefix("/") && FileManager.default.fileExists(atPath: socket), "control socket: \(socket)")
            try box.signalDaemon(SIGKILL)
            let dead = try box.sh("ls \(q(box.mnt + "/genp"))")
            // ENOTCONN once the connection is gone; ECONNABORTED for a request the kernel had
            // already sent when the daemon died (a loaded machine gets there first).
            #expect(
                dead.status != 0
                    && (dead.stderr.contains("Transport endpoint is not connected")
                        || dead.stderr.contains("Software caused connection abort")),
                "\(dead.summary)")
            // Right away, as a user would.
            let m = try box.cli(["mount", box.vault, box.mnt, "--passphrase-file", box.passphraseFile], timeout: 8)
            #expect(m.status == 0, "mount over a stale mount: \(m.summary)")
            #expect(box.isMounted)
            let r = try box.sh("cat \(q(box.mnt + "/genp/svc/a"))", timeout: 5)
            #expect(r.status == 0 && r.stdout == "survivor", "\(r.summary)")
            // The dead daemon's control socket went with the next mount's start.
            #expect(
                !FileManager.default.fileExists(atPath: socket), "the dead daemon's socket \(socket) is still there")
            let status = try box.cli(["status", box.mnt])
            #expect(status.status == 0, "status through the new daemon's socket: \(status.summary)")
        }
    }

    @Test("a stale mount is cleared by the next mount once the kernel's attribute cache expired")
    func staleMountClearedByLaterMount() throws {
        try withMount(setup: { try $0.addGeneric("svc", "a", "survivor") }) { box in
            _ = try box.sh("cat \(q(box.mnt + "/genp/svc/a"))")
            try box.signalDaemon(SIGKILL)
            usleep(1_500_000)
            let m = try box.cli(["mount", box.vault, box.mnt, "--passphrase-file", box.passphraseFile], timeout: 8)
            #expect(!m.timedOut, "mount over a stale mount hung (killed after 8 s): \(m.summary)")
            #expect(m.status == 0, "mount over a stale mount: \(m.summary)")
            #expect(box.isMounted)
            let r = try box.sh("cat \(q(box.mnt + "/genp/svc/a"))", timeout: 5)
            #expect(r.status == 0 && r.stdout == "survivor", "\(r.summary)")
        }
    }

    @Test("a stale mount left by kill -9 is cleared by unmount")
    func staleMountClearedByUnmount() throws {
        try withMount { box in
            try box.signalDaemon(SIGKILL)
            let u = try box.cli(["unmount", box.mnt], timeout: 10)
            #expect(u.status == 0, "unmount of a stale mount: \(u.summary)")
            #expect(!box.isMounted, "stale mount still in mountinfo")
        }
    }

    @Test("a second mount of the same vault is refused with a clear error")
    func secondMountRefused() throws {
        try withMount(setup: { try $0.addGeneric("svc", "a", "one") }) { box in
            let other = box.root + "/mnt2"
            try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: true)
            defer { _ = try? box.run("/usr/bin/fusermount3", ["-u", "-z", other], timeout: 10) }
            let r = try box.cli(["mount", box.vault, other, "--passphrase-file", box.passphraseFile], timeout: 10)
            #expect(r.status != 0, "second mount of one vault succeeded: \(r.summary)")
            #expect(r.stderr.contains("already mounted"), "unclear error: \(r.stderr)")
            #expect(MountInfo.keychainMounts(at: other).isEmpty, "second mount appeared")
            // Same mountpoint twice: refused too, and the first mount keeps working.
            let same = try box.cli(["mount", box.vault, box.mnt, "--passphrase-file", box.passphraseFile], timeout: 10)
            #expect(same.status != 0 && same.stderr.contains("already"), "\(same.summary)")
            let c = try box.sh("cat \(q(box.mnt + "/genp/svc/a"))")
            #expect(c.stdout == "one", "\(c.summary)")
        }
    }

    @Test("a mountpoint with files is refused unless -o nonempty; its files come back at unmount")
    func nonEmptyMountpoint() throws {
        try withSandbox { box in
            try Data("mine".utf8).write(to: URL(fileURLWithPath: box.mnt + "/notes.txt"))
            let refused = try box.cli(
                ["mount", box.vault, box.mnt, "--passphrase-file", box.passphraseFile], timeout: 20)
            #expect(refused.status == 1, "\(refused.summary)")
            #expect(refused.stderr.contains("not empty") && refused.stderr.contains("-o nonempty"), "\(refused.stderr)")
            #expect(!box.isMounted)
            try box.mount(["nonempty"])
            #expect(box.isMounted)
            #expect(
                !FileManager.default.fileExists(atPath: box.mnt + "/notes.txt"), "the hidden file shows in the mount")
            let u = try box.cli(["unmount", box.mnt], timeout: 10)
            #expect(u.status == 0, "\(u.summary)")
            #expect((try? String(contentsOfFile: box.mnt + "/notes.txt", encoding: .utf8)) == "mine")
        }
    }

    @Test("a runtime directory others can enter: mount fails naming the directory, its mode and the fix")
    func runtimeDirectoryMode() throws {
        try withSandbox { box in
            let runtime = "/tmp/kcfs-rt-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
            #expect(mkdir(runtime, 0o700) == 0 && mkdir(runtime + "/keychainfs", 0o711) == 0)
            chmod(runtime + "/keychainfs", 0o711)
            defer { try? FileManager.default.removeItem(atPath: runtime) }
            let r = try box.run(
                try requireBinary(), ["mount", box.vault, box.mnt, "--passphrase-file", box.passphraseFile],
                env: ["XDG_RUNTIME_DIR": runtime], timeout: 30)
            #expect(r.status != 0 && !box.isMounted, "\(r.summary)")
            #expect(r.stderr.contains(runtime + "/keychainfs") && r.stderr.contains("mode 711"), "\(r.stderr)")
            #expect(r.stderr.contains("chmod 700"), "\(r.stderr)")
        }
    }

    @Test("background mount with --passphrase-fd")
    func passphraseFdBackground() throws {
        try withSandbox { box in
            try box.addGeneric("svc", "a", "via-fd")
            guard let bin = fsBinary else { return }
            let r = try box.sh(
                "exec \(q(bin)) mount \(q(box.vault)) \(q(box.mnt)) --passphrase-fd 3 3<\(q(box.passphraseFile))",
                timeout: 8)
            #expect(!r.timedOut, "mount --passphrase-fd 3 hung (killed after 8 s): \(r.summary)")
            #expect(r.status == 0, "\(r.summary)")
            if box.isMounted {
                let c = try box.sh("cat \(q(box.mnt + "/genp/svc/a"))", timeout: 5)
                #expect(c.stdout == "via-fd", "\(c.summary)")
            }
        }
    }

    @Test("mount-helper/mount.keychainfs follows mount(8)'s contract (VAULT DIR [-sfnv] -o opts)")
    func mountHelper() throws {
        let helper = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("mount-helper/mount.keychainfs").path
        try #require(FileManager.default.fileExists(atPath: helper), "no mount helper at \(helper)")
        try withSandbox { box in
            try box.addGeneric("svc", "a", "via-helper")
            guard let bin = fsBinary else { return }
            let path = (bin as NSString).deletingLastPathComponent
            // -f: fake, exits 0 without mounting.
            let fake = try box.sh(
                "PATH=\(q(path)):$PATH exec sh \(q(helper)) \(q(box.vault)) \(q(box.mnt)) -f -o rw,passphrase_file=\(q(box.passphraseFile))"
            )
            #expect(fake.status == 0 && !box.isMounted, "\(fake.summary)")
            // What mount -t keychainfs and an fstab line run.
            let r = try box.sh(
                "PATH=\(q(path)):$PATH exec sh \(q(helper)) \(q(box.vault)) \(q(box.mnt)) -n -o rw,nosuid,nodev,noauto,passphrase_file=\(q(box.passphraseFile))",
                timeout: 15)
            #expect(r.status == 0, "\(r.summary)")
            #expect(box.isMounted, "the helper did not mount")
            if box.isMounted {
                #expect(try box.sh("cat \(q(box.mnt + "/genp/svc/a"))").stdout == "via-helper")
                #expect(try box.cli(["unmount", box.mnt]).status == 0)
            }
        }
    }

    @Test("bad input: wrong passphrase, missing mountpoint, unknown option — no mount, clear error")
    func mountBadInput() throws {
        try withSandbox { box in
            let wrong = box.root + "/wrong"
            try Data("not-the-passphrase\n".utf8).write(to: URL(fileURLWithPath: wrong))
            let r = try box.cli(["mount", box.vault, box.mnt, "--passphrase-file", wrong], timeout: 10)
            #expect(r.status != 0 && r.stderr.hasPrefix("keychainfs: error:"), "\(r.summary)")
            #expect(!box.isMounted)
            let missing = try box.cli(
                ["mount", box.vault, box.root + "/nope", "--passphrase-file", box.passphraseFile], timeout: 10)
            #expect(missing.status != 0 && missing.stderr.contains("not a directory"), "\(missing.summary)")
            let opt = try box.cli(
                ["mount", box.vault, box.mnt, "--passphrase-file", box.passphraseFile, "-o", "bogus"], timeout: 10)
            #expect(opt.status == 2 && opt.stderr.contains("unknown mount option"), "\(opt.summary)")
            #expect(!box.isMounted)
            #expect(box.ownDaemons().isEmpty, "a daemon outlived a failed mount")
        }
    }
}
