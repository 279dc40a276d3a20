import CSodium
import CPlatform
#if canImport(Glibc)
    import Glibc
#endif

/// Errors of the cryptographic layer. None of them carries key material or plaintext.
public enum CryptoError: Error, Equatable, Sendable {
    /// An AEAD box did not authenticate: wrong key, wrong associated data, or altered bytes.
    case authenticationFailed
    /// A box is shorter than a nonce and a tag: it cannot be a box at all.
    case malformed
    /// Argon2id could not run (usually: not enough memory for the requested memlimit).
    case keyDerivationFailed
    /// libsodium could not initialise or allocate guarded memory.
    case unavailable(String)
}

/// libsodium must be initialised once per process before any other call; sodium_init is
/// itself thread-safe and idempotent, so every entry point simply calls this.
public enum Sodium {
    private static let initialised: Bool = sodium_init() >= 0

    public static func ensureInitialised() throws {
        guard initialised else { throw CryptoError.unavailable("sodium_init failed") }
    }

    /// Fills a fresh array with `count` bytes from the system CSPRNG.
    public static func randomBytes(_ count: Int) -> [UInt8] {
        precondition(initialised, "libsodium is not initialised")
        var out = [UInt8](repeating: 0, count: count)
        out.withUnsafeMutableBytes { randombytes_buf($0.baseAddress!, $0.count) }
        return out
    }

    /// A uniformly distributed number in 0..<upperBound from the system CSPRNG, without the
    /// modulo bias of `random % n` (libsodium's randombytes_uniform rejects the uneven tail).
    public static func uniformRandom(below upperBound: UInt32) -> UInt32 {
        precondition(initialised, "libsodium is not initialised")
        return randombytes_uniform(upperBound)
    }

    /// Overwrites a buffer with zeros in a way the optimiser cannot remove.
    public static func wipe(_ bytes: inout [UInt8]) {
        bytes.withUnsafeMutableBytes { if let p = $0.baseAddress { sodium_memzero(p, $0.count) } }
    }

    /// Constant-time comparison for MACs and hashes.
    public static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        if a.isEmpty { return true }
        return a.withUnsafeBytes { pa in
            b.withUnsafeBytes { pb in
                sodium_memcmp(pa.baseAddress, pb.baseAddress, a.count) == 0
            }
        }
    }
}

/// Process-wide hardening that every keychainfs process applies before touching a key:
/// no core dumps (they would contain unwrapped keys) and no ptrace attach by other
/// processes of the same user that are not our ancestors.
public enum ProcessHardening {
    public static func apply() {
        var limit = rlimit(rlim_cur: 0, rlim_max: 0)
        _ = setrlimit(Int32(RLIMIT_CORE.rawValue), &limit)
        // Not dumpable also stops same-user ptrace attach and /proc/<pid>/mem reads.
        _ = kcfs_set_dumpable(0)
    }
}
