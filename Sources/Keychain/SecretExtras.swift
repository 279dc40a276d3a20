import FoundationEssentials
import Glibc
import KeychainCrypto

// A password item's extras: what a face keeps beside the secret and hands back only to itself
// (git's `password_expiry_utc` and `oauth_refresh_token`, kept with the password they belong
// to). They are as secret as the password (an OAuth refresh token is a credential), so they
// are sealed with it, in the same data box; but the secret every face shows (the mount's file,
// `find-… -w`, the Secret Service, netrc, docker, `kc://`) is the password alone, the same
// bytes everywhere, and a face that wants the extras asks for them (`KeychainItem.extras`).
//
// Stored form: the data box holds `secret NUL extras`, and the derived attribute
// `secretExtrasLength` (in the authenticated attribute box) says how many bytes after the NUL
// are extras. The attribute makes the split exact whatever the secret holds (a secret may hold
// NULs of its own: the split counts from the end), lets a file's size be known without
// decrypting, and keeps the bytes what keychainfs wrote before it existed, so a vault stays
// readable by the older helper (which cut at the first NUL).
//
// Before the attribute (vaults written before 2026-11-28), git's helper stored the same bytes
// with no attribute; such an internet password is split by `legacySplit` when its tail is
// exactly git's lines, and is written in the new form at its next change. docs/credentials.md,
// "What is stored".

/// The extras' attribute and the stored form.
public enum SecretExtras {
    /// `secretExtrasLength`: derived, read-only, on password items that have extras.
    public static let lengthAttribute = Schema.named("secretExtrasLength")
    /// The classes that keep extras: the password classes.
    static let classes: Set<ItemClass> = [.genericPassword, .internetPassword]
    /// The only extras git's helper ever stored, in the legacy form.
    static let legacyKeys: [String] = ["password_expiry_utc", "oauth_refresh_token"]

    /// The bytes sealed for `secret` with `extras`, and the attribute value that says so (nil:
    /// no extras, the secret is stored as is).
    static func join(_ secret: [UInt8], _ extras: [UInt8]) -> (plaintext: [UInt8], length: AttributeValue?) {
        guard !extras.isEmpty else { return (secret, nil) }
        return (secret + [0] + extras, .number(Int64(extras.count)))
    }

    /// Extras are kept on password items only, and with the secret they may not pass the data
    /// limit (errSecParam, errSecDataTooLarge).
    static func check(_ extras: [UInt8], for itemClass: ItemClass, secret: [UInt8]) throws {
        guard classes.contains(itemClass) else {
            throw KeychainError(.param, "only password items keep extras beside their secret")
        }
        guard secret.count + 1 + extras.count <= Keychain.maxDataSize else {
            throw KeychainError(
                .dataTooLarge,
                "the secret and its extras are \(secret.count + 1 + extras.count) bytes, over the limit of \(Keychain.maxDataSize) bytes (1 MiB)"
            )
        }
    }

    /// The stored length of the extras with their NUL (0 when none), from the attributes alone.
    static func storedOverhead(_ attributes: Attributes) -> Int {
        guard case .number(let n)? = attributes[lengthAttribute], n > 0 else { return 0 }
        return Int(n) + 1
    }

    /// The secret and the extras of a stored plaintext. A length that does not fit the data
    /// (which the attribute box's authentication makes impossible short of a bug) is errSecDecode.
    static func split(_ itemClass: ItemClass, _ attributes: Attributes, _ stored: [UInt8]) throws -> (
        secret: [UInt8], extras: [UInt8]?
    ) {
        let overhead = storedOverhead(attributes)
        if overhead > 0 {
            let cut = stored.count - overhead
            guard cut >= 0, stored[cut] == 0 else {
                throw KeychainError(.decode, "the stored extras of this item do not fit its data")
            }
            return (Array(stored[..<cut]), Array(stored[(cut + 1)...]))
        }
        if itemClass == .internetPassword, let (secret, extras) = legacySplit(stored) { return (secret, extras) }
        return (stored, nil)
    }

    /// git's helper's form before the attribute: the password, a NUL, then one or more lines
    /// `key=value\n` whose keys are git's two extras, and nothing else. Any other bytes after a
    /// NUL are the secret's own.
    static func legacySplit(_ stored: [UInt8]) -> (secret: [UInt8], extras: [UInt8])? {
        guard let nul = stored.firstIndex(of: 0), nul + 1 < stored.count, stored.last == UInt8(ascii: "\n") else {
            return nil
        }
        let tail = stored[(nul + 1)...]
        for line in tail.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).dropLast() {
            guard let eq = line.firstIndex(of: UInt8(ascii: "=")),
                legacyKeys.contains(String(decoding: line[..<eq], as: UTF8.self)),
                !line[(eq + 1)...].contains(0)
            else { return nil }
        }
        return (Array(stored[..<nul]), Array(tail))
    }
}
