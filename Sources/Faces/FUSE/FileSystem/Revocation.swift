import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import SystemPackage

/// When an open item handle stops serving what its open decrypted: the rule, stated once.
///
/// An open decides access once (visibility under the access policy, the class key, user
/// presence) and decrypts the item into the handle; reads serve that snapshot. The handle is
/// **revoked** — its copies of the secret wiped at once, every later read, write and commit
/// failing with EACCES (reopen to be decided again) — when what allowed it is gone:
/// - **a lock** (`keychainfs lock`, `-o lock_after`, the Secret Service's Lock): handles on
///   items whose class key the lock drops (WhenUnlocked classes; AfterFirstUnlock ones keep
///   reading, as their items stay readable). At the lock itself, through `Keychain.onLock`;
///   an unlock does not give them back.
/// - **the open's decision no longer holds**: the access policy no longer puts the caller's
///   executable in the item's access group, or the item moved to another group, or its
///   protection class's key is not held. Decided again (`Keychain.authorizeRead` with the
///   caller re-evaluated under the current policy) at the handle's first read after a change
///   through this mount touched the item, and otherwise at its first read a second or more
///   after the last decision when the vault changed since (the same second within which the
///   kernel's caches show changes made outside the mount; a read within a second of its open
///   costs nothing more).
/// What does not revoke: the item's **content** changing (the handle keeps the committed
/// snapshot it opened, docs/paths.md), and the item being **deleted or replaced** (an fd on an
/// unlinked file keeps reading it, as on ext4; its writes then fail at close with ENOENT).
extension KeychainFileSystem {
    /// How long the open's decision is trusted without looking at the vault again.
    static let decisionLifetimeNanoseconds: UInt64 = 1_000_000_000

    /// Revokes the handles a lock leaves without their class key.
    func revokeAfterLock() {
        directories.forgetSeen()
        for file in openFiles.itemHandles() {
            guard let accessibility = file.accessibility, !accessibility.readableWhileLocked else { continue }
            file.state.withLock { $0.revoke(.permissionDenied) }
        }
    }

    /// Items changed by any face of this process (the CLI or a helper through the service, the
    /// Secret Service, an import, this mount): the kernel's cached attributes of each go at once,
    /// from the committing thread, before the writer is answered, so the next `stat` of it
    /// anywhere reads it again (issue 30, point 2; this mount's own changes are dropped twice,
    /// which costs one notification). Names are not yet: a new item's name the kernel looked up
    /// as missing, or a renamed item's old name, still lasts the entry timeout.
    func committed(_ changes: [ItemChange]) {
        // A new item's inode is new (ids are never reused): the kernel holds nothing of it, and
        // an import of 100,000 items makes no notification.
        for change in changes where change.itemClass != .identity && change.kind != .added {
            notify(.attributes(Inode.item(change.itemClass, id: change.id)))
        }
        // Names, and the watchers' events: replayed through the mount (ReplayPlan.swift).
        replayer?.enqueue(changes.filter { $0.origin != "fuse" })
        // Readers of /views/changes waiting in poll(2).
        for feed in openFiles.changeFeeds() { feed.wake() }
    }

    /// An unmount is coming (`keychainfs unmount`, through the control socket): the replays
    /// pause for two seconds so that their calls do not make the mount busy.
    public func pauseReplays() { replayer?.pause(seconds: 2) }

    /// A writer of changes made elsewhere waits for their replay before its caller is answered
    /// (bounded: ChangeReplayer.writerWait), so that caller's next call finds the mount's names
    /// as they now are.
    func beforeWriterReturns(_ changes: [ItemChange]) {
        guard changes.contains(where: { $0.origin != "fuse" }), let replayer else { return }
        replayer.waitForReplays()
    }

    /// A change through this mount touched item `ino` (committed bytes, attributes, a rename
    /// over it): the other handles on it decide again at their next read, and the kernel's
    /// cached attributes of it go. Its cached pages go too when a handle open on it filled the
    /// page cache (an `mmap`); otherwise the kernel holds none of its bytes (`direct_io`, and an
    /// open drops pages a released handle left), and the attributes alone are dropped, before
    /// the request that made the change is answered.
    func itemChanged(_ ino: UInt64, by committer: OpenFile? = nil) {
        openFiles.mustDecideAgain(on: ino, except: committer)
        notify(openFiles.pageCacheFilled(on: ino) ? .inode(ino) : .attributes(ino))
    }

    /// Before a read of an item handle: decides again when the rule says so, revoking the
    /// handle if the decision no longer holds.
    func decideAgainIfDue(_ file: OpenFile, itemClass: ItemClass, id: Int64) {
        let now = MonotonicClock.nanoseconds()
        let (due, forced, stamp) = file.state.withLock { s in
            (
                s.revoked == nil && (s.mustDecideAgain || now &- s.decidedAt >= Self.decisionLifetimeNanoseconds),
                s.mustDecideAgain, s.decidedStamp
            )
        }
        guard due else { return }
        let session = self.session(file.caller)
        let current = try? session.changeStamp()
        if !forced, let current, current == stamp {
            file.state.withLock { $0.decidedAt = now }
            return
        }
        let verdict: Errno?
        do {
            try self.session(try access.reevaluated(file.caller)).recheck(id: id, itemClass: itemClass)
            verdict = nil
        } catch KeychainStatus.itemNotFound where (try? session.rowExists(id: id)) == false {
            verdict = nil  // deleted: the snapshot stays, as an unlinked file's data does
        } catch {
            verdict = .permissionDenied
        }
        file.state.withLock { s in
            if let verdict {
                s.revoke(verdict)
            } else {
                s.decidedAt = now
                s.decidedStamp = current
                s.mustDecideAgain = false
            }
        }
    }
}
