import Foundation

/// The peers of the `faces` section that need more than a binary: a gnome-keyring-daemon
/// serving the Secret Service on a D-Bus session bus of the run's own, and git's libsecret
/// helper built from its source. Nothing here times anything.
///
/// The bus is private so the bench never writes to, or is answered by, the keyring of whoever
/// runs it; both daemons start in a session of their own (as a desktop session runs them)
/// through `setpriv --pdeathsig TERM`, so they leave if the bench dies, and are stopped by pid.
final class GnomeKeyring {
    static let password = "keychainfs-bench keyring"
    static let programs = [
        "/usr/bin/dbus-daemon", "/usr/bin/dbus-send", "/usr/bin/gnome-keyring-daemon", "/usr/bin/setpriv",
    ]

    let busPid: pid_t
    let keyringPid: pid_t
    /// DBUS_SESSION_BUS_ADDRESS of the private bus.
    let address: String
    private var stopped = false

    private init(busPid: pid_t, keyringPid: pid_t, address: String) {
        self.busPid = busPid
        self.keyringPid = keyringPid
        self.address = address
    }

    /// The programs it needs that are not installed (then the gnome-keyring peers are skipped).
    static var missing: [String] { programs.filter { access($0, X_OK) != 0 } }

    /// Starts the bus, then the keyring daemon with its login keyring unlocked (created on first
    /// use with `password`), and waits until it owns org.freedesktop.secrets on that bus.
    /// `environment` has HOME and the XDG directories in the run's temp directory.
    static func start(directory: String, environment: [String]) throws -> GnomeKeyring {
        let socket = directory + "/bus"
        let config = directory + "/bus.conf"
        // No <servicedir>: nothing is activated behind the bench's back (the session
        // configuration would start a second gnome-keyring-daemon, one it does not know the pid of).
        let text = """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>session</type>
              <listen>unix:path=\(socket)</listen>
              <auth>EXTERNAL</auth>
              <policy context="default">
                <allow send_destination="*" eavesdrop="true"/>
                <allow eavesdrop="true"/>
                <allow own="*"/>
              </policy>
            </busconfig>
            """
        try text.write(toFile: config, atomically: true, encoding: .utf8)
        let log = directory + "/gnome-keyring.log"

        var ready: [Int32] = [0, 0]
        guard pipe(&ready) == 0 else { throw BenchError("pipe: \(String(cString: strerror(errno)))") }
        for fd in ready { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        let bus: pid_t
        do {
            bus = try Spawn.start(
                "/usr/bin/setpriv",
                [
                    "--pdeathsig", "TERM", "--", "/usr/bin/dbus-daemon", "--config-file=\(config)", "--nofork",
                    "--print-address=4",
                ], stdout: log, stderr: log, fds: [(ready[1], 4)], environment: environment, newSession: true)
        } catch {
            for fd in ready { close(fd) }
            throw error
        }
        Cleanup.shared.addChild(bus)
        close(ready[1])
        let line = Daemon.readLine(fd: ready[0], timeout: 10)
        close(ready[0])
        guard let address = line?.trimmingCharacters(in: .whitespaces), address.hasPrefix("unix:") else {
            stop(bus)
            throw BenchError("dbus-daemon gave no address: \(tail(log))")
        }

        let withBus =
            environment.filter { !$0.hasPrefix("DBUS_SESSION_BUS_ADDRESS=") } + [
                "DBUS_SESSION_BUS_ADDRESS=\(address)"
            ]
        var secret: [Int32] = [0, 0]
        guard pipe(&secret) == 0 else {
            stop(bus)
            throw BenchError("pipe: \(String(cString: strerror(errno)))")
        }
        for fd in secret { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        let keyring: pid_t
        do {
            // --unlock reads the login keyring's password on stdin; --foreground keeps it our child.
            keyring = try Spawn.start(
                "/usr/bin/setpriv",
                [
                    "--pdeathsig", "TERM", "--", "/usr/bin/gnome-keyring-daemon", "--foreground",
                    "--components=secrets", "--unlock",
                ], stdout: log, stderr: log, fds: [(secret[0], 0)], environment: withBus, newSession: true)
        } catch {
            for fd in secret { close(fd) }
            stop(bus)
            throw error
        }
        Cleanup.shared.addChild(keyring)
        close(secret[0])
        _ = Array(password.utf8).withUnsafeBytes { write(secret[1], $0.baseAddress, $0.count) }
        close(secret[1])
        let g = GnomeKeyring(busPid: bus, keyringPid: keyring, address: address)
        let deadline = Clock.now() + 10_000_000_000
        while !g.ownsSecrets(directory: directory, environment: withBus) {
            guard Clock.now() < deadline, kill(keyring, 0) == 0 else {
                g.stop()
                throw BenchError("gnome-keyring-daemon did not take org.freedesktop.secrets: \(tail(log))")
            }
            Clock.sleep(0.02)
        }
        return g
    }

    private func ownsSecrets(directory: String, environment: [String]) -> Bool {
        let out = directory + "/name-has-owner"
        unlink(out)
        guard
            let pid = try? Spawn.start(
                "/usr/bin/dbus-send",
                [
                    "--session", "--print-reply", "--dest=org.freedesktop.DBus", "/org/freedesktop/DBus",
                    "org.freedesktop.DBus.NameHasOwner", "string:org.freedesktop.secrets",
                ], stdout: out, stderr: "/dev/null", environment: environment)
        else { return false }
        guard Spawn.wait(pid) == 0 else { return false }
        return ((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").contains("boolean true")
    }

    var keyringRSS: Double { ProcStatus.kilobytes("VmRSS", pid: keyringPid) }
    var keyringPeakRSS: Double { ProcStatus.kilobytes("VmHWM", pid: keyringPid) }
    var busRSS: Double { ProcStatus.kilobytes("VmRSS", pid: busPid) }

    /// The keyring daemon, then its bus; each by pid, SIGKILL if SIGTERM is not enough.
    func stop() {
        guard !stopped else { return }
        stopped = true
        Self.stop(keyringPid)
        Self.stop(busPid)
    }

    private static func stop(_ pid: pid_t) {
        kill(pid, SIGTERM)
        if Spawn.wait(pid, timeout: 10) == nil {
            kill(pid, SIGKILL)
            _ = Spawn.wait(pid, timeout: 5)
        }
        Cleanup.shared.removeChild(pid)
    }

    static func tail(_ log: String) -> String {
        (try? String(contentsOfFile: log, encoding: .utf8))?.split(separator: "\n").suffix(3).joined(
            separator: " | ") ?? ""
    }
}

enum FacesSetup {
    /// Builds git's libsecret helper into `directory` the way git's contrib Makefile does (gcc,
    /// the flags from pkg-config); nil with the reason when it cannot.
    static func buildLibsecretHelper(source: String, directory: String) -> (path: String?, note: String?) {
        for tool in ["/usr/bin/gcc", "/usr/bin/pkg-config"] where access(tool, X_OK) != 0 {
            return (nil, "\(tool) is not installed")
        }
        let binary = directory + "/git-credential-libsecret"
        let log = directory + "/libsecret-build.log"
        let command = "exec gcc -O2 -o '\(binary)' '\(source)' $(pkg-config --cflags --libs libsecret-1 glib-2.0)"
        guard let pid = try? Spawn.start("/bin/sh", ["-c", command], stdout: log, stderr: log) else {
            return (nil, "cannot run /bin/sh")
        }
        guard Spawn.wait(pid) == 0, access(binary, X_OK) == 0 else {
            return (nil, "building \(source) failed (libsecret-1-dev installed?): \(GnomeKeyring.tail(log))")
        }
        return (binary, nil)
    }

    /// Runs a command with `input` on its stdin (a file, as the timed calls get theirs) and
    /// throws, with what it said, unless it exits 0 within 60 s: the untimed stores.
    static func feed(
        _ program: String, _ args: [String], input: String, environment: [String], directory: String
    ) throws {
        let request = directory + "/setup-input"
        let log = directory + "/setup.log"
        unlink(request)
        unlink(log)
        guard FileManager.default.createFile(atPath: request, contents: Data(input.utf8)) else {
            throw BenchError("cannot write \(request)")
        }
        let fd = open(request, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw BenchError("cannot open \(request)") }
        defer { close(fd); unlink(request) }
        let pid = try Spawn.start(program, args, stdout: log, stderr: log, fds: [(fd, 0)], environment: environment)
        let status = Spawn.wait(pid, timeout: 60)
        if status == nil {
            kill(pid, SIGKILL)
            Spawn.wait(pid)
        }
        guard status == 0 else {
            let name = (program as NSString).lastPathComponent
            throw BenchError(
                "\(name) \(args.first ?? "") exited \(status.map(String.init) ?? "late"): \(GnomeKeyring.tail(log))")
        }
    }
}
