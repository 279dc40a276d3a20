import CSystemd
import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess

// The service object, /org/freedesktop/secrets: org.freedesktop.Secret.Service.

extension SecretServiceProvider {
    static let serviceInterface = Interface(
        name: Introspection.service,
        methods: [
            Method(
                "OpenSession", in: [Argument("algorithm", "s"), Argument("input", "v")],
                out: [Argument("output", "v"), Argument("result", "o")]
            ) { try $0.openSession($1) },
            Method(
                "CreateCollection", in: [Argument("properties", "a{sv}"), Argument("alias", "s")],
                out: [Argument("collection", "o"), Argument("prompt", "o")]
            ) { try $0.createCollection($1) },
            Method(
                "SearchItems", in: [Argument("attributes", "a{ss}")],
                out: [Argument("unlocked", "ao"), Argument("locked", "ao")]
            ) { try $0.serviceSearchItems($1) },
            Method(
                "Unlock", in: [Argument("objects", "ao")], out: [Argument("unlocked", "ao"), Argument("prompt", "o")]
            ) {
                try $0.unlockObjects($1)
            },
            Method("Lock", in: [Argument("objects", "ao")], out: [Argument("locked", "ao"), Argument("Prompt", "o")]) {
                try $0.lockObjects($1)
            },
            Method(
                "GetSecrets", in: [Argument("items", "ao"), Argument("session", "o")],
                out: [Argument("secrets", "a{o(oayays)}")]
            ) { try $0.getSecrets($1) },
            Method("ReadAlias", in: [Argument("name", "s")], out: [Argument("collection", "o")]) {
                try $0.readAlias($1)
            },
            Method("SetAlias", in: [Argument("name", "s"), Argument("collection", "o")]) { _, _ in
                throw BusError.notSupported("SetAlias is not supported by keychainfs")
            },
            // gnome-keyring's extensions some clients try: answered NotSupported, not UnknownMethod.
            Method("ChangeLock", in: [Argument("collection", "o")], out: [Argument("prompt", "o")]) { _, _ in
                throw BusError.notSupported("ChangeLock is not supported by keychainfs")
            },
            Method("LockService") { _, _ in throw BusError.notSupported("LockService is not supported by keychainfs") },
            Method(
                "CreateWithMasterPassword", in: [Argument("properties", "a{sv}"), Argument("master", "(oayays)")],
                out: [Argument("collection", "o")]
            ) { _, _ in throw BusError.notSupported("CreateWithMasterPassword is not supported by keychainfs") },
            Method("UnlockWithMasterPassword", in: [Argument("collection", "o"), Argument("master", "(oayays)")]) {
                _, _ in throw BusError.notSupported("UnlockWithMasterPassword is not supported by keychainfs")
            },
        ],
        properties: [Property("Collections", "ao")],
        values: { provider, _ in ["Collections": .paths(provider.collectionPaths)] })

    /// The collections the service lists.
    var collectionPaths: [String] { ObjectPath.CollectionName.allCases.map(ObjectPath.collectionPath) }

    func serviceSearchItems(_ call: Call) throws {
        let (unlocked, locked) = try search(call, includingSession: true)
        try reply(call) { w throws(BusError) in
            try w.objectPaths(unlocked)
            try w.objectPaths(locked)
        }
    }

    func getSecrets(_ call: Call) throws {
        let paths = try call.reader.objectPaths()
        let session = try call.reader.objectPath()
        let algorithm = try checkSession(session, for: call)
        let caller = try self.caller(of: call)
        var secrets: [(String, KeychainItem)] = []
        var sessionSecrets: [(String, SessionCollection.Item)] = []
        for path in paths {
            if case .sessionItem(let n)? = ObjectPath(path), let item = try? sessionItem(n) {
                sessionSecrets.append((path, item))
                continue
            }
            guard case .item(let itemClass, let id)? = ObjectPath(path) else { continue }
            do { secrets.append((path, try readSecretOf(caller, itemClass, id))) } catch let e as BusError
                where e.name == "org.freedesktop.Secret.Error.NoSuchObject"
            {
                continue
            }
        }
        try reply(call) { w throws(BusError) in
            try w.open("a", "{o(oayays)}")
            for (path, item) in secrets {
                try w.open("e", "o(oayays)")
                try w.objectPath(path)
                try writeSecret(
                    w, session: session, algorithm: algorithm, value: item.data ?? [],
                    contentType: SecretServiceMapping.contentType(of: item))
                try w.close()
            }
            for (path, item) in sessionSecrets {
                try w.open("e", "o(oayays)")
                try w.objectPath(path)
                try writeSecret(
                    w, session: session, algorithm: algorithm, value: item.secret, contentType: item.contentType)
                try w.close()
            }
            try w.close()
        }
    }

    func unlockObjects(_ call: Call) throws {
        let paths = try call.reader.objectPaths()
        let (caller, pid) = try callerAndPid(of: call)
        var unlocksVault = false
        if collectionLocked {
            do { try unlock() } catch let refusal as BusError {
                // No passphrase to read again: the Prompt object asks the caller's user.
                guard prompter != nil else { throw refusal }
                unlocksVault = true
            }
            access.invalidatePolicy()
        }
        // Unlocked now (the keychain, and items that need no presence or had it given), and
        // the items whose presence the prompt is to ask for.
        var unlocked: [String] = []
        var needPresence = false
        var needIdentity = false
        for path in paths where !unlocksVault {
            if try isUnlocked(path, for: caller) {
                unlocked.append(path)
            } else if case .item(let itemClass, let id)? = ObjectPath(path) {
                let item = try visibleItem(caller, itemClass, id)
                needPresence = needPresence || caller.needsPresence(for: item)
                needIdentity = needIdentity || needsIdentity(item, caller)
            }
        }
        guard unlocksVault || needPresence || needIdentity else {
            try reply(call) { w throws(BusError) in
                try w.objectPaths(unlocked)
                try w.objectPath("/")
            }
            return
        }
        if let why = prompter?.whyNoPrompt(for: caller) {
            let what =
                unlocksVault
                ? "the keychain is locked"
                : needPresence ? "the item needs user presence" : "the bus names the caller by pid only"
            let remedy = unlocksVault ? " (or start the provider with --passphrase-file)" : ""
            throw BusError("org.freedesktop.Secret.Error.IsLocked", "\(what) and \(why)\(remedy)")
        }
        var pending = PendingPrompt(owner: call.sender, caller: caller, paths: paths, unlocksVault: unlocksVault)
        pending.confirmsIdentity = needIdentity
        pending.pid = pid
        let n = prompts.withLock { p -> Int in
            defer { p.next += 1 }
            p.open[p.next] = pending
            return p.next
        }
        try reply(call) { w throws(BusError) in
            try w.objectPaths(unlocked)
            try w.objectPath(ObjectPath.prompt(n))
        }
    }

    func lockObjects(_ call: Call) throws {
        let paths = try call.reader.objectPaths()
        // Locks the one keychain, through the door (audited `lock`). Locking is always safe: a
        // client whose process cannot be identified locks it too, audited as such.
        if let caller = try? caller(of: call) {
            session(caller).lock()
        } else {
            access.serviceSession(describedAs: "\(call.sender) (process unknown)", via: "dbus").lock()
        }
        try reply(call) { w throws(BusError) in
            try w.objectPaths(paths.filter { ObjectPath($0) != nil })
            try w.objectPath("/")
        }
        propertiesChanged(ObjectPath.collectionPath, Introspection.collection, ["Locked"])
    }

    func readAlias(_ call: Call) throws {
        let alias = try call.reader.string()
        try reply(call) { w throws(BusError) in
            try w.objectPath(ObjectPath.aliasTable[alias].map(ObjectPath.collectionPath) ?? "/")
        }
    }

    func createCollection(_ call: Call) throws {
        try call.reader.skip("a{sv}")
        let alias = try call.reader.string()
        guard let existing = ObjectPath.aliasTable[alias] else {
            throw BusError.notSupported(
                "keychainfs serves two collections (login, aliases default and login; session, alias session); "
                    + "new collections are not supported")
        }
        try reply(call) { w throws(BusError) in
            try w.objectPath(ObjectPath.collectionPath(existing))
            try w.objectPath("/")
        }
    }
}
