#ifndef KEYCHAINFS_CSODIUM_SHIM_H
#define KEYCHAINFS_CSODIUM_SHIM_H
#include <sodium.h>
#endif
