#if canImport(Glibc)
    import Glibc
#endif

/// A keychain status as a process's exit code: the OSStatus's own low byte, the rule macOS
/// `security` follows, which the CLI and both credential helpers share (docs/cli.md). Each face
/// keeps its own table of what a status answers in its protocol: the errno in the FUSE face
/// (Sources/Faces/FUSE/Session/ErrnoConversion.swift, docs/errors.md), the D-Bus error name in the
/// Secret Service (Sources/Faces/SecretService/ErrorTable.swift, docs/secret-service.md).
extension KeychainStatus {
    /// The exit code of a CLI command that failed with this status: the OSStatus's low byte,
    /// as macOS `security` exits (errSecItemNotFound −25300 → 44, errSecDuplicateItem −25299
    /// → 45, errSecAuthFailed −25293 → 51), so scripts written for `security` read ours alike.
    /// A status whose low byte is 0 or 2 would read as success or as a usage error (2, which
    /// never reaches the core); it exits 1 instead. No status keychainfs throws has such a
    /// byte; the rule covers OSStatus values it may pass on from elsewhere (the daemon's reply).
    public var exitCode: Int32 {
        if self == .success { return 0 }
        let lowByte = Int32(UInt8(truncatingIfNeeded: rawValue))
        return lowByte == 0 || lowByte == 2 ? 1 : lowByte
    }
}
