import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A pinentry stand-in for tests of user presence and vault unlock prompts (the Assuan
/// protocol's commands that keychainfs sends). It answers from `pinentry.mode` beside itself:
/// CONFIRM is allowed when the mode is `allow`; `always:PASS` presses the "Always allow" button
/// (NOTOK) where there is one, and GETPIN then gives PASS; any other mode presses the button
/// labelled Deny (NOTOK or cancel). GETPIN gives the text after `pin:` and is cancelled
/// otherwise. `hold` keeps a prompt up until the mode changes. Each prompt's description is
/// appended to `pinentry.log` beside it.
public struct ScriptedPinentry {
    public let script: String
    public var modePath: String { directory + "/pinentry.mode" }
    public var logPath: String { directory + "/pinentry.log" }
    let directory: String

    static let source = """
        #!/usr/bin/python3
        import sys, os, time
        D = os.path.dirname(os.path.abspath(__file__))
        def send(s):
            sys.stdout.write(s + '\\n'); sys.stdout.flush()
        def mode():
            try: m = open(os.path.join(D, 'pinentry.mode')).read().strip()
            except FileNotFoundError: m = ''
            return m
        def settled():
            m = mode()
            while m == 'hold': time.sleep(0.05); m = mode()
            return m
        def log(desc):
            with open(os.path.join(D, 'pinentry.log'), 'a') as f: f.write(desc + '\\n')
        send('OK Pleased to meet you')
        desc = ''; notok = ''
        for line in sys.stdin:
            line = line.rstrip('\\n'); cmd = line.split(' ', 1)[0]
            if cmd == 'SETDESC': desc = line[8:]
            if cmd == 'SETNOTOK': notok = line[9:]
            if cmd == 'GETPIN':
                log(desc); m = settled()
                if m.startswith('pin:'): send('D ' + m[4:]); send('OK')
                elif m.startswith('always:'): send('D ' + m[7:]); send('OK')
                else: send('ERR 83886179 Operation cancelled <Pinentry>')
                continue
            if cmd == 'CONFIRM':
                log(desc); m = settled()
                if m == 'allow': send('OK')
                elif notok == 'Always allow' and not m.startswith('always:'): send('ERR 83886179 Operation cancelled <Pinentry>')
                else: send('ERR 83886194 Not confirmed <Pinentry>')
                continue
            if cmd == 'BYE': send('OK'); break
            send('OK')
        """

    /// Writes the script into `directory` (made if missing).
    public init(in directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        self.directory = directory
        script = directory + "/pinentry.py"
        try Data(Self.source.utf8).write(to: URL(fileURLWithPath: script))
        chmod(script, 0o755)
    }

    /// What the next prompts answer: `allow`, `deny`, `pin:SECRET`, `always:PASSPHRASE`, `hold`
    /// or `cancel`. Written by rename: the script polls the file while it holds a prompt, and a
    /// truncated file read between truncation and write would answer for the user.
    public func answer(_ mode: String) throws {
        try Data((mode + "\n").utf8).write(to: URL(fileURLWithPath: modePath), options: .atomic)
    }

    /// The descriptions of the prompts shown so far, one a line.
    public var prompts: [String] {
        ((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    /// Forgets the prompts shown so far.
    public func clearLog() { try? FileManager.default.removeItem(atPath: logPath) }
}
