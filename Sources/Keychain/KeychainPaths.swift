import FoundationEssentials
import Glibc

/// Default locations, after the XDG base directory spec.
public enum KeychainPaths {
    static func xdg(_ variable: String, _ fallback: String) -> String {
        if let v = ProcessInfo.processInfo.environment[variable], v.hasPrefix("/") { return v }
        let home = ProcessInfo.processInfo.environment["HOME"] ?? homeDirectory()
        return home + "/" + fallback
    }

    /// The user's home directory as Foundation's `NSHomeDirectory()` found it: `$HOME` if set and
    /// not empty, else the password database's entry for our user, else `/`.
    public static func homeDirectory() -> String {
        if let home = ProcessInfo.processInfo.environment["HOME"], !home.isEmpty { return home }
        if let entry = getpwuid(getuid()), let dir = entry.pointee.pw_dir { return String(cString: dir) }
        return "/"
    }

    /// `$KEYCHAINFS_VAULT`, else `$XDG_DATA_HOME/keychainfs/default.vault`.
    public static func defaultVault() -> String {
        if let v = ProcessInfo.processInfo.environment["KEYCHAINFS_VAULT"], !v.isEmpty { return v }
        return xdg("XDG_DATA_HOME", ".local/share") + "/keychainfs/default.vault"
    }

    /// The directory part of a path, without touching the filesystem. (Foundation's
    /// NSString.deletingLastPathComponent crashes on a one-character relative path.)
    public static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        let dir = String(path[..<slash])
        return dir.isEmpty ? "/" : dir
    }

    /// The last component of a path.
    public static func lastComponent(of path: String) -> String {
        path.split(separator: "/").last.map(String.init) ?? path
    }

    /// `$XDG_STATE_HOME/keychainfs`: the device key, daemon logs.
    public static func stateDirectory() -> String {
        xdg("XDG_STATE_HOME", ".local/state") + "/keychainfs"
    }

    /// `$XDG_STATE_HOME/keychainfs/device.key`.
    public static func deviceKey() -> String { stateDirectory() + "/device.key" }
}
