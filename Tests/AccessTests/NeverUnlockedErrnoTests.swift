import Foundation
import Testing

// Issue 8: a core failure that no node wraps is converted at the FUSE boundary through the
// status table. On a mount that was never unlocked, the core answers
// errSecInteractionNotAllowed, which is EACCES at the file level (docs/errors.md), never EIO.

extension AccessSuite {
    @Suite("never unlocked: core failures answer their errno") struct NeverUnlockedErrnoTests {
        @Test("directory and scratch-file operations that reach the core answer EACCES, not EIO")
        func unwrappedCoreFailuresAreEACCES() throws {
            try withMount(
                options: ["locked"],
                setup: { box in
                    try box.addGeneric("wu", "alice", "wu-secret")
                }
            ) { box in
                let r = try box.py(
                    """
                    m = sys.argv[1]
                    t('mkdir', os.mkdir, m + '/genp/fresh')
                    t('rename-dir', os.rename, m + '/genp/wu', m + '/genp/other')
                    t('rmdir', os.rmdir, m + '/genp/wu')
                    def scratch():
                        with open(m + '/cert/.x.swp', 'wb') as f: f.write(b'editor state')
                    t('scratch', scratch)
                    t('rename-scratch', os.rename, m + '/cert/.x.swp', m + '/cert/real')
                    t('read', read, m + '/genp/wu/alice')
                    t('unlink', os.unlink, m + '/genp/wu/alice')
                    """, [box.mnt])
                let out = labelled(r)
                // Each of these asks the core (does the service have items? add the item…),
                // which answers errSecInteractionNotAllowed; no node wraps it, and the session
                // converts it once through the status table.
                for label in ["mkdir", "rename-dir", "rmdir", "rename-scratch", "read", "unlink"] {
                    #expect(out[label] == "EACCES", "\(label) before the first unlock: \(r.summary)")
                }
                // An editor scratch file lives in daemon memory: no vault access needed.
                #expect(out["scratch"] == "OK", "writing an editor scratch file: \(r.summary)")
                #expect(!r.stdout.contains("EIO"), "no request answered EIO: \(r.summary)")
            }
        }
    }
}
