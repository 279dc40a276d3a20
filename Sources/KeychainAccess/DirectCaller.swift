import FoundationEssentials
import Glibc
@_spi(CallerRule) import Keychain

/// The caller of a one-shot command that opened the vault itself because no service runs for it
/// (docs/service.md): made here, by the same rules the service applies to the same process on its
/// socket, so no face constructs a `Caller` of its own.
public enum DirectCaller {
    /// A command that holds the vault's passphrase (the CLI): every group of the policy,
    /// `default` first, and user presence asked as the mount asks it, through pinentry on this
    /// process's terminal (any of fds 0–2) or display. With neither, such an item is
    /// errSecInteractionNotAllowed, Apple's answer when no UI can be shown.
    public static func holder(of keychain: Keychain, describedAs description: String) throws -> Caller {
        let groups = try keychain.accessPolicy().groups.map(\.name).filter { $0 != Caller.defaultAccessGroup }
        return Caller(
            accessGroups: [Caller.defaultAccessGroup] + groups,
            presence: PinentryPresence(keychain: keychain, program: nil, reuseSeconds: 0),
            authenticationUI: .allow, processDescription: description,
            processKey: ProcessIdentity.of(tid: getpid())?.key ?? "")
    }

    /// A credential helper: the groups its own executable (`/proc/self/exe`) is in under the
    /// vault's policy, as the service would give it; it has no prompt for user presence, so such
    /// items are reported, not asked for. A policy that does not verify decides nothing: thrown.
    public static func ownExecutable(of keychain: Keychain, describedAs description: String) throws -> Caller {
        let policy = try keychain.accessPolicy()
        let executable = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        return Caller(
            accessGroups: policy.accessGroups(forExecutable: executable), authenticationUI: .fail,
            processDescription: description)
    }
}
