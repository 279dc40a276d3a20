import CSQLite
import Foundation
import Keychain
import KeychainCrypto
import KeychainStore

// The printed report of the CoreBench figures (docs/benchmarks.md shows it).
extension CoreBench {
    // MARK: Printing

    static func printFigures(_ f: CoreFigures, crypto: CryptoBaseline) {
        Out.line()
        let population =
            f.populateCount == 0
            ? "every add timed"
            : "\(Fmt.grouped(f.populateCount)) items populated in \(Fmt.seconds(f.populateSeconds)) (\(Fmt.rate(Double(f.populateCount) / f.populateSeconds)) items, \(Fmt.grouped(BenchVault.populateBatch)) per durable transaction), then the last \(Fmt.grouped(f.add.count)) timed"
        Out.line(
            "Core at \(Fmt.grouped(f.size)) items (vault created in \(Fmt.duration(f.createSeconds)); \(population))")
        var rows: [[String]] = [
            ["operation", "keychain ops/s", "p50", "p99", "raw SQLite ops/s", "raw p50", "cost ratio"]
        ]
        func row(_ name: String, _ k: Samples, _ r: Samples) {
            rows.append([
                name, Fmt.rate(k.rate), Fmt.duration(k.p50), Fmt.duration(k.p99),
                Fmt.rate(r.rate), Fmt.duration(r.p50), Fmt.ratio(r.rate / k.rate),
            ])
        }
        row("add (durable)", f.add, f.raw.insert)
        row("find (pk, returnData)", f.find, f.raw.select)
        row("update (data, durable)", f.update, f.raw.update)
        Out.table(rows)
        Out.line(
            "  raw SQLite: same schema and pragmas (WAL, synchronous=FULL, secure_delete), rows of the vault's byte lengths, \(Fmt.grouped(f.size)) rows, autocommit, C API; measured in blocks alternating with the keychain's"
        )
        let kdf = f.kdf.p50
        let unlock = f.unlock.p50
        let rest = unlock - kdf
        Out.line(
            "  unlock (medians of 5): Keychain.open \(Fmt.duration(f.open.p50)) + unlock \(Fmt.duration(unlock)) = Argon2id INTERACTIVE \(Fmt.duration(kdf)) (run alone next to each unlock) + rest \(rest > f.manifest.p50 / 2 ? Fmt.duration(rest) : "≈ 0 (below Argon2id's run-to-run noise)"); the manifest check alone (verifyIntegrity) \(Fmt.duration(f.manifest.p50)) = \(Fmt.duration(f.manifest.p50 / Double(f.size))) per item"
        )
        Out.line(
            "  file after checkpoint: \(Fmt.bytes(f.vaultBytes)) + WAL \(Fmt.bytes(f.walBytes)) = \(String(format: "%.0f", f.bytesPerItem)) bytes/item; stored columns of one row \(String(format: "%.0f", f.rowPayload)) bytes (sealed attrs \(f.shape.attrs), wrapped item key \(f.shape.itemKey), sealed data \(f.shape.data), two 32-byte indexes) → \(Fmt.ratio(f.bytesPerItem / f.rowPayload)) of the payload"
        )
        let cryptoFind = 3 * crypto.open12 + crypto.keyedHash
        Out.line(
            "  crypto share of a find's p50: 3 AEAD opens + 1 keyed hash ≈ \(Fmt.duration(cryptoFind)) (\(String(format: "%.0f%%", 100 * cryptoFind / f.find.p50))); one item key in guarded memory ≈ \(Fmt.duration(crypto.guardedKey)) (\(String(format: "%.0f%%", 100 * crypto.guardedKey / f.find.p50)))"
        )
    }

    static func printCrypto(_ c: CryptoBaseline) {
        Out.line()
        Out.line("Crypto baseline (libsodium, this run)")
        Out.table([
            ["XChaCha20-Poly1305 seal, 12-byte secret", Fmt.duration(c.seal12)],
            ["XChaCha20-Poly1305 open, 12-byte secret", Fmt.duration(c.open12)],
            ["keyed BLAKE2b-256 of 64 bytes (blind index)", Fmt.duration(c.keyedHash)],
            [
                "32-byte key in guarded memory (SecureBytes: sodium_malloc, mprotect, sodium_free)",
                Fmt.duration(c.guardedKey),
            ],
            ["Argon2id INTERACTIVE (crypto_pwhash, median of 3)", Fmt.duration(c.argon2Interactive)],
        ])
    }

    static func printFlatness(_ all: [CoreFigures]) {
        guard all.count >= 2, let a = all.first, let b = all.last else { return }
        Out.line()
        Out.line(
            "Core flatness, \(Fmt.grouped(a.size)) → \(Fmt.grouped(b.size)) items (per-op time ratio; 1.00× is flat; the raw SQLite ratio is what the B-tree depth alone costs)"
        )
        Out.table([
            ["figure", "keychain", "raw SQLite"],
            ["add p50", Fmt.ratio(b.add.p50 / a.add.p50), Fmt.ratio(b.raw.insert.p50 / a.raw.insert.p50)],
            ["find p50", Fmt.ratio(b.find.p50 / a.find.p50), Fmt.ratio(b.raw.select.p50 / a.raw.select.p50)],
            ["update p50", Fmt.ratio(b.update.p50 / a.update.p50), Fmt.ratio(b.raw.update.p50 / a.raw.update.p50)],
            ["unlock (total)", Fmt.ratio(b.unlock.p50 / a.unlock.p50), ""],
            [
                "manifest check", Fmt.ratio(b.manifest.p50 / a.manifest.p50),
                "(O(n) by design: every row is hashed at unlock)",
            ],
            ["bytes/item", Fmt.ratio(b.bytesPerItem / a.bytesPerItem), ""],
        ])
    }
}
