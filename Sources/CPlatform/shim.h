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
#include <string.h>

/* prctl is variadic, so Swift cannot call it directly. */
static inline int kcfs_set_dumpable(int on) { return prctl(PR_SET_DUMPABLE, on ? 1 : 0, 0, 0, 0); }
static inline int kcfs_get_dumpable(void) { return prctl(PR_GET_DUMPABLE, 0, 0, 0, 0); }
/* Names the calling thread (15 bytes at most; longer names are cut): ps, top and perf show it. */
static inline int kcfs_set_thread_name(const char *name) { return prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0); }
/* Guarded by _GNU_SOURCE in glibc's header, so Swift may not see it. */
static const short kcfs_posix_spawn_setsid = 0x80;
/* O_PATH is guarded by _GNU_SOURCE in glibc's <fcntl.h>, so Swift may not see it. */
static const int kcfs_o_path = 010000000;
/* utimensat's UTIME_NOW and UTIME_OMIT: macros of <sys/stat.h> Swift does not import. */
static const long kcfs_utime_now = ((1l << 30) - 1l);
static const long kcfs_utime_omit = ((1l << 30) - 2l);
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
/* The calling thread's id: what the kernel puts in a FUSE request's pid. */
static inline int kcfs_gettid(void) { return (int)syscall(SYS_gettid); }
static inline int kcfs_set_thread_niceness(int nice) { return setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice); }
#include <sys/socket.h>
#include <poll.h>
#include <sys/time.h>
/* A Unix socket's peer and each message's sender (docs/security.md, "The service's callers").
   struct ucred and SO_PEERPIDFD need _GNU_SOURCE or newer headers than Debian 12's: spelled here. */
struct kcfs_ucred { int pid; unsigned int uid; unsigned int gid; };
/* SO_PEERCRED: the peer's pid, uid, gid as of connect(). */
static inline int kcfs_peer_cred(int fd, struct kcfs_ucred *out) {
    socklen_t len = sizeof *out;
    return getsockopt(fd, SOL_SOCKET, 17 /* SO_PEERCRED */, out, &len);
}
/* SO_PEERPIDFD (Linux 6.5+): a pidfd of the process that connected, taken by the kernel at
   connect(), so it names that process even if its pid is reused. -1 with errno ENOPROTOOPT on
   older kernels. */
static inline int kcfs_peer_pidfd(int fd) {
    int pidfd = -1;
    socklen_t len = sizeof pidfd;
    if (getsockopt(fd, SOL_SOCKET, 77 /* SO_PEERPIDFD */, &pidfd, &len) != 0) return -1;
    return pidfd;
}
/* SO_PASSCRED: the kernel attaches the sending process's credentials to every message. */
static inline int kcfs_set_passcred(int fd) {
    int on = 1;
    return setsockopt(fd, SOL_SOCKET, 16 /* SO_PASSCRED */, &on, sizeof on);
}
/* recvmsg with room for SCM_CREDENTIALS: *pid is the sender's pid (0 when the message carried
   none). The kernel never merges bytes of two senders into one read of a stream socket whose
   receiver passes credentials. */
static inline long kcfs_recv_with_sender(int fd, void *buffer, unsigned long length, int *pid) {
    union { char space[CMSG_SPACE(sizeof(struct kcfs_ucred))]; struct cmsghdr align; } control;
    struct iovec iov = { buffer, length };
    struct msghdr msg = { 0 };
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.space;
    msg.msg_controllen = sizeof control.space;
    *pid = 0;
    long n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) return n;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == 2 /* SCM_CREDENTIALS */
            && c->cmsg_len >= CMSG_LEN(sizeof(struct kcfs_ucred))) {
            struct kcfs_ucred u;
            memcpy(&u, CMSG_DATA(c), sizeof u);
            *pid = u.pid;
        }
    }
    return n;
}
/* accept4(SOCK_CLOEXEC): no child (pinentry) inherits a client's socket. accept4 is _GNU_SOURCE. */
extern int accept4(int, struct sockaddr *, socklen_t *, int);
static inline int kcfs_accept_cloexec(int fd) { return accept4(fd, 0, 0, 02000000 /* SOCK_CLOEXEC */); }
/* Whether the process a pidfd names has exited (its pidfd polls readable). */
static inline int kcfs_pidfd_exited(int pidfd) {
    struct pollfd p = { pidfd, POLLIN, 0 };
    return poll(&p, 1, 0) != 0;
}
/* The inode of the other end of a connected Unix socket `fd`, asked of the kernel's socket
   diagnostics (NETLINK_SOCK_DIAG, unix_diag's UNIX_DIAG_PEER; what `ss -x` shows): 0 when the
   kernel cannot say (no unix_diag, no netlink). The structures are spelled here as
   <linux/unix_diag.h> has them, which Swift cannot import piecemeal. */
static inline unsigned int kcfs_unix_peer_inode(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) return 0;
    int nl = socket(16 /* AF_NETLINK */, SOCK_DGRAM | 02000000 /* SOCK_CLOEXEC */, 4 /* NETLINK_SOCK_DIAG */);
    if (nl < 0) return 0;
    struct {
        struct { unsigned int len; unsigned short type, flags; unsigned int seq, pid; } header;
        struct { unsigned char family, protocol; unsigned short pad; unsigned int states, ino, show, cookie[2]; } request;
    } message;
    memset(&message, 0, sizeof message);
    message.header.len = sizeof message;
    message.header.type = 20 /* SOCK_DIAG_BY_FAMILY */;
    message.header.flags = 1 /* NLM_F_REQUEST */;
    message.header.seq = 1;
    message.request.family = 1 /* AF_UNIX */;
    message.request.states = 0xffffffffu;
    message.request.ino = (unsigned int)st.st_ino;
    message.request.show = 4 /* UDIAG_SHOW_PEER */;
    message.request.cookie[0] = message.request.cookie[1] = 0xffffffffu;
    unsigned int peer = 0;
    if (send(nl, &message, sizeof message, 0) == (long)sizeof message) {
        unsigned int reply[2048];
        struct timeval timeout = { 1, 0 };
        setsockopt(nl, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
        long n = recv(nl, reply, sizeof reply, 0);
        /* nlmsghdr (16), unix_diag_msg (16: family, type, state, pad, ino, cookie[2]), then
           attributes: { u16 len, u16 type } and the value, each padded to 4 bytes. */
        const unsigned char *bytes = (const unsigned char *)reply;
        if (n >= 32) {
            unsigned short type;
            memcpy(&type, bytes + 4, 2);
            unsigned int msglen;
            memcpy(&msglen, bytes, 4);
            if (type == 20 && msglen <= (unsigned long)n) {
                unsigned long at = 32;
                while (at + 4 <= msglen) {
                    unsigned short alen, atype;
                    memcpy(&alen, bytes + at, 2);
                    memcpy(&atype, bytes + at + 2, 2);
                    if (alen < 4 || at + alen > msglen) break;
                    if (atype == 2 /* UNIX_DIAG_PEER */ && alen >= 8) { memcpy(&peer, bytes + at + 4, 4); break; }
                    at += (alen + 3u) & ~3u;
                }
            }
        }
    }
    close(nl);
    return peer;
}
#endif
