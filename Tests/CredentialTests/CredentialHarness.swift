import Foundation
import Keychain
import Testing
@_exported import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

// What the credential tests add to TestSupport: the helper binaries (built beside
// `keychainfs`), a git server (git http-backend behind HTTP basic auth) on 127.0.0.1, and the
// environment git runs in (the sandbox's HOME, no system config, no terminal prompts, the
// products directory on PATH so `credential.helper keychainfs` finds the helper).

extension TestSandbox {
    /// The environment git and its helpers run in.
    var gitEnvironment: [String: String?] {
        [
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": nil, "SSH_ASKPASS": nil,
            "PATH": (productsDirectory ?? "/nonexistent") + ":/usr/local/bin:/usr/bin:/bin",
            "GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "T",
            "GIT_COMMITTER_EMAIL": "t@example.invalid",
        ]
    }

    /// `/bin/sh -c script` with git's environment.
    @discardableResult
    func git(_ script: String, stdin: [UInt8]? = nil, timeout: Double = 60) throws -> RunResult {
        try run("/bin/sh", ["-c", script], stdin: stdin, env: gitEnvironment, cwd: w, timeout: timeout)
    }

    /// `credential.helper keychainfs` in the sandbox's global git config, as docs/credentials.md
    /// tells a user to set it.
    func configureGitHelper(sourceLocation: SourceLocation = #_sourceLocation) throws {
        let r = try git(
            "git config --global credential.helper \(q("keychainfs --vault \(vault) --passphrase-file \(passphraseFile)"))"
        )
        try #require(r.status == 0, "git config: \(r.summary)", sourceLocation: sourceLocation)
    }

    /// `add-internet-password` with the secret on stdin.
    func addInternet(_ args: [String], _ secret: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let r = try cli(["add-internet-password"] + unlockArgs + args, stdin: Array(secret.utf8))
        try #require(r.status == 0, "add-internet-password: \(r.summary)", sourceLocation: sourceLocation)
    }

    /// `find-internet-password … -w`: the secret, or nil (exit 44).
    func findInternet(_ args: [String], sourceLocation: SourceLocation = #_sourceLocation) throws -> String? {
        let r = try cli(["find-internet-password"] + unlockArgs + args + ["-w"])
        if r.status == 44 { return nil }
        #expect(r.status == 0, "find-internet-password: \(r.summary)", sourceLocation: sourceLocation)
        return r.stdout.hasSuffix("\n") ? String(r.stdout.dropLast()) : r.stdout
    }

    /// Starts `python3 -c script args` and waits for its first stdout line `PORT n`.
    func startServer(_ script: String, _ args: [String], sourceLocation: SourceLocation = #_sourceLocation) throws
        -> (Spawned, Int)
    {
        let server = try spawn("/usr/bin/python3", ["-c", script] + args, env: gitEnvironment)
        var port: Int?
        waitUntil(10) {
            if let line = server.stdoutSoFar.split(separator: "\n").first(where: { $0.hasPrefix("PORT ") }) {
                port = Int(line.dropFirst(5))
            }
            return port != nil || !server.isRunning
        }
        let found = try #require(port, "server did not start: \(server.stdoutSoFar)", sourceLocation: sourceLocation)
        onTeardown(beforeUnmount: "server-\(server.pid)") {
            server.kill(SIGTERM)
            _ = server.wait(timeout: 5)
        }
        return (server, found)
    }
}

/// A git server: `git http-backend` for the repositories under argv[1], behind HTTP basic
/// auth with the `user:password` lines of the file argv[2]; every request is logged to
/// argv[3] as `user|-|bad:user METHOD path`. Prints `PORT n` once listening on 127.0.0.1.
let gitServerScript = """
    import base64, http.server, os, subprocess, sys
    root, users_file, log_path = sys.argv[1], sys.argv[2], sys.argv[3]
    users = dict(l.split(':', 1) for l in open(users_file).read().splitlines() if l)
    def log(line):
        with open(log_path, 'a') as f: f.write(line + '\\n')
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a): pass
        def do_GET(self): self.git()
        def do_POST(self): self.git()
        def git(self):
            user, claimed = None, '-'
            auth = self.headers.get('Authorization', '')
            if auth.startswith('Basic '):
                claimed, _, given = base64.b64decode(auth[6:]).decode().partition(':')
                if users.get(claimed) == given: user = claimed
            if user is None:
                log(('bad:' + claimed if claimed != '-' else '-') + ' ' + self.command + ' ' + self.path)
                self.send_response(401)
                self.send_header('WWW-Authenticate', 'Basic realm="git"')
                self.send_header('Content-Length', '0')
                self.end_headers()
                return
            log(user + ' ' + self.command + ' ' + self.path)
            path, _, query = self.path.partition('?')
            body = self.rfile.read(int(self.headers.get('Content-Length', '0') or 0))
            env = dict(os.environ, GIT_PROJECT_ROOT=root, GIT_HTTP_EXPORT_ALL='1', PATH_INFO=path,
                       QUERY_STRING=query, REQUEST_METHOD=self.command, REMOTE_USER=user, REMOTE_ADDR='127.0.0.1',
                       CONTENT_TYPE=self.headers.get('Content-Type', ''), CONTENT_LENGTH=str(len(body)),
                       HTTP_CONTENT_ENCODING=self.headers.get('Content-Encoding', ''),
                       GIT_PROTOCOL=self.headers.get('Git-Protocol', ''))
            out = subprocess.run(['git', 'http-backend'], input=body, env=env, capture_output=True).stdout
            head, _, payload = out.partition(b'\\r\\n\\r\\n')
            if not payload and b'\\n\\n' in out: head, _, payload = out.partition(b'\\n\\n')
            status, headers = 200, []
            for line in head.decode().splitlines():
                k, _, v = line.partition(':')
                if k.lower() == 'status': status = int(v.split()[0])
                elif k: headers.append((k, v.strip()))
            self.send_response(status)
            for k, v in headers: self.send_header(k, v)
            self.send_header('Content-Length', str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    print('PORT', server.server_address[1], flush=True)
    server.serve_forever()
    """
