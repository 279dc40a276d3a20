import Foundation
@testable import KeychainFS
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
}
