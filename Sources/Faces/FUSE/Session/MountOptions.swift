/// Options of a mount, parsed from `-o`.
public struct MountOptions: Sendable {
    public var allowOther = false
    public var defaultPermissions = false
    public var debug = false
    /// Kernel cache lifetime of names and attributes. Changes made behind the kernel's back
    /// (the CLI, another process) become visible within this time; our own changes are
    /// invalidated explicitly.
    public var cacheSeconds: Double = 1.0
    public var fsname = "keychainfs"
    /// Lock the keychain after this many seconds without a request (nil: never).
    public var lockAfter: Double?
    /// Mount without unlocking: nothing is readable before the first `keychainfs unlock`.
    public var startLocked = false

    public init() {}
}
