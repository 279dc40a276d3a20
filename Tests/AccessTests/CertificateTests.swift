import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// Issue 4: certificates, keys and identities, used by real tools (openssl, ssh-keygen, curl,
// Python ssl) through a real mount. All material is made in the test with openssl/ssh-keygen.

/// Makes, in `box.root/w`: a CA (EC P-256, ca.key/ca.pem, CN "Test Root CA"); a leaf signed by
/// it (RSA 2048 PKCS#8 leaf.key, leaf.pem, CN localhost, SAN 127.0.0.1); an EC leaf signed by it
/// (eleaf.key, eleaf.pem, CN "ec leaf"); a self-signed "Other Cert" (other.pem, other.der); PKCS#8
/// keys rsa.key and ec.key; an OpenSSH ed25519 key `ed` / `ed.pub`.
func makePKI(_ box: Sandbox, sourceLocation: SourceLocation = #_sourceLocation) throws {
    let script = """
        set -e
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days 30 \
          -subj "/CN=Test Root CA" -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
        openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out leaf.key
        openssl req -new -key leaf.key -out leaf.csr -subj "/CN=localhost"
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\nbasicConstraints=CA:FALSE\\n' > leaf.ext
        openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out leaf.pem -days 30 -extfile leaf.ext
        openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out eleaf.key
        openssl req -new -key eleaf.key -out eleaf.csr -subj "/CN=ec leaf"
        openssl x509 -req -in eleaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out eleaf.pem -days 30 -extfile leaf.ext
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout other.key -out other.pem -days 30 -subj "/CN=Other Cert"
        openssl x509 -in other.pem -outform DER -out other.der
        openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out rsa.key
        openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ec.key
        ssh-keygen -q -t ed25519 -N '' -C test@keychainfs -f ed
        """
    let r = try box.sh(script, timeout: 120)
    try #require(r.status == 0, "making the test PKI failed: \(r.summary)", sourceLocation: sourceLocation)
}

extension Sandbox {
    var w: String { root + "/w" }
    func file(_ name: String) -> String { (try? String(contentsOfFile: w + "/" + name, encoding: .utf8)) ?? "" }
    /// `getfattr --only-values -n user.keychain.NAME PATH`, or nil.
    func xattr(_ path: String, _ name: String) throws -> String? {
        let r = try run("/usr/bin/getfattr", ["--only-values", "-n", "user.keychain." + name, path], timeout: 10)
        return r.status == 0 ? r.stdout : nil
    }
    /// A free TCP port on 127.0.0.1.
    func freePort() throws -> Int {
        let r = try run(
            "/usr/bin/python3",
            ["-c", "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"], timeout: 10)
        guard let port = Int(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw HarnessError("no free port: \(r.summary)")
        }
        return port
    }
    /// Starts `openssl s_server` on 127.0.0.1:PORT (killed at teardown: its arguments name the sandbox) and waits until it accepts.
    func startServer(port: Int, extra: [String] = []) throws -> Spawned {
        let server = try spawn(
            "/usr/bin/timeout",
            [
                "-k", "2", "120", "/usr/bin/openssl", "s_server", "-accept", "127.0.0.1:\(port)",
                "-cert", w + "/leaf.pem", "-key", w + "/leaf.key", "-www",
            ] + extra)
        let up = waitUntil(15) {
            (try? run(
                "/usr/bin/python3",
                ["-c", "import socket; socket.create_connection(('127.0.0.1', \(port)), 1).close()"], timeout: 5
            ).status) == 0
        }
        guard up else { throw HarnessError("s_server did not come up: \(server.stdoutSoFar)") }
        return server
    }
}

/// Lowercase hex without separators, leading zeros dropped (serial numbers).
func normalizedHex(_ s: String) -> String {
    let hex = s.lowercased().filter { $0.isHexDigit }
    let trimmed = hex.drop { $0 == "0" }
    return trimmed.isEmpty ? "0" : String(trimmed)
}
