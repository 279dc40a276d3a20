// The cases of git's t/t0303-credential-external.sh (git's test for external credential
// helpers), as its t/lib-credential.sh spells them: each `check` is git's own (stdin for
// `git credential <command>`, the stdout and stderr git must give, the askpass lines
// included). CI cannot fetch git's source, so they are copied here; GitT0303MirrorTests runs
// them in t0303's order against git-credential-keychainfs, through the installed git.

/// One `check` of lib-credential.sh: `git credential <command>` with `input`; stdout and
/// stderr must be exactly `stdout` and `stderr` (approve and reject: both empty).
struct T0303Check: Sendable {
    let command: String
    let input: [String]
    var stdout: [String] = []
    var stderr: [String] = []
    /// `test_config credential.usehttppath true` for the test.
    var useHTTPPath = false
}

/// One test_expect_success of t0303, by the name t0303 gives it ("helper (keychainfs) …").
struct T0303Case: Sendable {
    let name: String
    let checks: [T0303Check]
    /// Uses fields git sends only from 2.41 on (password_expiry_utc, oauth_refresh_token): with an
    /// older git the same requests go to the helper directly, as git ≥ 2.41 would send them.
    var needsGit241 = false
    /// git ≥ 2.41 echoes `wwwauth[]` back from fill; an older git drops it, so only the lines
    /// without it are compared there.
    var echoesWWWAuth = false
}

enum T0303 {
    static let site = ["protocol=https", "host=example.com"]

    static func askpass(_ url: String, user: String? = nil) -> [String] {
        let withUser = url.replacingOccurrences(of: "://", with: "://\(user ?? "askpass-username")@")
        return (user == nil ? ["askpass: Username for '\(url)':"] : []) + ["askpass: Password for '\(withUser)':"]
    }

    /// A fill that no helper answers: git asks askpass for what is missing.
    static func unanswered(_ fields: [String], url: String, user: String? = nil) -> T0303Check {
        T0303Check(
            command: "fill", input: fields + (user.map { ["username=\($0)"] } ?? []),
            stdout: fields + ["username=\(user ?? "askpass-username")", "password=askpass-password"],
            stderr: askpass(url, user: user))
    }

    static func approve(_ user: String, _ password: String, _ extra: [String] = []) -> T0303Check {
        T0303Check(command: "approve", input: site + ["username=\(user)", "password=\(password)"] + extra)
    }

    static func reject(_ fields: [String]) -> T0303Check { T0303Check(command: "reject", input: fields) }

    static func answered(_ user: String, _ password: String, _ extra: [String] = []) -> T0303Check {
        T0303Check(
            command: "fill", input: site + ["username=\(user)"],
            stdout: site + ["username=\(user)", "password=\(password)"] + extra)
    }

    static let noExistingData = T0303Case(
        name: "helper (keychainfs) has no existing data", checks: [unanswered(site, url: "https://example.com")])
    static let storesPassword = T0303Case(
        name: "helper (keychainfs) stores password", checks: [approve("store-user", "store-pass")])
    static let canRetrievePassword = T0303Case(
        name: "helper (keychainfs) can retrieve password",
        checks: [
            T0303Check(command: "fill", input: site, stdout: site + ["username=store-user", "password=store-pass"])
        ])
    static let requiresMatchingProtocol = T0303Case(
        name: "helper (keychainfs) requires matching protocol",
        checks: [unanswered(["protocol=http", "host=example.com"], url: "http://example.com")])
    static let requiresMatchingHost = T0303Case(
        name: "helper (keychainfs) requires matching host",
        checks: [unanswered(["protocol=https", "host=other.tld"], url: "https://other.tld")])
    static let requiresMatchingUsername = T0303Case(
        name: "helper (keychainfs) requires matching username",
        checks: [unanswered(site, url: "https://example.com", user: "other")])
    static let requiresMatchingPath = T0303Case(
        name: "helper (keychainfs) requires matching path",
        checks: [
            T0303Check(
                command: "approve",
                input: ["protocol=http", "host=path.tld", "path=foo.git", "username=user", "password=pass"],
                useHTTPPath: true),
            T0303Check(
                command: "fill", input: ["protocol=http", "host=path.tld", "path=bar.git"],
                stdout: [
                    "protocol=http", "host=path.tld", "path=bar.git", "username=askpass-username",
                    "password=askpass-password",
                ],
                stderr: askpass("http://path.tld/bar.git"), useHTTPPath: true),
        ])
    static let overwritesOnStore = T0303Case(
        name: "helper (keychainfs) overwrites on store",
        checks: [
            approve("user-overwrite", "pass1"), approve("user-overwrite", "pass2"),
            answered("user-overwrite", "pass2"),
            reject(site + ["username=user-overwrite", "password=pass2"]),
            unanswered(site, url: "https://example.com", user: "user-overwrite"),
        ])
    static let canForgetHost = T0303Case(
        name: "helper (keychainfs) can forget host",
        checks: [reject(site), unanswered(site, url: "https://example.com")])
    static let canStoreMultipleUsers = T0303Case(
        name: "helper (keychainfs) can store multiple users",
        checks: [
            approve("user1", "pass1"), approve("user2", "pass2"), answered("user1", "pass1"),
            answered("user2", "pass2"),
        ]
    )
    static let doesNotEraseADistinctPassword = T0303Case(
        name: "helper (keychainfs) does not erase a password distinct from input",
        checks: [
            approve("user-distinct-pass", "pass1"), reject(site + ["username=user-distinct-pass", "password=pass2"]),
            answered("user-distinct-pass", "pass1"),
        ])
    static let canForgetUser = T0303Case(
        name: "helper (keychainfs) can forget user",
        checks: [reject(site + ["username=user1"]), unanswered(site, url: "https://example.com", user: "user1")])
    static let remembersOtherUser = T0303Case(
        name: "helper (keychainfs) remembers other user", checks: [answered("user2", "pass2")])
    static let canStoreEmptyUsername = T0303Case(
        name: "helper (keychainfs) can store empty username",
        checks: [
            T0303Check(command: "approve", input: ["protocol=https", "host=sso.tld", "username=", "password="]),
            T0303Check(
                command: "fill", input: ["protocol=https", "host=sso.tld"],
                stdout: ["protocol=https", "host=sso.tld", "username=", "password="]),
        ])
    static let erasesAllMatchingCredentials = T0303Case(
        name: "helper (keychainfs) erases all matching credentials",
        checks: [
            approve("user-erase1", "pass1"), approve("user-erase2", "pass1"), reject(site),
            unanswered(site, url: "https://example.com"),
        ])
    /// GIT_TEST_LONG_CRED_BUFFER's default: 1024 - 23 bytes of realm.
    static let longValue = String(repeating: "a", count: 1024 - 23)
    static let notConfusedByLongHeader = T0303Case(
        name: "helper (keychainfs) not confused by long header",
        checks: [
            T0303Check(
                command: "approve",
                input: ["protocol=https", "host=victim.example.com", "username=user", "password=to-be-stolen"]),
            T0303Check(
                command: "fill",
                input: [
                    "protocol=https", "host=badguy.example.com",
                    "wwwauth[]=basic realm=\(longValue)host=victim.example.com",
                ],
                stdout: [
                    "protocol=https", "host=badguy.example.com", "username=askpass-username",
                    "password=askpass-password",
                    "wwwauth[]=basic realm=\(longValue)host=victim.example.com",
                ],
                stderr: askpass("https://badguy.example.com")),
        ], echoesWWWAuth: true)
    static let storesPasswordExpiry = T0303Case(
        name: "helper (keychainfs) stores password_expiry_utc",
        checks: [approve("user-expiry", "pass", ["password_expiry_utc=9999999999"])], needsGit241: true)
    static let getsPasswordExpiry = T0303Case(
        name: "helper (keychainfs) gets password_expiry_utc",
        checks: [answered("user-expiry", "pass", ["password_expiry_utc=9999999999"])], needsGit241: true)
    static let overwritesWhenExpiryChanges = T0303Case(
        name: "helper (keychainfs) overwrites when password_expiry_utc changes",
        checks: [
            approve("user-expiry-overwrite", "pass1", ["password_expiry_utc=9999999998"]),
            approve("user-expiry-overwrite", "pass2", ["password_expiry_utc=9999999999"]),
            answered("user-expiry-overwrite", "pass2", ["password_expiry_utc=9999999999"]),
            reject(site + ["username=user-expiry-overwrite", "password=pass2"]),
            unanswered(site, url: "https://example.com", user: "user-expiry-overwrite"),
        ], needsGit241: true)
    static let storesRefreshToken = T0303Case(
        name: "helper (keychainfs) stores oauth_refresh_token",
        checks: [approve("user4", "pass", ["oauth_refresh_token=xyzzy"])], needsGit241: true)
    static let getsRefreshToken = T0303Case(
        name: "helper (keychainfs) gets oauth_refresh_token",
        checks: [answered("user4", "pass", ["oauth_refresh_token=xyzzy"])], needsGit241: true)

    /// helper_test_clean: t0303 runs it before and after its tests (rejects by protocol, host and
    /// username; git shows nothing).
    static let clean: [T0303Check] =
        [
            "store-user", "user1", "user2", "user-expiry", "user-expiry-overwrite", "user4", "user-distinct-pass",
            "user-overwrite", "user-erase1", "user-erase2",
        ].map { reject(site + ["username=\($0)"]) } + [
            reject(["protocol=https", "host=victim.example.com", "username=user"]),
            reject(["protocol=http", "host=path.tld", "username=user"]),
            reject(["protocol=https", "host=timeout.tld", "username=user"]),
            reject(["protocol=https", "host=sso.tld"]),
        ]

    /// t0303 of git 2.39.5 (Debian 12's git): helper_test, in its order.
    static let v2_39: [T0303Case] = [
        noExistingData, storesPassword, canRetrievePassword, requiresMatchingProtocol, requiresMatchingHost,
        requiresMatchingUsername, requiresMatchingPath, canForgetHost, canStoreMultipleUsers, canForgetUser,
        remembersOtherUser, canStoreEmptyUsername,
    ]

    /// t0303 of git master (2.5x): helper_test, helper_test_password_expiry_utc and
    /// helper_test_oauth_refresh_token, in their order.
    static let master: [T0303Case] = [
        noExistingData, storesPassword, canRetrievePassword, requiresMatchingProtocol, requiresMatchingHost,
        requiresMatchingUsername, requiresMatchingPath, overwritesOnStore, canForgetHost, canStoreMultipleUsers,
        doesNotEraseADistinctPassword, canForgetUser, remembersOtherUser, canStoreEmptyUsername,
        erasesAllMatchingCredentials, notConfusedByLongHeader, storesPasswordExpiry, getsPasswordExpiry,
        overwritesWhenExpiryChanges, storesRefreshToken, getsRefreshToken,
    ]
}
