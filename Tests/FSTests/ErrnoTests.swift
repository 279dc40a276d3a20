import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 3, point 7: the errno table (docs/errors.md), seen by real callers.
@Suite("errno table")
struct ErrnoTests {

    @Test("ENOENT, EEXIST, EINVAL, ENODATA, EPERM, EFBIG, EXDEV, ENOTEMPTY")
    func table() throws {
        try withMount(setup: { box in
            try box.addGeneric("t", "a", "alpha")
            try box.addGeneric("t", "b", "beta")
        }) { box in
            let res = try box.pyResults(
                """
                d = sys.argv[1]; m = sys.argv[2]
                t('notfound', read, d + '/missing')
                t('notfoundsvc', os.listdir, m + '/genp/nosvc')
                t('duplicate', wfd, d + '/a', os.O_WRONLY | os.O_CREAT | os.O_EXCL, b'x')
                t('duplicatemove', os.setxattr, d + '/a', 'user.keychain.account', b'b')
                t('noreplace', renameat2, d + '/a', d + '/b', 1)
                t('badparam', os.setxattr, d + '/a', 'user.keychain.accessible', b'sometimes')
                t('badname', wfd, d + '/bad%G0', os.O_WRONLY | os.O_CREAT, b'x')
                t('nosuchattr', os.getxattr, d + '/a', 'user.keychain.server')
                t('readonly', os.setxattr, d + '/a', 'user.keychain.creationDate', b'2001-01-01T00:00:00Z')
                t('toolarge', os.truncate, d + '/a', 1048577)
                t('xdev', os.rename, d + '/a', m + '/keys/a')
                t('notempty', os.rmdir, d)
                t('after', read, d + '/a')
                """, [box.mnt + "/genp/t", box.mnt])
            #expect(res["notfound"] == "ENOENT" && res["notfoundsvc"] == "ENOENT", "\(res)")
            #expect(
                res["duplicate"] == "EEXIST" && res["duplicatemove"] == "EEXIST" && res["noreplace"] == "EEXIST",
                "\(res)")
            #expect(res["badparam"] == "EINVAL" && res["badname"] == "EINVAL", "\(res)")
            #expect(res["nosuchattr"] == "ENODATA", "\(res)")
            // A date is accepted and ignored, as utimensat is (issue 28.9: mv and rsync -X copy them).
            #expect(res["readonly"] == "OK", "\(res)")
            #expect(res["toolarge"] == "EFBIG", "\(res)")
            #expect(res["xdev"] == "EXDEV" && res["notempty"] == "ENOTEMPTY", "\(res)")
            #expect(res["after"] == "OK " + "alpha".hexUTF8, "\(res)")
            #expect(try box.findGeneric("t", "b") == Array("beta".utf8))
        }
    }

    @Test("EACCES: an item that needs user presence, a locked keychain, another user")
    func denied() throws {
        try withMount(setup: { box in
            try box.addGeneric("acc", "presence", "needs-a-prompt", extra: ["--access-control", "userPresence"])
            try box.addGeneric("acc", "plain", "plain-secret")
        }) { box in
            // No way to prompt in the daemon: the data is refused, the attributes are not.
            let p = try box.pyResults(
                """
                d = sys.argv[1]
                t('read', read, d + '/presence')
                t('write', wfd, d + '/presence', os.O_WRONLY | os.O_TRUNC, b'overwrite')
                t('stat', lambda: os.stat(d + '/presence').st_size)
                t('xattr', os.getxattr, d + '/presence', 'user.keychain.accessControl')
                """, [box.mnt + "/genp/acc"])
            #expect(p["read"] == "EACCES", "\(p)")
            #expect(p["write"] == "EACCES", "\(p)")
            #expect(p["stat"] == "OK 14", "\(p)")
            #expect(p["xattr"] == "OK " + "userPresence".hexUTF8, "\(p)")

            // Locked: WhenUnlocked data is EACCES until unlocked again.
            let lock = try box.cli(["lock", box.mnt], timeout: 10)
            if lock.status == 0 {
                let r = try box.pyResults("t('read', read, sys.argv[1])", [box.mnt + "/genp/acc/plain"])
                #expect(r["read"] == "EACCES", "read while locked: \(r)")
                let u = try box.cli(["unlock", box.mnt, "--passphrase-file", box.passphraseFile], timeout: 10)
                #expect(u.status == 0, "\(u.summary)")
                #expect(try box.sh("cat \(q(box.mnt + "/genp/acc/plain"))").stdout == "plain-secret")
            } else {
                Issue.record("keychainfs lock failed: \(lock.summary)")
            }

            // Another user: the mount is private to the mounting user.
            let other = try box.sh(
                "setpriv --reuid=65534 --regid=65534 --clear-groups cat \(q(box.mnt + "/genp/acc/plain"))")
            #expect(other.status != 0 && other.stderr.contains("Permission denied"), "\(other.summary)")
        }
    }

    @Test("EIO for tampered data, with a log line that names the item id and not the secret")
    func tampered() throws {
        let secret = "tamper-secret-" + UUID().uuidString
        try withMount(setup: { box in
            try box.addGeneric("tamper", "victim", secret)
            try box.addGeneric("tamper", "fine", "fine-secret")
        }) { box in
            let victim = try #require(try box.dump().first { $0["account"] == "victim" })
            // Flip one bit of the sealed data in the vault file, behind the daemon's back.
            let flip = try box.py(
                """
                import sqlite3
                c = sqlite3.connect(sys.argv[1], timeout=10)
                row = c.execute('select data from items where id = ?', (int(sys.argv[2]),)).fetchone()
                d = bytearray(row[0]); d[len(d) // 2] ^= 1
                c.execute('update items set data = ? where id = ?', (bytes(d), int(sys.argv[2])))
                c.commit(); c.close()
                print('flipped')
                """, [box.vault, String(victim.id)])
            try #require(flip.stdout.contains("flipped"), "\(flip.summary)")
            let r = try box.pyResults("t('read', read, sys.argv[1])", [box.mnt + "/genp/tamper/victim"])
            #expect(r["read"] == "EIO", "\(r)")
            let log = box.log
            #expect(log.contains("item \(victim.id)"), "the log does not name item \(victim.id): \(log)")
            #expect(!log.contains(secret) && !log.contains("fine-secret"), "the log contains a secret")
            let cat = try box.sh("cat \(q(box.mnt + "/genp/tamper/victim"))")
            #expect(
                cat.status != 0 && cat.stderr.contains("Input/output error") && !cat.stdout.contains(secret),
                "\(cat.summary)")
        }
    }
}
