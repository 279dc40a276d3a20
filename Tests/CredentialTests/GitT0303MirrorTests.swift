import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// git's t/t0303-credential-external.sh, of git 2.39.5 and of git master, mirrored: each case
/// (GitT0303Cases.swift, named as t0303 names it) runs in t0303's order against one vault, through
/// the installed `git credential fill|approve|reject` with t0303's askpass, and git's stdout and
/// stderr must be exactly t0303's. helper_test_clean runs before and after, as in t0303, and
/// must leave no item behind.
@Suite("git t0303-credential-external mirror")
struct GitT0303MirrorTests {
    /// t0303's askpass (lib-credential.sh): the prompt to stderr, `askpass-<first word>` out.
    static let askpassScript = """
        #!/bin/sh
        echo >&2 askpass: $*
        what=$(echo $1 | cut -d" " -f1 | tr A-Z a-z | tr -cd a-z)
        echo "askpass-$what"
        """

    /// The installed git's version, as (major, minor).
    static func gitVersion(_ box: TestSandbox) throws -> (Int, Int) {
        let words = try box.git("git version").stdout.split(separator: " ")
        let parts = (words.count > 2 ? words[2] : "0.0").split(separator: ".").compactMap { Int($0) }
        return (parts.first ?? 0, parts.count > 1 ? parts[1] : 0)
    }

    func runSuite(_ cases: [T0303Case], _ label: String) throws {
        try withSandbox(label) { box in
            let helper = try helperBinary("git-credential-keychainfs")
            try box.configureGitHelper()
            let askpass = box.root + "/askpass"
            try Data((Self.askpassScript + "\n").utf8).write(to: URL(fileURLWithPath: askpass))
            chmod(askpass, 0o755)
            let (major, minor) = try Self.gitVersion(box)
            let modernGit = major > 2 || (major == 2 && minor >= 41)

            /// lib-credential.sh's `check`, through git; a case needing git ≥ 2.41 goes to the
            /// helper directly when the installed git is older.
            func check(_ c: T0303Check, in testCase: T0303Case) throws {
                let input = Array((c.input.map { $0 + "\n" }.joined()).utf8)
                let what = "t0303 '\(testCase.name)': \(c.command) \(c.input.first { $0.hasPrefix("username=") } ?? "")"
                if testCase.needsGit241 && !modernGit {
                    let op = ["approve": "store", "reject": "erase", "fill": "get"][c.command] ?? c.command
                    let r = try box.run(helper, box.unlockArgs + [op], stdin: input, timeout: 30)
                    // The helper answers only what git does not know already, and nothing when git
                    // would go on to askpass.
                    let echoed = ["protocol=", "host=", "path="]
                    let expected = c.stderr.isEmpty ? c.stdout.filter { l in !echoed.contains { l.hasPrefix($0) } } : []
                    #expect(r.status == 0 && r.lines == expected && r.stderr.isEmpty, "\(what): \(r.summary)")
                    return
                }
                let config = c.useHTTPPath ? "-c credential.usehttppath=true " : ""
                let r = try box.run(
                    "/bin/sh", ["-c", "git \(config)credential \(c.command)"], stdin: input,
                    env: box.gitEnvironment.merging(["GIT_ASKPASS": askpass]) { $1 }, cwd: box.w, timeout: 60)
                var stdout = c.stdout
                if testCase.echoesWWWAuth && !modernGit { stdout.removeAll { $0.hasPrefix("wwwauth[]=") } }
                #expect(r.status == 0, "\(what): \(r.summary)")
                #expect(r.lines == stdout, "\(what): stdout")
                #expect(r.stderr.split(separator: "\n").map(String.init) == c.stderr, "\(what): stderr \(r.stderr)")
            }

            for c in T0303.clean { try check(c, in: T0303Case(name: "helper_test_clean", checks: [])) }
            for testCase in cases {
                for c in testCase.checks { try check(c, in: testCase) }
            }
            for c in T0303.clean { try check(c, in: T0303Case(name: "helper_test_clean", checks: [])) }
            // The clean-up rejects left nothing: t0303 leaves no cruft in the helper's storage.
            let left = try box.cli(["find-internet-password"] + box.unlockArgs)
            #expect(left.status == 44, "items left after helper_test_clean: \(left.summary)")
        }
    }

    @Test("t0303 of git 2.39.5, every test in order")
    func t0303OfGit2_39() throws { try runSuite(T0303.v2_39, #function) }

    @Test(
        "t0303 of git master, every test in order (password_expiry_utc and oauth_refresh_token through the helper before git 2.41)"
    )
    func t0303OfGitMaster() throws { try runSuite(T0303.master, #function) }
}
