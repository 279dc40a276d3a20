import Foundation
import Testing

/// Issue 13, install: `make install-files` (what `make install` runs after building) into a temp
/// DESTDIR puts the binary, the man pages, the completions, the mount helper and the systemd user
/// unit where their users look, pointing at the installed binary; `make uninstall` removes them.
@Suite("make install")
struct InstallTests {
    static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    static func make(_ box: Sandbox, _ arguments: [String]) throws -> RunResult {
        let binary = try #require(keychainfsBinary)
        return try box.run(
            "/usr/bin/make", ["-C", repositoryRoot, "BIN=\(binary)"] + arguments, timeout: 60)
    }

    @Test("install-files into DESTDIR: every file in place and usable; uninstall leaves nothing")
    func installAndUninstall() throws {
        let box = try Sandbox()
        let stage = box.root + "/stage"
        let prefix = ["DESTDIR=\(stage)", "PREFIX=/usr"]
        let installed = try Self.make(box, ["install-files"] + prefix)
        try #require(installed.status == 0, "make install-files: \(installed.summary)")

        let expected: [(path: String, mode: UInt32)] = [
            ("/usr/bin/keychainfs", 0o755), ("/sbin/mount.keychainfs", 0o755),
            ("/usr/share/man/man1/keychainfs.1", 0o644), ("/usr/share/man/man5/keychainfs.5", 0o644),
            ("/usr/share/man/man1/git-credential-keychainfs.1", 0o644),
            ("/usr/share/man/man1/docker-credential-keychainfs.1", 0o644),
            ("/usr/share/bash-completion/completions/keychainfs", 0o644),
            ("/usr/share/zsh/site-functions/_keychainfs", 0o644),
            ("/usr/share/fish/vendor_completions.d/keychainfs.fish", 0o644),
            ("/usr/share/systemd/user/keychainfs.service", 0o644),
            ("/usr/share/systemd/user/keychainfs.socket", 0o644),
            ("/usr/share/systemd/user/keychainfs-ssh-agent.socket", 0o644),
            ("/usr/share/dbus-1/services/org.freedesktop.secrets.service", 0o644),
        ]
        for file in expected {
            #expect(
                fileMode(stage + file.path) == file.mode,
                "\(file.path): mode \(String(describing: fileMode(stage + file.path)))")
        }
        // The installed binary runs; the helper and the unit name it, not /usr/local/bin's.
        let version = try box.run(stage + "/usr/bin/keychainfs", ["--version"], timeout: 10)
        #expect(version.status == 0 && version.stdout.hasPrefix("keychainfs "), "\(version.summary)")
        for file in [
            "/sbin/mount.keychainfs", "/usr/share/systemd/user/keychainfs.service",
            "/usr/share/dbus-1/services/org.freedesktop.secrets.service",
        ] {
            let text = (try? String(contentsOfFile: stage + file, encoding: .utf8)) ?? ""
            #expect(text.contains("/usr/bin/keychainfs") && !text.contains("/usr/local/bin"), "\(file)")
        }
        // The helpers: hard links to the binary (one inode), each answering by its own name.
        var main = stat(), helper = stat()
        #expect(stat(stage + "/usr/bin/keychainfs", &main) == 0)
        for name in ["git-credential-keychainfs", "docker-credential-keychainfs"] {
            #expect(stat(stage + "/usr/bin/" + name, &helper) == 0 && helper.st_ino == main.st_ino, "\(name)")
            let answer = try box.run(stage + "/usr/bin/" + name, ["--version"], timeout: 10)
            #expect(answer.stdout.hasPrefix(name + " (keychainfs) "), "\(name): \(answer.summary)")
        }
        // Stripped on install: no symbol table left.
        let symbols = try box.run("/usr/bin/readelf", ["-S", stage + "/usr/bin/keychainfs"], timeout: 20)
        #expect(symbols.status == 0 && !symbols.stdout.contains(".symtab"), "the installed binary is not stripped")
        // libpq is loaded when sync first connects (Sources/CPQ), not at every start: its 24
        // libraries are no NEEDED entry of the binary, while the libraries every verb uses are.
        let dynamic = try box.run("/usr/bin/readelf", ["-d", stage + "/usr/bin/keychainfs"], timeout: 20)
        #expect(
            dynamic.status == 0 && dynamic.stdout.contains("[libsodium.so") && !dynamic.stdout.contains("libpq"),
            "NEEDED: \(dynamic.summary)")
        // Completions complete the subcommands, new ones included.
        let bashCompletion = "/usr/share/bash-completion/completions/keychainfs"
        let bash = (try? String(contentsOfFile: stage + bashCompletion, encoding: .utf8)) ?? ""
        for verb in [
            "find-generic-password", "find-key", "delete-certificate", "generate", "create-keypair", "ssh-agent",
        ] {
            #expect(bash.contains(verb), "the bash completion lacks \(verb)")
        }
        let syntax = try box.run("/bin/bash", ["-n", stage + bashCompletion], timeout: 10)
        #expect(syntax.status == 0, "bash -n: \(syntax.summary)")
        try checkManualPages(box, stage: stage)

        let removed = try Self.make(box, ["uninstall"] + prefix)
        #expect(removed.status == 0, "make uninstall: \(removed.summary)")
        for file in expected { #expect(fileMode(stage + file.path) == nil, "\(file.path) survived uninstall") }
    }

    /// The man page lists every subcommand the binary has (a stale page fails: run `make man`),
    /// and both pages render.
    func checkManualPages(_ box: Sandbox, stage: String) throws {
        let page = (try? String(contentsOfFile: stage + "/usr/share/man/man1/keychainfs.1", encoding: .utf8)) ?? ""
        let dump = try box.run(stage + "/usr/bin/keychainfs", ["--experimental-dump-help"], timeout: 10)
        let json = try JSONSerialization.jsonObject(with: Data(dump.stdout.utf8)) as? [String: Any]
        let subcommands = ((json?["command"] as? [String: Any])?["subcommands"] as? [[String: Any]]) ?? []
        let names = subcommands.compactMap { $0["commandName"] as? String }
        #expect(names.count > 20 && names.contains("find-key"), "\(names)")
        for name in names {
            #expect(page.contains(".It Em \(name)"), "docs/man/keychainfs.1 lacks \(name): run 'make man'")
        }
        // Issue 28, point 3: what a user looks up in a man page beyond the commands.
        for heading in [
            ".Sh ENVIRONMENT", ".Sh FILES", ".Sh \"EXIT STATUS\"", ".Sh \"SEE ALSO\"", "KEYCHAINFS_PASSPHRASE_FILE",
        ] {
            #expect(page.contains(heading), "keychainfs(1) lacks \(heading)")
        }
        #expect(page.components(separatedBy: ".Sh \"EXIT STATUS\"").count == 2, "two EXIT STATUS sections")
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/man") else { return }
        for section in [
            "man1/keychainfs.1", "man5/keychainfs.5", "man1/git-credential-keychainfs.1",
            "man1/docker-credential-keychainfs.1",
        ] {
            let rendered = try box.run("/usr/bin/man", ["-l", stage + "/usr/share/man/" + section], timeout: 20)
            #expect(
                rendered.status == 0 && rendered.stdout.contains("NAME") && rendered.stdout.contains("keychainfs"),
                "man -l \(section): \(rendered.summary)")
        }
    }

    @Test("install-files refuses a binary that is not built, and a per-user install skips /sbin")
    func installVariants() throws {
        let box = try Sandbox()
        let missing = try box.run(
            "/usr/bin/make",
            ["-C", Self.repositoryRoot, "install-files", "BIN=/nonexistent/keychainfs", "DESTDIR=\(box.root)/x"],
            timeout: 30)
        #expect(missing.status != 0 && missing.stderr.contains("is not built"), "\(missing.summary)")
        #expect(!FileManager.default.fileExists(atPath: box.root + "/x"))

        let home = box.root + "/home"
        let user = try Self.make(box, ["install-files", "PREFIX=\(home)/.local", "MOUNT_HELPER_DIR="])
        #expect(user.status == 0, "\(user.summary)")
        #expect(fileMode(home + "/.local/bin/keychainfs") == 0o755)
        #expect(fileMode(home + "/.local/share/man/man1/keychainfs.1") == 0o644)
        #expect(!FileManager.default.fileExists(atPath: home + "/sbin"))
    }

    /// Issue 28, point 3: `systemctl --user` finds the units of a per-user install (systemd 252
    /// does not search ~/.local/lib/systemd/user), each one parses, and the D-Bus activation file
    /// starts the one service, which then serves the Secret Service.
    @Test("a per-user install puts the units where systemd's user manager looks, and they verify")
    func unitsWhereSystemdLooks() throws {
        let box = try Sandbox()
        let home = box.root + "/home"
        let installed = try Self.make(box, ["install-files", "PREFIX=\(home)/.local", "MOUNT_HELPER_DIR="])
        try #require(installed.status == 0, "\(installed.summary)")
        let units = home + "/.local/share/systemd/user"
        for unit in ["keychainfs.service", "keychainfs.socket", "keychainfs-ssh-agent.socket"] {
            #expect(fileMode(units + "/" + unit) == 0o644, "\(unit) is not in \(units)")
        }
        let service = (try? String(contentsOfFile: units + "/keychainfs.service", encoding: .utf8)) ?? ""
        #expect(service.contains("ExecStart=\(home)/.local/bin/keychainfs mount %h/Keychain -f -o secret_service"))
        #expect(service.contains("Sockets=keychainfs.socket keychainfs-ssh-agent.socket"))
        let dbus =
            (try? String(
                contentsOfFile: home + "/.local/share/dbus-1/services/org.freedesktop.secrets.service", encoding: .utf8))
            ?? ""
        #expect(dbus.contains("SystemdService=keychainfs.service"))
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-analyze") else { return }
        let paths = try box.run(
            "/usr/bin/systemd-analyze", ["--user", "unit-paths"],
            env: ["HOME": home, "XDG_DATA_HOME": home + "/.local/share", "XDG_CONFIG_HOME": home + "/.config"],
            timeout: 20)
        #expect(paths.stdout.split(separator: "\n").contains(Substring(units)), "\(paths.summary)")
        let runtime = box.root + "/run"
        #expect(mkdir(runtime, 0o700) == 0)
        let verify = try box.run(
            "/usr/bin/systemd-analyze",
            ["--user", "verify"]
                + ["keychainfs.service", "keychainfs.socket", "keychainfs-ssh-agent.socket"].map {
                    units + "/" + $0
                },
            env: [
                "HOME": home, "XDG_DATA_HOME": home + "/.local/share", "XDG_CONFIG_HOME": home + "/.config",
                "XDG_RUNTIME_DIR": runtime,
            ], timeout: 30)
        #expect(verify.status == 0 && verify.stderr.isEmpty, "systemd-analyze verify: \(verify.summary)")
        // Without the D-Bus file the service leaves the bus alone.
        let plain = box.root + "/plain"
        let noBus = try Self.make(box, ["install-files", "PREFIX=\(plain)", "MOUNT_HELPER_DIR=", "DBUS_SERVICES_DIR="])
        try #require(noBus.status == 0, "\(noBus.summary)")
        let plainService =
            (try? String(contentsOfFile: plain + "/share/systemd/user/keychainfs.service", encoding: .utf8)) ?? ""
        #expect(plainService.contains("keychainfs mount %h/Keychain -f\n"), "\(plainService)")
    }
}
