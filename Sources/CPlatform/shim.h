#ifndef KEYCHAINFS_CPLATFORM_SHIM_H
#define KEYCHAINFS_CPLATFORM_SHIM_H
/* Linux calls that Swift's Glibc module does not export. */
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/file.h>
#include <termios.h>
#include <unistd.h>
#include <spawn.h>
#include <sys/xattr.h>

/* prctl is variadic, so Swift cannot call it directly. */
static inline int kcfs_set_dumpable(int on) { return prctl(PR_SET_DUMPABLE, on ? 1 : 0, 0, 0, 0); }
static inline int kcfs_get_dumpable(void) { return prctl(PR_GET_DUMPABLE, 0, 0, 0, 0); }
/* Guarded by _GNU_SOURCE in glibc's header, so Swift may not see it. */
static const short kcfs_posix_spawn_setsid = 0x80;
#endif
