import Foundation
import Keychain
import KeychainAPI
import PropertyBased
import Testing

// The API socket's wire protocol (Sources/KeychainAPI/APIWire.swift): every request and reply
// reads back exactly as written, byte for byte, and no byte string makes the decoders crash or
// accept trailing or missing bytes.
@Suite("API wire protocol")
struct APIWireTests {
    typealias RNG = any SeededRandomNumberGenerator

    static func bytes(_ rng: inout RNG, max: Int = 40) -> [UInt8] {
        (0..<Int.random(in: 0...max, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
    }

    static func string(_ rng: inout RNG) -> String {
        let pool: [Unicode.Scalar] = ["a", "Z", "0", " ", "/", "%", "\u{0}", "\n", "é", "\u{202E}", "😀", "\u{FEFF}"]
        var s = String.UnicodeScalarView()
        for _ in 0..<Int.random(in: 0...12, using: &rng) { s.append(pool.randomElement(using: &rng)!) }
        return String(s)
    }

    static func value(_ type: AttributeType, _ rng: inout RNG) -> AttributeValue {
        switch type {
        case .string: .string(string(&rng))
        case .data: .data(bytes(&rng))
        case .number: .number(Int64.random(in: Int64.min...Int64.max, using: &rng))
        case .bool: .bool(Bool.random(using: &rng))
        case .date: .date(Date(timeIntervalSince1970: Double(Int.random(in: -1_000_000...4_000_000_000, using: &rng))))
        case .accessibility: .accessibility(Accessibility.allCases.randomElement(using: &rng)!)
        case .accessControl:
            .accessControl(
                AccessControl(
                    protection: Accessibility.allCases.randomElement(using: &rng)!,
                    flags: AccessControlFlags(rawValue: UInt32.random(in: 0...UInt32.max, using: &rng))))
        }
    }

    static func attributes(_ c: ItemClass, _ rng: inout RNG) -> Attributes {
        var out = Attributes()
        for attribute in Schema.attributes(of: c) where Int.random(in: 0..<4, using: &rng) == 0 {
            out[attribute] = value(attribute.type, &rng)
        }
        return out
    }

    static func optionalBool(_ rng: inout RNG) -> Bool? { [nil, true, false].randomElement(using: &rng)! }

    static func query(_ rng: inout RNG) -> Query {
        let c = ItemClass.allCases.randomElement(using: &rng)!
        var q = Query(c, attributes(c, &rng))
        q.matchLimit = [nil, .one, .all, .count(Int.random(in: 0...1000, using: &rng))].randomElement(using: &rng)!
        q.caseInsensitive = optionalBool(&rng)
        q.returnData = optionalBool(&rng)
        q.returnAttributes = optionalBool(&rng)
        q.synchronizableAny = Bool.random(using: &rng)
        q.persistentReference = Bool.random(using: &rng) ? Int64.random(in: 1...Int64.max, using: &rng) : nil
        q.authenticationUI = [nil, .allow, .fail, .skip].randomElement(using: &rng)!
        return q
    }

    static func request(_ rng: inout RNG) -> APIRequest {
        let c = ItemClass.allCases.randomElement(using: &rng)!
        switch Int.random(in: 0..<18, using: &rng) {
        case 17:
            let since: Int64? = Bool.random(using: &rng) ? Int64.random(in: Int64.min...Int64.max, using: &rng) : nil
            return .watch(since: since, follow: Bool.random(using: &rng))
        case 10: return .identities
        case 11: return .createKeyPair(KeyAlgorithm.allCases.randomElement(using: &rng)!, attributes(.key, &rng))
        case 12:
            let items = (0..<Int.random(in: 0...4, using: &rng)).map { _ in
                let c = ItemClass.allCases.randomElement(using: &rng)!
                return WireNewItem(NewItem(c, attributes(c, &rng), data: bytes(&rng)))
            }
            return .storeBatch(items, updateExisting: Bool.random(using: &rng))
        case 13: return .accessPolicy
        case 14: return .setAccessPolicy(policy(&rng), passphrase: bytes(&rng))
        case 15: return .backup(destination: string(&rng))
        case 0: return .copyMatching(WireQuery(query(&rng)))
        case 16:
            var m = MountRequest(mountpoint: "/" + string(&rng).replacingOccurrences(of: "\u{0}", with: ""))
            m.allowOther = Bool.random(using: &rng)
            m.defaultPermissions = Bool.random(using: &rng)
            m.debug = Bool.random(using: &rng)
            m.cacheMilliseconds = Int64.random(in: 0...86_400_000, using: &rng)
            return .mount(m)
        case 1: return .add(c, attributes(c, &rng), data: bytes(&rng), extras: bytes(&rng))
        case 2:
            let q = query(&rng)
            return .update(
                WireQuery(q), attributes(q.itemClass, &rng), data: Bool.random(using: &rng) ? bytes(&rng) : nil,
                extras: bytes(&rng))
        case 3: return .delete(WireQuery(query(&rng)))
        case 4: return .addOrUpdate(c, attributes(c, &rng), data: bytes(&rng), extras: bytes(&rng))
        case 5: return .status
        case 6: return .lock
        case 7: return .unlock(passphrase: bytes(&rng))
        case 8:
            return .changePassphrase(
                PassphraseChange(
                    old: bytes(&rng), new: bytes(&rng), rotate: Bool.random(using: &rng),
                    opsLimit: Bool.random(using: &rng) ? UInt64.random(in: 0...UInt64.max, using: &rng) : nil,
                    memLimit: Bool.random(using: &rng) ? UInt64.random(in: 0...UInt64.max, using: &rng) : nil))
        default: return .prove(passphrase: bytes(&rng))
        }
    }

    /// A policy as the CLI makes one: groups of executables and remembered presence decisions
    /// (names without a NUL, which no path has).
    static func policy(_ rng: inout RNG) -> AccessPolicy {
        let names = ["team", "ops", "default", "/usr/bin/cat", "/opt/a b/é", "x;y", ""]
        var policy = AccessPolicy()
        for _ in 0..<Int.random(in: 0...4, using: &rng) {
            policy.add(group: names.randomElement(using: &rng)!, executable: names.randomElement(using: &rng)! + "/exe")
        }
        for _ in 0..<Int.random(in: 0...3, using: &rng) {
            policy.remember(
                executable: "/bin/" + names.randomElement(using: &rng)!,
                itemID: Int64.random(in: 1...Int64.max, using: &rng))
        }
        return policy
    }

    static func item(_ rng: inout RNG) -> WireItem {
        let c = ItemClass.allCases.randomElement(using: &rng)!
        let data: [UInt8]? = Bool.random(using: &rng) ? bytes(&rng) : nil
        return WireItem(
            KeychainItem(
                id: Int64.random(in: 1...Int64.max, using: &rng), itemClass: c, attributes: attributes(c, &rng),
                data: data, dataLength: data?.count ?? Int.random(in: 0...100_000, using: &rng),
                extras: Bool.random(using: &rng) ? bytes(&rng) : nil))
    }

    /// A change as `watch` streams it: any class, operation and path (a rename with its old path).
    static func change(_ rng: inout RNG) -> WireChange {
        let kind = [ItemChange.Kind.added, .changed, .renamed, .removed].randomElement(using: &rng)!
        return WireChange(
            seq: Int64.random(in: Int64.min...Int64.max, using: &rng), kind: kind,
            itemClass: ItemClass.allCases.randomElement(using: &rng)!,
            id: Int64.random(in: Int64.min...Int64.max, using: &rng), path: string(&rng),
            oldPath: Bool.random(using: &rng) ? string(&rng) : nil)
    }

    static func reply(_ rng: inout RNG) -> APIReply {
        switch Int.random(in: 0..<11, using: &rng) {
        case 10:
            return .changes(
                last: Int64.random(in: Int64.min...Int64.max, using: &rng),
                (0..<Int.random(in: 0...5, using: &rng)).map { _ in change(&rng) })
        case 5: return .keyPair(item(&rng), publicKey: string(&rng))
        case 6: return .stored((0..<Int.random(in: 0...6, using: &rng)).map { _ in Bool.random(using: &rng) })
        case 7:
            return .refused(
                (0..<Int.random(in: 0...4, using: &rng)).map { _ in
                    WireRefusal(
                        index: Int.random(in: 0...Int(Int32.max), using: &rng),
                        status: KeychainStatus(rawValue: Int32.random(in: Int32.min...Int32.max, using: &rng)),
                        message: string(&rng))
                })
        case 8: return .policy(policy(&rng))
        case 9:
            return .backup(
                items: Int.random(in: 0...Int(Int32.max), using: &rng),
                format: Int64.random(in: Int64.min...Int64.max, using: &rng),
                counter: Bool.random(using: &rng) ? Int64.random(in: Int64.min...Int64.max, using: &rng) : nil)
        case 0: return .items((0..<Int.random(in: 0...4, using: &rng)).map { _ in item(&rng) })
        case 1: return .item(item(&rng), added: Bool.random(using: &rng))
        case 2: return .count(Int.random(in: 0...Int(Int32.max), using: &rng))
        case 3: return .status(vault: string(&rng), state: string(&rng))
        default:
            return .failure(
                KeychainStatus(rawValue: Int32.random(in: Int32.min...Int32.max, using: &rng)), string(&rng))
        }
    }

    @Test("every request reads back as written, byte for byte (3,000 random requests)")
    func requestsRoundTrip() async {
        let input = Generator { rng -> (APIRequest, [UInt8]) in
            (Self.request(&rng), (0..<16).map { _ in UInt8.random(in: 0...255, using: &rng) })
        }
        await propertyCheck(count: 3000, input: input) { pair in
            let (request, nonce) = pair
            let bytes = APICodec.encode(request, nonce: nonce)
            let decoded = try APICodec.decodeRequest(bytes)
            #expect(decoded.0 == request)
            #expect(decoded.nonce == nonce)
            #expect(APICodec.encode(decoded.0, nonce: decoded.nonce) == bytes)
        }
    }

    @Test("every reply reads back as written, byte for byte (3,000 random replies)")
    func repliesRoundTrip() async {
        let input = Generator { rng -> APIReply in Self.reply(&rng) }
        await propertyCheck(count: 3000, input: input) { reply in
            let bytes = APICodec.encode(reply)
            let decoded = try APICodec.decodeReply(bytes)
            #expect(decoded == reply)
            #expect(APICodec.encode(decoded) == bytes)
        }
    }

    @Test("a message cut short or lengthened is refused; one with a byte changed never crashes (3,000 tries)")
    func damagedMessages() async {
        let input = Generator { rng -> ([UInt8], Bool, Int, UInt8) in
            let isRequest = Bool.random(using: &rng)
            let bytes =
                isRequest
                ? APICodec.encode(Self.request(&rng), nonce: [UInt8](repeating: 7, count: 16))
                : APICodec.encode(Self.reply(&rng))
            return (bytes, isRequest, Int.random(in: 0..<3, using: &rng), UInt8.random(in: 0...255, using: &rng))
        }
        await propertyCheck(count: 3000, input: input) { tuple in
            var (bytes, isRequest, how, byte) = tuple
            switch how {
            case 0: bytes.removeLast(Int(byte) % bytes.count + 1)
            case 1: bytes.append(byte)
            default: bytes[Int(byte) % bytes.count] ^= 0x5A
            }
            let decoded =
                isRequest ? (try? APICodec.decodeRequest(bytes)) != nil : (try? APICodec.decodeReply(bytes)) != nil
            // Every part is length-prefixed and the end is checked: nothing missing or left over passes.
            if how < 2 { #expect(!decoded, "a damaged message (\(how == 0 ? "cut" : "lengthened")) was accepted") }
        }
    }

    @Test("random bytes never crash a decoder (5,000 tries)")
    func randomBytes() async {
        let input = Generator { rng -> [UInt8] in Self.bytes(&rng, max: 300) }
        await propertyCheck(count: 5000, input: input) { bytes in
            _ = try? APICodec.decodeRequest(bytes)
            _ = try? APICodec.decodeReply(bytes)
            _ = try? APICodec.decodeHello(bytes)
        }
    }

    @Test("a reply claiming more items than its bytes can hold is refused before anything is reserved")
    func lyingCount() {
        var bytes: [UInt8] = [1]
        withUnsafeBytes(of: UInt32.max.littleEndian) { bytes += $0 }
        #expect(throws: KeychainError.self) { try APICodec.decodeReply(bytes) }
    }

    @Test("a batch, a refusal list or a stored list claiming more than its bytes hold is refused")
    func lyingBatchCounts() {
        var count: [UInt8] = []
        withUnsafeBytes(of: UInt32.max.littleEndian) { count += $0 }
        // storeBatch: kind 13, the nonce, the update flag, the count.
        #expect(throws: KeychainError.self) {
            try APICodec.decodeRequest([13] + [UInt8](repeating: 0, count: 16) + [0] + count)
        }
        #expect(throws: KeychainError.self) { try APICodec.decodeReply([6] + count) }
        #expect(throws: KeychainError.self) { try APICodec.decodeReply([7] + count) }
        // changes: kind 10, the last sequence number, the count.
        #expect(throws: KeychainError.self) { try APICodec.decodeReply([10] + [UInt8](repeating: 0, count: 8) + count) }
    }
}
