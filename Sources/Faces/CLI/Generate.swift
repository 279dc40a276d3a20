import ArgumentParser
import FoundationEssentials
import Glibc
import KeychainCrypto

// Password generation: `add-…-password --generate[=LENGTH]` stores a generated secret without it
// ever being on a command line; `keychainfs generate` prints one for scripts to pipe on.

/// The characters a generated password draws from, and its length.
struct PasswordRecipe: ParsableArguments {
    static let defaultLength = 20
    static let lengthRange = 1...4096
    static let lowercase = Array("abcdefghijklmnopqrstuvwxyz".utf8)
    static let uppercase = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8)
    static let digits = Array("0123456789".utf8)
    /// Printable ASCII punctuation, without the space (easy to lose in copy and paste).
    static let symbols = Array("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~".utf8)

    @Option(
        name: .long,
        help: ArgumentHelp("Length of a generated password (default \(defaultLength)).", valueName: "length"))
    var length: Int?
    @Flag(name: .long, help: "Generate without lowercase letters.") var noLowercase = false
    @Flag(name: .long, help: "Generate without uppercase letters.") var noUppercase = false
    @Flag(name: .long, help: "Generate without digits.") var noDigits = false
    @Flag(name: .long, help: "Generate without symbols (!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~).") var noSymbols = false

    var isDefault: Bool { length == nil && !noLowercase && !noUppercase && !noDigits && !noSymbols }

    /// The character classes in use; a generated password holds at least one of each.
    var classes: [[UInt8]] {
        [
            noLowercase ? nil : Self.lowercase, noUppercase ? nil : Self.uppercase, noDigits ? nil : Self.digits,
            noSymbols ? nil : Self.symbols,
        ].compactMap { $0 }
    }

    func validate() throws {
        if classes.isEmpty { throw ValidationError("every character class is excluded: nothing to generate from") }
        if let length, !Self.lengthRange.contains(length) {
            throw ValidationError(
                "a generated password's length is \(Self.lengthRange.lowerBound) to \(Self.lengthRange.upperBound)")
        }
        if let length, length < classes.count {
            throw ValidationError(
                "a password of \(length) characters cannot hold all \(classes.count) character classes; exclude some")
        }
    }

    /// A password drawn uniformly from every string of the length over the classes' union that
    /// holds each class at least once: each character from libsodium's unbiased
    /// randombytes_uniform, and a draw that misses a class is thrown away whole (redrawing only
    /// the missing character would favour some strings).
    func generate() -> [UInt8] {
        let alphabet = classes.flatMap { $0 }
        let count = length ?? Self.defaultLength
        while true {
            var candidate = (0..<count).map { _ in alphabet[Int(Sodium.uniformRandom(below: UInt32(alphabet.count)))] }
            if classes.allSatisfy({ set in candidate.contains(where: set.contains) }) { return candidate }
            Sodium.wipe(&candidate)
        }
    }
}

/// `--generate[=LENGTH]` and `--print`, on the add commands.
struct GenerationOptions: ParsableArguments {
    @Flag(
        name: .long,
        help: "Store a generated password instead of reading one (--generate=LENGTH sets its length).")
    var generate = false
    @Flag(name: .long, help: "With --generate: print the stored password on stdout.")
    var print = false
    @OptionGroup var recipe: PasswordRecipe

    func validate() throws {
        if !generate && print { throw ValidationError("--print shows a generated password: add --generate") }
        if !generate && !recipe.isDefault {
            throw ValidationError("--length and --no-… describe a generated password: add --generate")
        }
    }

    /// `--generate=LENGTH` is `--generate --length LENGTH`: ArgumentParser has no option whose
    /// value may be left out.
    static func expand(_ argument: String) -> [String] {
        guard argument.hasPrefix("--generate=") else { return [argument] }
        return ["--generate", "--length", String(argument.dropFirst("--generate=".count))]
    }
}

struct Generate: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print a generated password on stdout, for scripts to pipe into a command's stdin.",
        usage: "keychainfs generate [--length length] [--no-lowercase] [--no-uppercase] [--no-digits] [--no-symbols]",
        discussion:
            "Drawn with libsodium's randombytes_uniform; it holds at least one character of each class in use. To store one without printing it, use add-generic-password --generate."
    )
    @OptionGroup var recipe: PasswordRecipe

    func run() throws {
        var password = recipe.generate()
        defer { Sodium.wipe(&password) }
        Output.write(password)
        Output.write([UInt8(ascii: "\n")])
    }
}
