// Diffie-Hellman in the 1024-bit MODP group (RFC 2409, group 2), for the Secret Service
// session algorithm dh-ietf1024-sha256-aes128-cbc-pkcs7. The exponentiations with the private
// key use GMP's mpz_powm_sec, made for cryptographic use: its time and memory access pattern do
// not depend on the exponent's bits. Every intermediate holding a secret is zeroed before it is
// freed.
#include "modp_dh.h"

#include <gmp.h>
#include <string.h>

static const char modp1024_hex[] =
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74"
    "020BBEA63B139B22514A08798E3404DDEF9519B3CD3A431B302B0A6DF25F1437"
    "4FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED"
    "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE65381FFFFFFFFFFFFFFFF";

static void wipe_clear(mpz_t x) {
    memset(x->_mp_d, 0, (size_t)x->_mp_alloc * sizeof(mp_limb_t));
    mpz_clear(x);
}

/// x as 128 big-endian bytes, left-padded with zeros (x < p, so it fits).
static void export_padded(const mpz_t x, uint8_t *out) {
    uint8_t buffer[KEYCHAINFS_MODP1024_BYTES];
    size_t count = 0;
    memset(out, 0, KEYCHAINFS_MODP1024_BYTES);
    mpz_export(buffer, &count, 1, 1, 1, 0, x);
    if (count > 0 && count <= KEYCHAINFS_MODP1024_BYTES) {
        memcpy(out + KEYCHAINFS_MODP1024_BYTES - count, buffer, count);
    }
    memset(buffer, 0, sizeof buffer);
}

static int power(const uint8_t *base_bytes, size_t base_length, int base_is_generator, const uint8_t *private_key,
                 size_t private_length, uint8_t *out) {
    if (private_length == 0) return -1;
    mpz_t p, base, exponent, result, limit;
    mpz_init_set_str(p, modp1024_hex, 16);
    mpz_inits(base, exponent, result, limit, NULL);
    int status = 0;
    if (base_is_generator) {
        mpz_set_ui(base, 2);
    } else {
        mpz_import(base, base_length, 1, 1, 1, 0, base_bytes);
        // The peer's value must be in 1 < y < p-1: 0, 1 and p-1 (and anything at or above p)
        // would force the shared secret into a tiny set.
        mpz_sub_ui(limit, p, 1);
        if (mpz_cmp_ui(base, 1) <= 0 || mpz_cmp(base, limit) >= 0) status = -1;
    }
    if (status == 0) {
        mpz_import(exponent, private_length, 1, 1, 1, 0, private_key);
        if (mpz_sgn(exponent) == 0) {
            status = -1;
        } else {
            mpz_powm_sec(result, base, exponent, p);
            export_padded(result, out);
        }
    }
    wipe_clear(exponent);
    wipe_clear(result);
    mpz_clears(p, base, limit, NULL);
    return status;
}

int keychainfs_modp1024_public(const uint8_t *private_key, size_t private_length, uint8_t *public_out) {
    return power(NULL, 0, 1, private_key, private_length, public_out);
}

int keychainfs_modp1024_shared(
    const uint8_t *private_key, size_t private_length, const uint8_t *peer, size_t peer_length, uint8_t *shared_out) {
    return power(peer, peer_length, 0, private_key, private_length, shared_out);
}
