import Foundation
import Testing

/// Issue 13: `keychainfs mount -f` under a `Type=notify` unit tells systemd READY=1 once the mount
/// is live, and STOPPING=1 when it ends; a datagram socket stands in for systemd's.
@Suite("sd_notify")
struct SystemdNotifyTests {
    static let listener = """
        import socket, sys
        path, mountpoint = sys.argv[1], sys.argv[2]
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.bind(path)
        s.settimeout(40)
        open(path + '.bound', 'w').close()
        for _ in range(2):
            message = s.recv(4096).decode()
            mounted = any(line.split()[4] == mountpoint for line in open('/proc/self/mountinfo'))
            print(message, 'mounted' if mounted else 'not-mounted', flush=True)
        """

    @Test("mount -f sends READY=1 after the mount is live and STOPPING=1 at unmount")
    func readyAndStopping() throws {
        let box = try Sandbox()
        try box.initVault()
        let socketPath = box.root + "/notify.sock"
        let listener = try box.spawn("/usr/bin/python3", ["-c", Self.listener, socketPath, box.mnt])
        #expect(waitUntil(10) { FileManager.default.fileExists(atPath: socketPath + ".bound") }, "no listener")
        let binary = try #require(keychainfsBinary)
        let daemon = try box.spawn(
            binary, ["mount", box.vault, box.mnt, "-f", "--passphrase-file", box.passphraseFile],
            env: ["NOTIFY_SOCKET": socketPath])
        defer { if MountInfo.isKeychainMount(box.mnt) { _ = try? box.run(["unmount", box.mnt]) } }
        #expect(waitUntil(20) { listener.stdoutSoFar.contains("READY=1") }, "no READY=1: \(listener.stdoutSoFar)")
        #expect(listener.stdoutSoFar.hasPrefix("READY=1 mounted\n"), "\(listener.stdoutSoFar)")
        expectSuccess(try box.run(["unmount", box.mnt]))
        let heard = listener.wait(timeout: 20)
        // STOPPING=1 follows the end of the FUSE loop; the kernel may not have dropped the mount yet.
        #expect(heard.stdout.hasPrefix("READY=1 mounted\nSTOPPING=1 "), "\(heard.summary)")
        let ended = daemon.wait(timeout: 20)
        #expect(ended.status == 0, "mount -f: \(ended.summary)")
    }
}
