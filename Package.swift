// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "keychainfs",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "keychainfs", targets: ["keychainfs"]),
        .executable(name: "git-credential-keychainfs", targets: ["git-credential-keychainfs"]),
        .executable(name: "docker-credential-keychainfs", targets: ["docker-credential-keychainfs"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        // Certificates and private keys: parsing DER/PEM, deriving Apple's certificate and key attributes.
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.0"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.1.0"),
        // Errno: POSIX failures as a typed value (the FUSE face, the CLI, the daemon).
        .package(url: "https://github.com/apple/swift-system", from: "1.4.0"),
        // Property tests of the name and path codecs.
        .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.0"),
    ],
    targets: [
        // System libraries: the design's three fixed dependencies, each wrapped once.
        .systemLibrary(
            name: "CSQLite", pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(
            name: "CSodium", pkgConfig: "libsodium",
            providers: [.apt(["libsodium-dev"])]),
        .systemLibrary(
            name: "CFuse", pkgConfig: "fuse3",
            providers: [.apt(["libfuse3-dev"])]),
        // libpq, PostgreSQL's client library: the sync engine's server, loaded with dlopen on its
        // first use (Sources/CPQ/include/CPQ.h says why); libpq-dev's header gives the types.
        .target(name: "CPQ", linkerSettings: [.linkedLibrary("dl")]),
        // Linux calls Swift's Glibc module lacks (prctl is variadic).
        .systemLibrary(name: "CPlatform"),
        // sd-bus, for the Secret Service provider (a shim for the credential-mask constants).
        .systemLibrary(
            name: "CSystemd", pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]),

        // Keys in guarded memory, AEAD, Argon2id, keyed hashes. Knows nothing of SQLite.
        .target(name: "KeychainCrypto", dependencies: ["CSodium", "CPlatform"]),
        // The SQLite file: schema, transactions, opaque rows. Never sees plaintext.
        .target(name: "KeychainStore", dependencies: ["CSQLite", "CPlatform"]),
        // The keychain: classes, attributes, queries, status codes, key hierarchy, lock state.
        .target(
            name: "Keychain",
            dependencies: [
                "KeychainStore", "KeychainCrypto", "CPlatform",
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ]),
        // Who is calling and what it may do, shared by every face: process identity from /proc,
        // access groups under the vault's policy, user presence (pinentry), the audit log and
        // the daemon log.
        .target(
            name: "KeychainAccess",
            dependencies: [
                "Keychain", "KeychainStore", "CPlatform",
                .product(name: "SystemPackage", package: "swift-system"),
            ]),
        // The keychain service's API socket protocol, its client and how a one-shot command finds
        // the service of its vault (docs/service.md). No server: the helpers link it.
        .target(
            name: "KeychainAPI", dependencies: ["Keychain", "KeychainAccess", "KeychainCrypto", "CPlatform"],
            path: "Sources/KeychainAPI"),
        // The keychain service: the one process that holds an unlocked vault and hosts its faces
        // (the mount, the API socket, the ssh agent, the Secret Service). Its API socket server.
        .target(
            name: "KeychainService",
            dependencies: [
                "Keychain", "KeychainAPI", "KeychainAccess", "KeychainCrypto", "CPlatform", "KeychainFS",
                "KeychainSSHAgent", "KeychainSecretService", "CSystemd", "KeychainSync",
            ],
            path: "Sources/Service"),
        // Faces (Sources/Faces): each translates its users' language into core calls, beside the
        // others; none decides a keychain rule. Next: a Secret Service provider, a target here.
        // The FUSE face: nodes, paths, xattrs, handles, errno.
        .target(
            name: "KeychainFS",
            dependencies: [
                "Keychain", "KeychainAccess", "KeychainStore", "CFuse", "CPlatform",
                .product(name: "SystemPackage", package: "swift-system"),
            ], path: "Sources/Faces/FUSE"),
        // Credentials for other tools (docs/credentials.md): git's and docker's helper protocols
        // and `kc://` item references mapped onto core calls, shared by the two helpers and the
        // CLI's `run` and `inject`.
        .target(
            name: "KeychainCredentials", dependencies: ["Keychain", "KeychainAccess", "KeychainAPI"],
            path: "Sources/Faces/Credentials"),
        // The ssh agent (docs/ssh.md): the agent protocol answered from the vault's keys, which
        // the core signs with; the socket and each connection's caller.
        .target(
            name: "KeychainSSHAgent",
            dependencies: [
                "Keychain", "KeychainAccess", "KeychainCrypto", "CPlatform",
                .product(name: "Crypto", package: "swift-crypto"),
            ], path: "Sources/Faces/SSHAgent"),
        // Diffie-Hellman in the 1024-bit MODP group with GMP's constant-time mpz_powm_sec, for the
        // Secret Service's dh-ietf1024-sha256-aes128-cbc-pkcs7 sessions.
        .target(name: "CModpDH", linkerSettings: [.linkedLibrary("gmp")]),
        // The Secret Service provider (docs/secret-service.md): org.freedesktop.secrets on D-Bus
        // through sd-bus, each call made by the caller the bus names, under its access groups.
        .target(
            name: "KeychainSecretService",
            dependencies: [
                "Keychain", "KeychainAccess", "CSystemd", "CModpDH",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ],
            path: "Sources/Faces/SecretService"),
        .executableTarget(
            name: "git-credential-keychainfs", dependencies: ["Keychain", "KeychainCredentials"],
            path: "Sources/Faces/GitCredential"),
        .executableTarget(
            name: "docker-credential-keychainfs", dependencies: ["Keychain", "KeychainCredentials"],
            path: "Sources/Faces/DockerCredential"),
        // The sync engine's server side (docs/sync.md): libpq wrapped (Postgres/), the server's
        // schema and protocol over opaque bytes (Server/).
        .target(
            name: "KeychainSync", dependencies: ["Keychain", "KeychainCrypto", "CPQ", "CPlatform"],
            path: "Sources/Sync"),
        // Importers (docs/cli.md, Import): pass stores and password managers' CSV exports read
        // into records and mapped onto item attributes; the CLI stores them through the core.
        .target(
            name: "KeychainImport", dependencies: ["Keychain", "KeychainAccess", "KeychainCrypto"],
            path: "Sources/Faces/Import"),
        // The CLI face, and the daemon start-up of `mount`.
        .executableTarget(
            name: "keychainfs",
            dependencies: [
                "Keychain", "KeychainAccess", "KeychainFS", "KeychainCredentials", "KeychainSSHAgent", "KeychainImport",
                "KeychainSecretService", "KeychainAPI", "KeychainService", "KeychainSync", "CPlatform", "CSystemd",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "SystemPackage", package: "swift-system"),
            ], path: "Sources/Faces/CLI"),
        // Benchmarks (docs/benchmarks.md): figures and ratios, never timed assertions.
        .executableTarget(
            name: "keychainfs-bench",
            dependencies: [
                "Keychain", "KeychainAccess", "KeychainAPI", "KeychainFS", "KeychainCrypto", "KeychainStore", "CSQLite",
                "CFuse", "CPlatform",
            ]),
        // Test plumbing shared by every test target: the binary under test, one posix_spawn
        // runner, the mount table, a sandbox per test with `withMount`, the python prelude.
        .target(name: "TestSupport", path: "Tests/TestSupport"),
        .testTarget(
            name: "KeychainTests",
            dependencies: ["Keychain", "KeychainStore", "KeychainCrypto", "CSQLite", "TestSupport"]),
        // The FUSE face without a mount: path codec, inode numbers, errno and xattr text.
        .testTarget(
            name: "KeychainFSTests",
            dependencies: [
                "KeychainFS", "KeychainAccess", "Keychain", "KeychainAPI", "TestSupport",
                .product(name: "PropertyBased", package: "swift-property-based"),
            ]),
        .testTarget(
            name: "CLITests",
            dependencies: [
                "keychainfs", "KeychainImport", "TestSupport",
                .product(name: "PropertyBased", package: "swift-property-based"),
            ]),
        // Tests/FSTests/posix: the python check scripts the FS wrappers run (issue 14), not sources.
        .testTarget(
            name: "FSTests", dependencies: ["keychainfs", "Keychain", "KeychainCrypto", "TestSupport"],
            exclude: ["posix"]),
        .testTarget(name: "AccessTests", dependencies: ["keychainfs", "TestSupport"]),
        // Key pairs made in the vault and the ssh agent, driven by real ssh-add, ssh-keygen and sshd.
        .testTarget(name: "SSHTests", dependencies: ["keychainfs", "KeychainSSHAgent", "Keychain", "TestSupport"]),
        // The credential faces driven by real git, curl and local servers on 127.0.0.1.
        .testTarget(
            name: "CredentialTests",
            dependencies: [
                "keychainfs", "git-credential-keychainfs", "docker-credential-keychainfs", "KeychainCredentials",
                "TestSupport",
            ]),
        // The Secret Service provider driven by secret-tool, python secretstorage and keyring on a
        // private dbus-daemon the test starts; its objects' tables and the session collection
        // without a bus.
        .testTarget(name: "SecretServiceTests", dependencies: ["keychainfs", "KeychainSecretService", "TestSupport"]),
        // The keychain service (docs/service.md): its wire protocol's property tests, every face
        // through the one door, and the attacks on a socket caller's identity (peer-client.c, built
        // by the tests with gcc).
        .testTarget(
            name: "ServiceTests",
            dependencies: [
                "keychainfs", "git-credential-keychainfs", "docker-credential-keychainfs", "KeychainAPI", "Keychain",
                "KeychainService", "KeychainAccess", "KeychainCrypto", "TestSupport",
                .product(name: "PropertyBased", package: "swift-property-based"),
            ],
            exclude: ["peer-client.c"]),
        // The sync server against real PostgreSQL 15 clusters the tests start (TestSupport's
        // PostgresServer).
        .testTarget(
            name: "SyncTests",
            dependencies: [
                "KeychainSync", "KeychainService", "Keychain", "KeychainCrypto", "keychainfs", "TestSupport",
            ]),
    ],
    swiftLanguageModes: [.v6]
)
