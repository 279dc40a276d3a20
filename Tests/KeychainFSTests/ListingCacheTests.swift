import Foundation
@testable import KeychainFS
import Keychain
import Testing

// The listing cache's bound (docs/architecture.md, State/ListingCache.swift): entries over all
// listings never exceed the bound, the least recently used listing goes first, a listing larger
// than the bound is not kept, and a stale listing is dropped when found stale.

@Suite("Listing cache bound")
struct ListingCacheTests {
    static func listing(_ n: Int, stamp: Int64 = 1) -> ListingCache.Listing {
        ListingCache.Listing(
            stamp: [stamp], groups: ["g"],
            entries: (0..<n).map { DirectoryEntry(name: "acct\($0)", ino: UInt64($0 + 1), isDirectory: false) })
    }

    @Test("entries stay within the bound; the least recently used listing is evicted first")
    func leastRecentlyUsedOut() {
        let cache = ListingCache(maxEntries: 1_000)
        cache.store(Self.listing(400), for: 1)
        cache.store(Self.listing(400), for: 2)
        #expect(cache.size.listings == 2 && cache.size.entries == 800)
        _ = cache.listing(1)  // 1 is now more recent than 2
        cache.store(Self.listing(400), for: 3)
        #expect(cache.size.entries <= 1_000)
        #expect(cache.listing(2) == nil, "the least recently used listing should have gone")
        #expect(cache.listing(1)?.entries.count == 400)
        #expect(cache.listing(3)?.ino(named: "acct399") == 400)
    }

    @Test("many directories walked: the cache never holds more than its bound")
    func walkManyDirectories() {
        let cache = ListingCache(maxEntries: 5_000)
        for directory in 0..<200 {
            cache.store(Self.listing(1_000), for: UInt64(1_000 + directory))
            #expect(cache.size.entries <= 5_000)
        }
        #expect(cache.size == (listings: 5, entries: 5_000))
        #expect(cache.listing(1_199) != nil && cache.listing(1_000) == nil)
    }

    @Test("a listing larger than the bound is not kept; replacing a listing does not count it twice")
    func oversizeAndReplace() {
        let cache = ListingCache(maxEntries: 100)
        cache.store(Self.listing(101), for: 7)
        #expect(cache.listing(7) == nil && cache.size.entries == 0)
        cache.store(Self.listing(60), for: 7)
        cache.store(Self.listing(60, stamp: 2), for: 7)
        #expect(cache.size == (listings: 1, entries: 60))
        #expect(cache.listing(7)?.stamp == [2])
        cache.evict(7)
        #expect(cache.size == (listings: 0, entries: 0) && cache.listing(7) == nil)
    }

    @Test("the default bound holds the 10,000-entry directory")
    func defaultBound() {
        #expect(ListingCache.defaultMaxEntries >= 10_000)
        let cache = ListingCache()
        cache.store(Self.listing(10_000), for: 1)
        #expect(cache.listing(1)?.entries.count == 10_000)
    }

    @Test("a first listing reserved from its first chunk keeps no buffer many times its entries")
    func reservedFromFirstChunk() throws {
        // A first chunk of 10 names in a list said to have 1,000 chunks: 10,000 reserved, but the
        // other chunks hold nothing of this directory (ids of another server, or deleted names).
        var builder = ListingBuilder(
            .genericPassword, spelling: "svc", sameForAll: true, groups: ["default"], previous: nil)
        builder.expect(chunks: 1_000)
        try builder.chunk([1], isKept: false)
        for i in 0..<10 {
            builder.add(
                NameListEntry(
                    id: Int64(i + 1), .genericPassword,
                    attributes: [Schema.service: .string("svc"), Schema.account: .string("acct\(i)")]))
        }
        try builder.chunk([2], isKept: false)
        let made = builder.finish()
        #expect(made.entries.map(\.name) == (0..<10).map { "acct\($0)" })
        #expect(made.entries.capacity <= 2 * made.entries.count + 1_024, "capacity \(made.entries.capacity)")
        #expect(made.chunks.count == 1 && made.chunks[[1]]?.range == 0..<10)
    }
}
