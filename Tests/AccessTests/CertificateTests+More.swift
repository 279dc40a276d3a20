import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension AccessSuite {
    @Suite("certificates, keys, identities") struct CertificateTests {
        @Test(
            "cp a PEM into /cert: openssl x509 and openssl verify -CAfile read it; DER is accepted; derived xattrs are read-only"
        )
        func certificatesThroughTools() throws {
            try withMount { box in
                try makePKI(box)
                let cp = try box.sh("cp leaf.pem \(q(box.mnt + "/cert/web")) && cp ca.pem \(q(box.mnt + "/cert/ca"))")
                try #require(cp.status == 0, "cp into /cert: \(cp.summary)")

                let subject = try box.run(
                    "/usr/bin/openssl", ["x509", "-noout", "-subject", "-in", box.mnt + "/cert/web"], timeout: 15)
                #expect(
                    subject.status == 0 && subject.stdout.contains("CN = localhost"),
                    "openssl x509 -subject: \(subject.summary)")
                let verify = try box.run(
                    "/usr/bin/openssl", ["verify", "-CAfile", box.mnt + "/cert/ca", box.w + "/leaf.pem"], timeout: 15)
                #expect(
                    verify.status == 0 && verify.stdout.contains("leaf.pem: OK"),
                    "openssl verify -CAfile MNT/cert/ca: \(verify.summary)")
                // Reading gives the PEM that was written (openssl's own layout: 64 columns).
                let shown = try String(contentsOfFile: box.mnt + "/cert/web", encoding: .utf8)
                #expect(shown == box.file("leaf.pem"), "the PEM read back differs from the one written:\n\(shown)")
                let st = try box.run("/usr/bin/stat", ["-c", "%s", box.mnt + "/cert/web"], timeout: 10)
                #expect(
                    st.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "\(box.file("leaf.pem").utf8.count)",
                    "size of /cert/web: \(st.summary)")

                // DER written, PEM read.
                let der = try box.sh("cat other.der > \(q(box.mnt + "/cert/der"))")
                #expect(der.status == 0, "writing DER: \(der.summary)")
                let derShown = (try? String(contentsOfFile: box.mnt + "/cert/der", encoding: .utf8)) ?? ""
                #expect(
                    derShown == box.file("other.pem"), "a DER certificate does not read back as its PEM:\n\(derShown)")

                // Derived attributes.
                let web = box.mnt + "/cert/web"
                let dump = try box.run("/usr/bin/getfattr", ["-d", web], timeout: 10)
                for name in ["subject", "issuer", "serialNumber", "publicKeyHash", "certificateType", "label"] {
                    #expect(dump.stdout.contains("user.keychain.\(name)="), "no \(name) xattr: \(dump.summary)")
                }
                #expect(try box.xattr(web, "label") == "web", "the label is not the path written")
                let serial = try box.run(
                    "/usr/bin/openssl", ["x509", "-in", box.w + "/leaf.pem", "-noout", "-serial"], timeout: 10
                ).stdout
                let serialAttr = try box.xattr(web, "serialNumber") ?? ""
                #expect(
                    normalizedHex(serialAttr) == normalizedHex(String(serial.drop { $0 != "=" })),
                    "serialNumber xattr \(serialAttr) vs openssl \(serial)")
                // publicKeyHash: SHA-1 of the public key (for RSA, the PKCS#1 RSAPublicKey).
                let pkh = try box.sh(
                    "openssl x509 -in leaf.pem -noout -pubkey | openssl rsa -pubin -RSAPublicKey_out -outform DER 2>/dev/null | sha1sum | cut -c1-40"
                )
                let pkhAttr = try box.xattr(web, "publicKeyHash") ?? ""
                #expect(
                    pkhAttr.lowercased() == pkh.stdout.trimmingCharacters(in: .whitespacesAndNewlines),
                    "publicKeyHash \(pkhAttr) is not the SHA-1 of the public key \(pkh.stdout)")
                for name in ["subject", "issuer", "serialNumber", "publicKeyHash"] {
                    let set = try box.run(
                        "/usr/bin/setfattr", ["-n", "user.keychain." + name, "-v", "00", web], timeout: 10)
                    #expect(
                        set.status != 0 && set.stderr.contains("Operation not permitted"),
                        "setfattr \(name): \(set.summary)")
                }
                #expect(try box.xattr(web, "serialNumber") == serialAttr, "a read-only attribute changed")
            }
        }

        @Test(
            "the same certificate under another name is EEXIST, a non-certificate is EINVAL at close; nothing is stored"
        )
        func duplicatesAndGarbage() throws {
            try withMount { box in
                try makePKI(box)
                let cp = try box.sh("cp leaf.pem \(q(box.mnt + "/cert/web"))")
                try #require(cp.status == 0, "cp: \(cp.summary)")
                let r = try box.py(
                    """
                    def put(p, data):
                        try:
                            fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o600)
                        except OSError as e:
                            return 'open ' + en(e.errno)
                        try:
                            os.write(fd, data)
                        except OSError as e:
                            os.close(fd)
                            return 'write ' + en(e.errno)
                        try:
                            os.close(fd)
                        except OSError as e:
                            return 'close ' + en(e.errno)
                        return 'stored'
                    m, w = sys.argv[1], sys.argv[2]
                    print('dup', put(m + '/cert/web2', read(w + '/leaf.pem')))
                    print('junk', put(m + '/cert/junk', b'hello, this is not a certificate\\n'))
                    print('badpem', put(m + '/cert/badpem', b'-----BEGIN CERTIFICATE-----\\nbm90IGEgY2VydA==\\n-----END CERTIFICATE-----\\n'))
                    print('key', put(m + '/cert/key', read(w + '/ec.key')))
                    print('ls', ','.join(sorted(os.listdir(m + '/cert'))))
                    t('statdup', os.stat, m + '/cert/web2')
                    t('statjunk', os.stat, m + '/cert/junk')
                    """, [box.mnt, box.w])
                let out = labelled(r)
                #expect(out["dup"] == "close EEXIST", "the same certificate under another name: \(r.summary)")
                #expect(out["junk"] == "close EINVAL", "text that is not a certificate: \(r.summary)")
                #expect(out["badpem"] == "close EINVAL", "a PEM block that is not a certificate: \(r.summary)")
                #expect(out["key"] == "close EINVAL", "a private key written to /cert: \(r.summary)")
                #expect(out["ls"] == "web", "/cert after the refused writes: \(r.summary)")
                #expect(
                    out["statdup"] == "ENOENT" && out["statjunk"] == "ENOENT", "refused names still exist: \(r.summary)"
                )
                // Nothing extra in the vault either.
                let found = try box.cli(["find-certificate", "-a", "-Z"] + box.unlockArgs)
                #expect(
                    found.status == 0 && found.lines.filter { $0.hasPrefix("SHA-1 hash:") }.count == 1,
                    "certificates in the vault: \(found.summary)")
            }
        }

        @Test("private keys in /keys: ssh-keygen -y and openssl pkey read them; derived key attributes")
        func privateKeys() throws {
            try withMount { box in
                try makePKI(box)
                let cp = try box.sh(
                    "cp ed \(q(box.mnt + "/keys/id_ed25519")) && cp rsa.key \(q(box.mnt + "/keys/rsa")) && cp ec.key \(q(box.mnt + "/keys/ec"))"
                )
                try #require(cp.status == 0, "cp into /keys: \(cp.summary)")

                // The bytes written are the bytes read.
                for (name, source) in [("id_ed25519", "ed"), ("rsa", "rsa.key"), ("ec", "ec.key")] {
                    let shown = FileManager.default.contents(atPath: box.mnt + "/keys/" + name)
                    #expect(
                        shown == FileManager.default.contents(atPath: box.w + "/" + source),
                        "/keys/\(name) differs from \(source)")
                }
                // ssh-keygen -y derives the same public key.
                let y = try box.run("/usr/bin/ssh-keygen", ["-y", "-f", box.mnt + "/keys/id_ed25519"], timeout: 15)
                let pub = box.file("ed.pub").split(separator: " ").prefix(2).joined(separator: " ")
                #expect(
                    y.status == 0
                        && y.stdout.split(separator: " ").prefix(2).joined(separator: " ").trimmingCharacters(
                            in: .whitespacesAndNewlines) == pub,
                    "ssh-keygen -y -f MNT/keys/id_ed25519: \(y.summary) vs \(pub)")
                let mode = try box.run("/usr/bin/stat", ["-c", "%a", box.mnt + "/keys/id_ed25519"], timeout: 10)
                #expect(
                    mode.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "600",
                    "key file mode: \(mode.summary)")

                for (name, type, bits) in [("rsa", "42", "2048"), ("ec", "73", "256")] {
                    let path = box.mnt + "/keys/" + name
                    let pkey = try box.run("/usr/bin/openssl", ["pkey", "-in", path, "-noout"], timeout: 15)
                    #expect(pkey.status == 0, "openssl pkey -in MNT/keys/\(name): \(pkey.summary)")
                    let keyClass = try box.xattr(path, "keyClass"), keyType = try box.xattr(path, "keyType")
                    let keySize = try box.xattr(path, "keySizeInBits")
                    #expect(keyClass == "1", "keyClass of \(name): \(keyClass ?? "none")")
                    #expect(keyType == type, "keyType of \(name): \(keyType ?? "none")")
                    #expect(keySize == bits, "keySizeInBits of \(name): \(keySize ?? "none")")
                    let label = try box.xattr(path, "applicationLabel") ?? ""
                    #expect(
                        label.count == 40 && label.allSatisfy(\.isHexDigit), "applicationLabel of \(name): '\(label)'")
                }
                // applicationLabel is the SHA-1 of the public key (PKCS#1 for RSA, the point for EC).
                let rsaHash = try box.sh(
                    "openssl rsa -in rsa.key -RSAPublicKey_out -outform DER 2>/dev/null | sha1sum | cut -c1-40"
                ).stdout
                let ecHash = try box.sh(
                    "openssl pkey -in ec.key -pubout -outform DER | tail -c 65 | sha1sum | cut -c1-40"
                ).stdout
                #expect(
                    try box.xattr(box.mnt + "/keys/rsa", "applicationLabel")
                        == rsaHash.trimmingCharacters(in: .whitespacesAndNewlines),
                    "RSA applicationLabel is not SHA-1 of the public key")
                #expect(
                    try box.xattr(box.mnt + "/keys/ec", "applicationLabel")
                        == ecHash.trimmingCharacters(in: .whitespacesAndNewlines),
                    "EC applicationLabel is not SHA-1 of the public key")
                let edClass = try box.xattr(box.mnt + "/keys/id_ed25519", "keyClass")
                #expect(edClass == "1", "keyClass of the OpenSSH ed25519 key: \(edClass ?? "none")")

                // Keys alone make no identity.
                let idnt = try box.run("/usr/bin/ls", ["-A", box.mnt + "/idnt"], timeout: 10)
                #expect(idnt.status == 0 && idnt.stdout.isEmpty, "/idnt with keys and no certificates: \(idnt.summary)")
            }
        }

        @Test("identities: cert + key → /idnt/leaf, used by curl and Python ssl; read-only; cert or key alone → none")
        func identitiesWithTools() throws {
            try withMount { box in
                try makePKI(box)
                let m = box.mnt
                let cp = try box.sh(
                    "cp ca.pem \(q(m + "/cert/ca")) && cp leaf.pem \(q(m + "/cert/leaf")) && cp leaf.key \(q(m + "/keys/leaf")) && cp ed \(q(m + "/keys/ed")) && cp other.pem \(q(m + "/cert/other"))"
                )
                try #require(cp.status == 0, "cp: \(cp.summary)")

                // Only the certificate with its key is an identity (ca and other: no key; ed: no cert).
                var ls = try box.run("/usr/bin/ls", ["-A", m + "/idnt"], timeout: 10)
                if ls.lines != ["leaf"] {
                    Thread.sleep(forTimeInterval: 1.5);
                    ls = try box.run("/usr/bin/ls", ["-A", m + "/idnt"], timeout: 10)
                }
                #expect(ls.status == 0 && ls.lines == ["leaf"], "/idnt: \(ls.summary)")
                #expect(
                    try box.xattr(m + "/keys/leaf", "applicationLabel") == box.xattr(m + "/cert/leaf", "publicKeyHash"),
                    "the key's applicationLabel and the certificate's publicKeyHash differ")

                // Its file: the certificate then the key.
                let ident = m + "/idnt/leaf"
                let content = (try? String(contentsOfFile: ident, encoding: .utf8)) ?? ""
                #expect(
                    content == box.file("leaf.pem") + box.file("leaf.key"),
                    "/idnt/leaf is not cert PEM + key:\n\(content.prefix(300))")
                let x = try box.run("/usr/bin/openssl", ["x509", "-in", ident, "-noout", "-subject"], timeout: 10)
                #expect(
                    x.status == 0 && x.stdout.contains("CN = localhost"), "openssl x509 -in MNT/idnt/leaf: \(x.summary)"
                )
                let k = try box.run("/usr/bin/openssl", ["pkey", "-in", ident, "-noout"], timeout: 10)
                #expect(k.status == 0, "openssl pkey -in MNT/idnt/leaf: \(k.summary)")

                // Read-only: rm, writes and renames are EPERM; the identity stays.
                let r = try box.py(
                    """
                    m = sys.argv[1]
                    t('rm', os.unlink, m + '/idnt/leaf')
                    t('write', lambda: os.open(m + '/idnt/leaf', os.O_WRONLY))
                    t('create', lambda: os.open(m + '/idnt/new', os.O_CREAT | os.O_WRONLY, 0o600))
                    t('rename', os.rename, m + '/idnt/leaf', m + '/idnt/leaf2')
                    t('exists', lambda: os.path.exists(m + '/idnt/leaf'))
                    """, [m])
                let out = labelled(r)
                #expect(out["rm"] == "EPERM", "rm /idnt/leaf: \(r.summary)")
                #expect(out["write"] == "EPERM", "open /idnt/leaf for writing: \(r.summary)")
                #expect(out["create"] == "EPERM", "create in /idnt: \(r.summary)")
                #expect(out["rename"] == "EPERM", "rename in /idnt: \(r.summary)")
                #expect(out["exists"] == "OK True", "the identity after rm: \(r.summary)")
                let rm = try box.run("/usr/bin/rm", ["-f", ident], timeout: 10)
                #expect(
                    rm.status != 0 && rm.stderr.contains("Operation not permitted"),
                    "rm -f MNT/idnt/leaf: \(rm.summary)")

                // curl --cacert MNT/cert/ca against a local s_server.
                let port = try box.freePort()
                _ = try box.startServer(port: port)
                let curl = try box.run(
                    "/usr/bin/curl",
                    ["-sS", "--max-time", "15", "--cacert", m + "/cert/ca", "https://127.0.0.1:\(port)/"], timeout: 20)
                #expect(
                    curl.status == 0 && curl.stdout.contains("s_server"), "curl --cacert MNT/cert/ca: \(curl.summary)")
                let untrusted = try box.run(
                    "/usr/bin/curl",
                    ["-sS", "--max-time", "15", "--cacert", m + "/cert/other", "https://127.0.0.1:\(port)/"],
                    timeout: 20)
                #expect(untrusted.status != 0, "curl trusted the server with an unrelated CA: \(untrusted.summary)")

                // curl --cert MNT/idnt/leaf against an s_server that requires a client certificate.
                let port2 = try box.freePort()
                _ = try box.startServer(port: port2, extra: ["-Verify", "1", "-CAfile", box.w + "/ca.pem"])
                let noCert = try box.run(
                    "/usr/bin/curl",
                    ["-sS", "--max-time", "15", "--cacert", m + "/cert/ca", "https://127.0.0.1:\(port2)/"], timeout: 20)
                #expect(noCert.status != 0, "the server accepted a client without a certificate: \(noCert.summary)")
                let withCert = try box.run(
                    "/usr/bin/curl",
                    [
                        "-sS", "--max-time", "15", "--cacert", m + "/cert/ca", "--cert", ident,
                        "https://127.0.0.1:\(port2)/",
                    ], timeout: 20)
                #expect(
                    withCert.status == 0 && withCert.stdout.contains("Client certificate")
                        && withCert.stdout.replacingOccurrences(of: " ", with: "").contains("Subject:CN=localhost"),
                    "curl --cert MNT/idnt/leaf: \(withCert.summary)")

                // Python ssl loads the identity and the CA.
                let pyssl = try box.py(
                    """
                    import ssl
                    c = ssl.create_default_context(cafile=sys.argv[1] + '/cert/ca')
                    c.load_cert_chain(sys.argv[1] + '/idnt/leaf')
                    print('loaded', len(c.get_ca_certs()))
                    """, [m])
                #expect(pyssl.status == 0 && pyssl.stdout.contains("loaded 1"), "Python ssl: \(pyssl.summary)")

                // Deleting the key ends the identity.
                let rmKey = try box.run("/usr/bin/rm", [m + "/keys/leaf"], timeout: 10)
                #expect(rmKey.status == 0, "rm the key: \(rmKey.summary)")
                let gone = waitUntil(4) {
                    ((try? FileManager.default.contentsOfDirectory(atPath: m + "/idnt")) ?? ["?"]).isEmpty
                }
                #expect(
                    gone,
                    "/idnt/leaf survives its key: \((try? FileManager.default.contentsOfDirectory(atPath: m + "/idnt")) ?? [])"
                )
            }
        }

        @Test(
            "CLI: add-certificates, find-certificate -Z/-p, import of a PEM bundle, find-identity, export -t identities"
        )
        func cliCommands() throws {
            try withSandbox { box in
                try makePKI(box)
                let add = try box.cli(["add-certificates"] + box.unlockArgs + [box.w + "/ca.pem"])
                #expect(add.status == 0 && add.stdout.contains("\"Test Root CA\""), "add-certificates: \(add.summary)")
                let again = try box.cli(["add-certificates"] + box.unlockArgs + [box.w + "/ca.pem"])
                #expect(again.status == 45, "adding the same certificate twice: \(again.summary)")

                let z = try box.cli(["find-certificate"] + box.unlockArgs + ["-c", "Test Root", "-Z"])
                let fp = try box.run(
                    "/usr/bin/openssl", ["x509", "-in", box.w + "/ca.pem", "-noout", "-fingerprint", "-sha1"],
                    timeout: 10)
                let expected = String(fp.stdout.drop { $0 != "=" }.dropFirst()).replacingOccurrences(of: ":", with: "")
                    .trimmingCharacters(in: .whitespacesAndNewlines).uppercased()
                #expect(
                    z.status == 0 && z.stdout.contains("SHA-1 hash: " + expected),
                    "find-certificate -Z: \(z.summary) vs \(expected)")
                let p = try box.cli(["find-certificate"] + box.unlockArgs + ["-c", "Test Root", "-p"])
                #expect(p.status == 0 && p.stdout == box.file("ca.pem"), "find-certificate -p: \(p.summary)")
                let none = try box.cli(["find-certificate"] + box.unlockArgs + ["-c", "no such certificate"])
                #expect(none.status == 44, "find-certificate of nothing: \(none.summary)")

                // No identity yet.
                let zero = try box.cli(["find-identity"] + box.unlockArgs)
                #expect(
                    zero.status == 0 && zero.stdout.contains("0 identities found"),
                    "find-identity before import: \(zero.summary)")

                // A PEM bundle: certificate + its key → one identity.
                try Data((box.file("eleaf.pem") + box.file("eleaf.key")).utf8).write(
                    to: URL(fileURLWithPath: box.w + "/bundle.pem"))
                let imp = try box.cli(["import"] + box.unlockArgs + [box.w + "/bundle.pem"])
                #expect(
                    imp.status == 0 && imp.stdout.contains("1 certificate(s) and 1 key(s) imported"),
                    "import: \(imp.summary)")
                let ids = try box.cli(["find-identity"] + box.unlockArgs)
                let efp = try box.run(
                    "/usr/bin/openssl", ["x509", "-in", box.w + "/eleaf.pem", "-noout", "-fingerprint", "-sha1"],
                    timeout: 10)
                let eHash = String(efp.stdout.drop { $0 != "=" }.dropFirst()).replacingOccurrences(of: ":", with: "")
                    .trimmingCharacters(in: .whitespacesAndNewlines).uppercased()
                #expect(ids.status == 0 && ids.stdout.contains("1 identities found"), "find-identity: \(ids.summary)")
                #expect(
                    ids.stdout.contains(eHash) && ids.stdout.contains("\"ec leaf\""),
                    "find-identity does not list the identity: \(ids.summary)")

                // export -t identities parses with openssl and is the same certificate and key.
                let outFile = box.w + "/export.pem"
                let exp = try box.cli(["export"] + box.unlockArgs + ["-t", "identities", "-o", outFile])
                #expect(exp.status == 0, "export -t identities: \(exp.summary)")
                let subj = try box.run("/usr/bin/openssl", ["x509", "-in", outFile, "-noout", "-subject"], timeout: 10)
                #expect(
                    subj.status == 0 && subj.stdout.contains("CN = ec leaf"),
                    "openssl x509 of the export: \(subj.summary)")
                let pub1 = try box.sh("openssl pkey -in export.pem -pubout")
                let pub2 = try box.sh("openssl pkey -in eleaf.key -pubout")
                #expect(
                    pub1.status == 0 && pub1.stdout == pub2.stdout,
                    "the exported key is not the imported one: \(pub1.summary)")
                var st = stat()
                #expect(
                    stat(outFile, &st) == 0 && st.st_mode & 0o777 == 0o600,
                    "export file mode \(String(st.st_mode & 0o777, radix: 8))")

                // The mount shows the same: one identity, under the certificate's label.
                try box.mount()
                let ls = try box.run("/usr/bin/ls", ["-A", box.mnt + "/idnt"], timeout: 10)
                #expect(ls.status == 0 && ls.lines == ["ec leaf"], "/idnt after import: \(ls.summary)")
                let certs = try box.run("/usr/bin/ls", ["-A", box.mnt + "/cert"], timeout: 10)
                #expect(Set(certs.lines) == ["Test Root CA", "ec leaf"], "/cert after import: \(certs.summary)")
                let verify = try box.run(
                    "/usr/bin/openssl",
                    ["verify", "-CAfile", box.mnt + "/cert/Test Root CA", box.mnt + "/idnt/ec leaf"], timeout: 15)
                #expect(verify.status == 0, "openssl verify of the imported identity: \(verify.summary)")
            }
        }
    }
}
