import CSystemd
import FoundationEssentials
import Glibc

/// sd_notify(3), from the libsystemd the project already links for sd-bus: a `Type=notify` unit
/// running `keychainfs mount -f` or `serve -f` is "started" only once the service is live.
/// Outside systemd (no `$NOTIFY_SOCKET`) it does nothing.
enum SystemdNotify {
    /// Sends `state` (`READY=1`, `STOPPING=1`) and reports whether it was delivered.
    @discardableResult
    static func send(_ state: String) -> Bool { sd_notify(0, state) > 0 }
}
