import Foundation
import Testing

/// Issue 13: `mount-helper/quickstart` end to end in a copy of the tree, with a stand-in `swift`
/// on PATH that "builds" by copying the test binary (a real release build takes minutes) and
/// prints SwiftPM's progress lines. The packages are already installed (.ci/run), so apt is
/// skipped; everything after the build is real: the per-user install, init, mount, a demo item.
/// The real release build, from a fresh HOME, is .ci/quickstart-check's (CI runs it before the
/// tests); this one is the quick check of the terminal's progress line and the log, under `swift test`.
@Suite("quickstart")
struct QuickstartTests {
    @Test("quickstart: one progress line for the build, output in its log, installed under ~/.local, mounted")
    func quickstart() throws {
        let box = try Sandbox()
        let binary = try #require(keychainfsBinary)
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().path
        let tree = box.root + "/tree", fakeBin = box.root + "/fakebin"
        for dir in [tree + "/mount-helper", tree + "/docs/man", fakeBin] {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        }
        // Every file of mount-helper/: what `make install` installs from there may grow.
        let helpers = try FileManager.default.contentsOfDirectory(atPath: repository + "/mount-helper").map {
            "mount-helper/" + $0
        }
        let pages = try FileManager.default.contentsOfDirectory(atPath: repository + "/docs/man").map {
            "docs/man/" + $0
        }
        for file in ["Makefile"] + pages + helpers {
            try FileManager.default.copyItem(atPath: repository + "/" + file, toPath: tree + "/" + file)
        }
        try box.writeFile(
            fakeBin + "/swift",
            Array(
                """
                #!/bin/sh
                mkdir -p .build/release && cp '\(binary)' .build/release/keychainfs
                for i in 1 2 3; do echo "[$i/3] Compiling stand-in $i"; done

                """.utf8))
        chmod(fakeBin + "/swift", 0o755)

        let path = fakeBin + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
        let r = try box.run(
            "/bin/bash", [tree + "/mount-helper/quickstart"],
            env: ["PATH": path, "KEYCHAINFS_MOUNTPOINT": box.mnt, "XDG_CONFIG_HOME": box.root + "/config"],
            timeout: 120)
        defer { _ = try? box.run(box.home + "/.local/bin/keychainfs", ["unmount", box.mnt], timeout: 30) }
        #expect(r.status == 0, "quickstart: \(r.summary); daemon log: \(box.daemonLog)")
        #expect(r.stdout.contains("\rquickstart: build step [3/3] "), "no progress line: \(r.stdout)")
        #expect(!r.stdout.contains("Compiling stand-in"), "compiler output on the terminal: \(r.stdout)")
        let log = (try? String(contentsOfFile: box.stateHome + "/keychainfs/quickstart.log", encoding: .utf8)) ?? ""
        #expect(log.contains("[3/3] Compiling stand-in 3"), "the log lacks the build output: \(log)")
        #expect(r.stdout.contains("hello from keychainfs"), "\(r.stdout)")
        #expect(fileMode(box.home + "/.local/bin/keychainfs") == 0o755)
        // The credential helpers, so that `git config credential.helper keychainfs` works.
        #expect(fileMode(box.home + "/.local/bin/git-credential-keychainfs") == 0o755)
        #expect(fileMode(box.home + "/.local/bin/docker-credential-keychainfs") == 0o755)
        // The helpers are keychainfs itself, by another name (hard links: issue 28.2).
        var main = stat(), helper = stat()
        #expect(stat(box.home + "/.local/bin/keychainfs", &main) == 0)
        #expect(stat(box.home + "/.local/bin/git-credential-keychainfs", &helper) == 0)
        #expect(
            main.st_ino == helper.st_ino && main.st_dev == helper.st_dev, "git-credential-keychainfs is not a hard link"
        )
        let version = try box.run(box.home + "/.local/bin/git-credential-keychainfs", ["--version"], timeout: 10)
        #expect(version.stdout.hasPrefix("git-credential-keychainfs (keychainfs) "), "\(version.summary)")
        #expect(fileMode(box.home + "/.local/share/man/man1/keychainfs.1") == 0o644)
        #expect(fileMode(box.root + "/config/keychainfs/passphrase") == 0o600)
    }

    /// Issue 28: quickstart's package list had drifted from .ci/run's, and quickstart failed to
    /// build on a stock Debian 12 while CI passed. Both now read mount-helper/packages, which
    /// must hold every Debian package Package.swift's system libraries name.
    @Test("quickstart and .ci/run read one package list, which names every system library Package.swift links")
    func onePackageList() throws {
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().path
        func read(_ file: String) throws -> String {
            try String(contentsOfFile: repository + "/" + file, encoding: .utf8)
        }
        let listed = Set(
            try read("mount-helper/packages").split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
                .filter { !$0.isEmpty && !$0.hasPrefix("#") })
        let manifest = try read("Package.swift")
        let named = Set(manifest.matches(of: /\.apt\(\["([a-z0-9.+-]+)"\]\)/).map { String($0.output.1) })
        #expect(named.count >= 4, "Package.swift's providers: \(named.sorted())")
        #expect(
            named.subtracting(listed).isEmpty, "not in mount-helper/packages: \(named.subtracting(listed).sorted())")
        // CModpDH links GMP, which has no pkg-config provider line.
        #expect(manifest.contains(#"linkedLibrary("gmp")"#) == listed.contains("libgmp-dev"))
        // CPQ includes libpq-dev's header and loads libpq5 with dlopen: no provider line either.
        #expect(manifest.contains(#"name: "CPQ""#) == listed.contains("libpq-dev"))
        for script in ["mount-helper/quickstart", ".ci/run"] {
            #expect(try read(script).contains("mount-helper/packages"), "\(script) does not read mount-helper/packages")
        }
    }
}
