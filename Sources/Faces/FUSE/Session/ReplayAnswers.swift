import CFuse
import FoundationEssentials
import Glibc
import Keychain

/// The answers to the daemon's own requests, made by its replay thread (ChangeReplayer.swift):
/// from the step being replayed, never from the store, with no caller identified, no prompt
/// and no audit line. Each operation below asks `replayed(_:)` first; a request of any other
/// thread goes on to the filesystem as before (one atomic load).
extension FuseSession {
    /// The step the replay thread is in, when `req` comes from it (the outer optional), and
    /// nil inside when it is between steps.
    static func replayed(_ req: fuse_req_t?) -> (session: FuseSession, step: ReplayStep?)? {
        let s = session(req)
        guard s.replayer.isReplaying(pid: fuse_req_ctx(req)!.pointee.pid) else { return nil }
        return (s, s.replayer.step)
    }

    /// lookup: the step's answer for the name; a name the step does not know is absent.
    static func replayLookup(_ req: fuse_req_t?, _ parent: UInt64, _ name: UnsafePointer<CChar>?) -> Bool {
        guard let (s, step) = replayed(req) else { return false }
        let key = ReplayStep.NameKey(parent: parent, name: name.map { String(cString: $0) } ?? "")
        if let found = step?.names[key], let stat = found {
            var e = s.entry(stat)
            fuse_reply_entry(req, &e)
        } else {
            fuse_reply_err(req, ENOENT)
        }
        return true
    }

    /// getattr and setattr of the node the step changes, or of a directory on its paths; any
    /// other inode is answered as for anyone (a getattr decides nothing).
    static func replayAttributes(_ req: fuse_req_t?, _ ino: UInt64) -> Bool {
        guard let (s, step) = replayed(req), let step else { return false }
        let known = step.node.ino == ino ? step.node : step.names.values.lazy.compactMap { $0 }.first { $0.ino == ino }
        guard let node = known else { return false }
        var st = s.stat(node)
        fuse_reply_attr(req, &st, s.timeout(node))
        return true
    }

    /// mknod and mkdir: the node the step makes.
    static func replayMake(_ req: fuse_req_t?) -> Bool {
        guard let (s, step) = replayed(req) else { return false }
        guard let step else {
            fuse_reply_err(req, EIO)
            return true
        }
        var e = s.entry(step.node)
        fuse_reply_entry(req, &e)
        return true
    }

    /// unlink, rmdir, rename, access: done (the change is committed already).
    static func replayDone(_ req: fuse_req_t?) -> Bool {
        guard replayed(req) != nil else { return false }
        fuse_reply_err(req, 0)
        return true
    }

    /// open: a handle of the replay's own, which reads and commits nothing.
    static func replayOpen(_ req: fuse_req_t?, _ fi: UnsafeMutablePointer<fuse_file_info>?) -> Bool {
        guard replayed(req) != nil else { return false }
        guard let fi else {
            fuse_reply_err(req, EINVAL)
            return true
        }
        fi.pointee.fh = ChangeReplayer.handle
        kcfs_fi_set_direct_io(fi, 1)
        fuse_reply_open(req, fi)
        return true
    }

    /// flush, fsync and release of the replay's own handle.
    static func replayHandle(_ req: fuse_req_t?, _ fi: UnsafeMutablePointer<fuse_file_info>?) -> Bool {
        guard let fi, fi.pointee.fh == ChangeReplayer.handle else { return false }
        fuse_reply_err(req, 0)
        return true
    }

    /// getxattr and listxattr: nothing (the kernel may ask for `security.capability`).
    static func replayNoAttributes(_ req: fuse_req_t?, listing: Bool) -> Bool {
        guard replayed(req) != nil else { return false }
        if listing { fuse_reply_xattr(req, 0) } else { fuse_reply_err(req, ENODATA) }
        return true
    }
}
