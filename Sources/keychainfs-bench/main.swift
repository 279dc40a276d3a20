import Foundation
import CSQLite
import KeychainStore
import KeychainCrypto
import Keychain
import KeychainFS
import CFuse
import CPlatform

typealias Aff = @convention(c) (pid_t, Int, UnsafeMutableRawPointer?) -> Int32
let sym = dlsym(nil, "sched_setaffinity")!
let set = unsafeBitCast(sym, to: Aff.self)
let gsym = unsafeBitCast(dlsym(nil, "sched_getaffinity")!, to: Aff.self)
var mask = [UInt64](repeating: 0, count: 16)
mask[0] = 1
let rc = mask.withUnsafeMutableBytes { set(0, $0.count, $0.baseAddress) }
var got = [UInt64](repeating: 0, count: 16)
_ = got.withUnsafeMutableBytes { gsym(0, $0.count, $0.baseAddress) }
print("rc", rc, got[0], sqlite3_libversion().map { String(cString: $0) } ?? "")
