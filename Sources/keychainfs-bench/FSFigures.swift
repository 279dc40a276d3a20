import CFuse
import Foundation
import Keychain
import KeychainCrypto

/// Figures of one mounted filesystem (the floor or keychainfs at one vault size).
struct FSFigures {
    var openReadClose = Samples()
    var cat = Samples()
    var xattrValue = Samples()  // getxattr user.keychain.account (a real value)
    var xattrAbsent = Samples()  // getxattr security.selinux (ENODATA: what ls -l asks)
    var xattrFirst = Samples()  // getxattr user.keychain.account of items not read since a write
    var readdirSmall = Samples()  // opendir + getdents to the end + closedir, 1,000 entries
    var readdirLarge = Samples()  // … 10,000 entries
    var readdirLargeFirst = Samples()  // … 10,000 entries, the first listing after a write elsewhere in the vault
    var lsSmallCold = Samples(), lsSmallWarm = Samples()
    var lsLargeCold = Samples(), lsLargeWarm = Samples()
    var lookupSmallCold = Samples()  // stat of /genp/d1k after the entry timeout expired
    var lookupLargeCold = Samples()  // stat of /genp/d10k …
    /// stat of /genp/d1k/acctNNNNNN, a name not looked up since its entry expired (its directory
    /// looked up untimed first): one LOOKUP of a name in the 1,000-entry directory.
    var lookupNameCold = Samples()
    var writes = Samples()  // open O_WRONLY|O_TRUNC, write 12 bytes, close
    var startup = Samples()  // spawn → live mount
    var reportedOpen = Samples(), reportedUnlock = Samples(), reportedMount = Samples()  // built-in daemon only
    var benchOpen = Samples(), benchUnlock = Samples()  // Keychain.open / unlock in the bench process
    var benchKDF = Samples()  // Argon2id alone, next to each of those unlocks
    var rssAfterMount = Double.nan
    /// From the live mount until the daemon used no CPU (its background integrity pass done),
    /// waited before the measurements.
    var idleAfterMount = Double.nan
    /// Each item of the 1,000-entry directory read once (open, read, close), keychainfs's right
    /// after its mount, during its background integrity pass (FSBenchFirstReads.swift).
    var firstReads = Samples()
    /// When those reads ended, from the live mount: before `idleAfterMount`, all were in the pass.
    var firstReadsEnded = Double.nan
    var rssAfterWork = Double.nan
    var peakRSS = Double.nan
}

struct FSSizeFigures {
    var size = 0
    var floor = FSFigures()
    var kc = FSFigures()
    var hasLarge = false
    /// Durable-commit floor: a raw SQLite autocommit update of one row at this size.
    var rawUpdate = Samples()
    /// Closes/s of one writer and of 8 at once through the keychainfs mount (FSBenchWriters.swift).
    var concurrentWrites = ConcurrentWriteFigures()
    /// The same writes through the durable floor (`FloorCommits`): the floor whose FLUSH makes
    /// the raw update above, grouped; what a FUSE filesystem doing nothing else reaches.
    var durableFloorWrites = Samples()
    var durableFloorConcurrentWrites = ConcurrentWriteFigures()
    /// The raw update's rate measured beside the concurrent section's one-writer blocks.
    var rawUpdateBesideConcurrent = Samples()
    var cpus = ""
}
