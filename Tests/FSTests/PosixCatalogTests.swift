import Foundation
import Testing

/// Issue 14, item 10: the catalog of named POSIX checks (Tests/FSTests/posix/catalog.py), through
/// the mount, at once and from a second process; its persist/… half remounts the vault.
@Suite("POSIX catalog (issue 14)")
struct PosixCatalogTests {

    /// Checks that fail on the current code, each with what it does instead. Remove a name when its
    /// fix lands.
    static let knownFailing: [String: KnownFailure] = [
        "write/two-fds-different-ranges": "the second close's whole-buffer commit undoes the first handle's range",
        "fstat/sees-unflushed-writes": "fstat answers the stored size, not the handle's buffer",
        "isolation/other-process-sees-committed-only": "a reader sees another handle's uncommitted O_TRUNC bytes",
        "unlink/read-open-fd-after-unlink":
            "read(2) of an fd opened before unlink is ENOENT (every read fetches the item)",
        "unlink/open-file-stays-gone": .flaky("listing the directory is ENOENT: it vanished with its last item"),
        "rename/onto-existing": .flaky("the target name is ENOENT right after rename(2) returns"),
        "rename/RENAME_EXCHANGE": "renameat2(RENAME_EXCHANGE) is EINVAL",
        "rename/directory": "a renamed service directory lists empty at once",
        "rename/directory-onto-empty": "the items of a directory renamed onto an empty one are ENOENT at once",
        "unsupported/symlink-refused-not-ENOSYS": "symlink(2) is ENOSYS (not implemented), not a documented errno",
        "unsupported/mkfifo-refused-not-ENOSYS": "mknod(S_IFIFO) is ENOSYS (not implemented), not a documented errno",
        "mknod/regular-file": "mknod(S_IFREG) is ENOSYS; ext4 creates an empty file",
        "fallocate/grows-with-zeros": "fstat after posix_fallocate answers the stored size (3, not 100)",
        "errno/ENOTEMPTY": "rmdir after the last item's unlink is ENOENT: the directory vanished with its last item",
        "race/touch-then-echo-shell": .flaky("`touch f && echo secret > f` leaves f empty (release-time create)"),
        "race/create-empty-then-write-python": .flaky("the second open's close fails EEXIST, the item stays empty"),
        "race/create-empty-then-unlink": .flaky("the unlinked empty create exists again at once"),
        "race/create-empty-then-rename": .flaky("both names exist after create-empty then rename"),
        "race/create-then-ftruncate-567": .flaky("the size falls back to 0 after create then ftruncate(567)"),
        "names/NFC-NFD-pair": "the NFD name reads the NFC item once the kernel's entry cache expires",
        "names/NFC-NFD-pair-added-by-cli": "after ls, the NFD name reads the NFC item (String equality)",
        "names/U+037E-is-not-semicolon": "U+037E is taken for ';': the item becomes account 'a', synchronizable",
        "names/synchronizable-item-opens": "a listed ';synchronizable=true' name is ENOENT to getxattr",
        "names/setxattr-synchronizable-renames-at-once": "after setxattr synchronizable the new name is ENOENT",
        "hidden/.env-is-an-item": "'.env' is a memory-only scratch file (no item, gone at unmount)",
        "hidden/.npmrc-is-an-item": "'.npmrc' is a memory-only scratch file (no item, gone at unmount)",
        "hidden/.token-is-an-item": "'.token' is a memory-only scratch file (no item, gone at unmount)",
        "hidden/editor-scratch-stays-in-memory": "vim's '4913' probe file becomes a stored item",
        "dir/service-stays-while-cwd": "the cwd's service directory is ENOENT once its last item is gone",
        "cert/junk-fails-at-close-no-ghost": "a refused certificate leaves a ghost name: re-create is ENOENT",
    ]

    @Test("catalog.py: open, lseek, ftruncate, write, unlink, rename, errno, races, names, hidden names")
    func catalog() throws {
        let bin = try requireBinary()
        try withMount { box in
            let run = try box.runPosixScript(
                "catalog.py",
                [
                    box.mnt, "--loops", "50", "--cli", bin, "--vault", box.vault, "--passphrase-file",
                    box.passphraseFile,
                ],
                timeout: 150)
            expectChecks(run, knownFailing: Self.knownFailing)
        }
    }
}
