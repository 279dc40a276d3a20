#ifndef KEYCHAINFS_MODP_DH_H
#define KEYCHAINFS_MODP_DH_H

#include <stddef.h>
#include <stdint.h>

/// The byte length of a value in the 1024-bit MODP group (RFC 2409 group 2).
#define KEYCHAINFS_MODP1024_BYTES 128

/// g^private mod p, big-endian, left-padded to 128 bytes. Returns 0, or -1 for an empty key.
int keychainfs_modp1024_public(const uint8_t *private_key, size_t private_length, uint8_t *public_out);

/// peer^private mod p, big-endian, left-padded to 128 bytes (the Secret Service spec's
/// shared secret). Returns 0, or -1 when the peer's value is not in 1 < y < p-1.
int keychainfs_modp1024_shared(
    const uint8_t *private_key, size_t private_length, const uint8_t *peer, size_t peer_length, uint8_t *shared_out);

#endif
