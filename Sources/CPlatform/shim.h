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
#include <sys/syscall.h>
#include <malloc.h>
#include <sys/stat.h>
#include <sys/vfs.h>

/* prctl is variadic, so Swift cannot call it directly. */
static inline int kcfs_set_dumpable(int on) { return prctl(PR_SET_DUMPABLE, on ? 1 : 0, 0, 0, 0); }
static inline int kcfs_get_dumpable(void) { return prctl(PR_GET_DUMPABLE, 0, 0, 0, 0); }
/* Guarded by _GNU_SOURCE in glibc's header, so Swift may not see it. */
static const short kcfs_posix_spawn_setsid = 0x80;
/* O_PATH is guarded by _GNU_SOURCE in glibc's <fcntl.h>, so Swift may not see it. */
static const int kcfs_o_path = 010000000;
/* Whether `fd` is on pidfs (Linux 6.9+), where every process (every struct pid) has an inode
   number from a 64-bit counter that is never reused while the system runs: then a pidfd's
   inode tells its process from every other that had or will have its pid. Older kernels give
   pidfds an anonymous inode, one number for all. */
static inline int kcfs_is_pidfs(int fd) {
    struct statfs fs;
    return fstatfs(fd, &fs) == 0 && (unsigned long)fs.f_type == 0x50494446UL; /* PIDFS_MAGIC */
}
/* The inode number of an open file, or 0. */
static inline unsigned long long kcfs_fd_inode(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 ? (unsigned long long)st.st_ino : 0;
}
/* pidfd_open has no glibc wrapper in Debian 12's glibc (2.36). */
static inline int kcfs_pidfd_open(pid_t pid, unsigned int flags) { return (int)syscall(SYS_pidfd_open, pid, flags); }
/* mallopt's option numbers are macros in <malloc.h>, which Swift's Glibc module leaves out. */
static inline int kcfs_malloc_arena_max(int arenas) { return mallopt(M_ARENA_MAX, arenas); }
/* The calling thread's niceness (Linux: setpriority on a thread id sets that thread's alone). */
static inline int kcfs_set_thread_niceness(int nice) { return setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice); }
#endif
