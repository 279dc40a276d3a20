import Foundation
import Testing

/// Issue 28, point 9: the tools that copy an item's xattrs with it work without an error line.
/// `mv` from /genp to /inet is a copy (rename between classes is EXDEV) that copies the item's
/// `user.keychain.*` xattrs, the dates among them; `rsync -aX` of a backup (made with
/// `rsync -aX` out of the mount) back into it sets the backup's xattrs on its temp file
/// `.f.XXXXXX` before renaming it to f. Real mv, rsync, setfattr and getfattr.
@Suite("mv between classes and rsync -aX restores (issue 28)")
struct CrossClassToolTests {
    func xattr(_ box: TestSandbox, _ path: String, _ name: String) throws -> String? {
        let r = try box.sh("getfattr --only-values -n \(q("user.keychain." + name)) \(q(path))")
        return r.status == 0 ? r.stdout : nil
    }

    @Test("mv /genp/<svc>/<acct> into /inet/<server>/: exit 0, no error line, the secret and comment go along")
    func mvFromGenpToInet() throws {
        try withMount { box in
            let src = box.mnt + "/genp/mvsvc/alice", dst = box.mnt + "/inet/https:mv.example.com"
            let setup = try box.sh(
                """
                set -e; mkdir \(q(box.mnt + "/genp/mvsvc")) \(q(dst)); printf 'mv secret' > \(q(src))
                setfattr -n user.keychain.comment -v 'from genp' \(q(src))
                """)
            try #require(setup.status == 0, "\(setup.summary)")
            // mv copies this (a date: read-only to SecItemUpdate) onto the new item.
            #expect(try xattr(box, src, "creationDate") != nil)
            let mv = try box.sh("mv \(q(src)) \(q(dst + "/"))")
            #expect(mv.status == 0 && mv.stderr.isEmpty, "mv: \(mv.summary)")
            let moved = dst + "/alice"
            #expect(try box.sh("cat \(q(moved))").stdout == "mv secret")
            #expect(try xattr(box, moved, "comment") == "from genp")
            #expect(try xattr(box, moved, "account") == "alice")
            #expect(try xattr(box, moved, "server") == "mv.example.com")
            // The dates are the new item's own: accepted from mv, and changed nothing.
            #expect(try xattr(box, moved, "creationDate") != nil)
            #expect(try box.sh("ls \(q(box.mnt + "/genp/mvsvc"))").lines == [])
            #expect(try box.secretSummary("mvsvc", "alice") == "<not found>")
        }
    }

    @Test("a date xattr set to a well-formed date is accepted and changes nothing; a malformed one is EINVAL")
    func datesAreAcceptedAndIgnored() throws {
        try withMount { box in
            let f = box.mnt + "/genp/dates/f"
            try #require(try box.sh("mkdir \(q(box.mnt + "/genp/dates")) && printf x > \(q(f))").status == 0)
            let before = try #require(try xattr(box, f, "creationDate"))
            let set = try box.sh("setfattr -n user.keychain.creationDate -v 2001-02-03T04:05:06Z \(q(f))")
            #expect(set.status == 0 && set.stderr.isEmpty, "\(set.summary)")
            #expect(try xattr(box, f, "creationDate") == before)
            let bad = try box.sh("setfattr -n user.keychain.modificationDate -v yesterday \(q(f))")
            #expect(bad.status != 0 && bad.stderr.contains("Invalid argument"), "\(bad.summary)")
        }
    }

    @Test("rsync -aX of a backup into the mount: exit 0, no error line, the backup's bytes and attributes")
    func rsyncRestoresABackup() throws {
        try withMount { box in
            let d = box.mnt + "/genp/rsvc", backup = box.root + "/backup"
            let setup = try box.sh(
                """
                set -e; mkdir \(q(d)); printf 'one secret' > \(q(d + "/one")); printf 'two secret' > \(q(d + "/two"))
                setfattr -n user.keychain.comment -v 'one comment' \(q(d + "/one"))
                setfattr -n user.keychain.label -v 'two label' \(q(d + "/two"))
                rsync -aX \(q(d + "/")) \(q(backup + "/"))
                """)
            try #require(setup.status == 0, "backup: \(setup.summary)")
            #expect(try box.sh("getfattr --only-values -n user.keychain.account \(q(backup + "/one"))").stdout == "one")
            // The backup differs from the mount: one's bytes and comment changed, two deleted.
            let change = try box.sh(
                """
                set -e; printf 'restored one' > \(q(backup + "/one")); touch -d 2001-01-01 \(q(backup + "/one"))
                setfattr -n user.keychain.comment -v 'restored comment' \(q(backup + "/one")); rm \(q(d + "/two"))
                """)
            try #require(change.status == 0, "\(change.summary)")

            let restore = try box.sh("rsync -aX \(q(backup + "/")) \(q(d + "/"))")
            #expect(restore.status == 0 && restore.stderr.isEmpty, "rsync -aX restore: \(restore.summary)")
            #expect(try box.sh("ls -a \(q(d))").lines == [".", "..", "one", "two"])
            #expect(try box.secretSummary("rsvc", "one") == "restored one")
            #expect(try box.secretSummary("rsvc", "two") == "two secret")
            #expect(try xattr(box, d + "/one", "comment") == "restored comment")
            #expect(try xattr(box, d + "/two", "label") == "two label")
            #expect(try xattr(box, d + "/two", "account") == "two")
            // Again, with nothing changed: rsync has nothing to do, and says nothing.
            let again = try box.sh("rsync -aX \(q(backup + "/")) \(q(d + "/"))")
            #expect(again.status == 0 && again.stderr.isEmpty, "\(again.summary)")
        }
    }

    @Test("rsync -aX of a backup into /inet/<server>: exit 0, no error line, the backup's bytes and comment")
    func rsyncRestoresInternetPasswords() throws {
        try withMount { box in
            let d = box.mnt + "/inet/https:rsync.example.com", backup = box.root + "/inet-backup"
            let r = try box.sh(
                """
                set -e; mkdir \(q(d)); printf pw1 > \(q(d + "/alice")); printf pw2 > \(q(d + "/bob"))
                rsync -aX \(q(d + "/")) \(q(backup + "/"))
                printf pw1-restored > \(q(backup + "/alice")); setfattr -n user.keychain.comment -v back \(q(backup + "/alice"))
                rm \(q(d + "/bob"))
                rsync -aX \(q(backup + "/")) \(q(d + "/"))
                """)
            #expect(r.status == 0 && r.stderr.isEmpty, "\(r.summary)")
            #expect(
                try box.sh("ls -a \(q(d)) && cat \(q(d + "/alice")) \(q(d + "/bob"))").lines == [
                    ".", "..", "alice", "bob", "pw1-restoredpw2",
                ])
            #expect(try xattr(box, d + "/alice", "comment") == "back")
            #expect(try xattr(box, d + "/bob", "server") == "rsync.example.com")
        }
    }
}
