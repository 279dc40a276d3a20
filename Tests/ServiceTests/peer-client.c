/* A client of the keychain service's API socket, and the attacks on its callers' identity
   (issue 27), for IdentityTests.swift: built twice by the test, once as the program the access
   group allows and once as the attacker's own program.

   peer-client SOCKET MODE [ALLOWED]
     ask         connect, and ask for every generic password with its data
     sleep       sleep 3 s (what ALLOWED runs as an exec target)
     fork-exec   connect, fork; the child execs ALLOWED (keeping the socket), the parent asks
     pass-fd     a child connects, passes the socket by SCM_RIGHTS and execs ALLOWED; the parent asks
     race        a child connects on a socket the parent shares, asks and execs ALLOWED at once;
                 the parent reads the answer
     reuse       a child connects and exits; ALLOWED is started with the child's pid
                 (ns_last_pid, root only); the parent asks on the child's connection
     traced      a traced child execs ALLOWED ask (PTRACE_TRACEME)
     lend FD     (as ALLOWED) connect, be greeted, hand the connection and its nonce over the
                 socket FD, and sleep: an allowed program whose connection is taken
     borrow-live, borrow-gone
                 start ALLOWED lend, take its greeted connection, and ask on it while ALLOWED
                 lives, or after it exited
     agent-ask, agent-fork-exec, agent-pass-fd
                 the same against the ssh agent socket: REQUEST_IDENTITIES, prints "keys N"
     agent-race [SERVICE_PID]
                 a child connects, asks the agent and execs ALLOWED at once (the service stopped
                 until the exec when its pid is given); the parent reads the answer
   Prints one line: "items N" or "status S" (an OSStatus), or "error WHAT". */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(const char *what) {
    printf("error %s: %s\n", what, strerror(errno));
    exit(1);
}

static int readall(int fd, void *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

/* Close-on-exec, as OpenSSH, Go, Python and Rust make their agent sockets. */
static int connect_to(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) die("socket");
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strncpy(a.sun_path, path, sizeof a.sun_path - 1);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) die("connect");
    return fd;
}

/* Reads the hello; returns the nonce in `nonce`. */
static void hello(int fd, unsigned char nonce[16]) {
    uint32_t len;
    unsigned char body[18];
    if (readall(fd, &len, 4) != 0 || len != 18 || readall(fd, body, 18) != 0 || body[0] != 0) {
        printf("error no hello\n");
        exit(1);
    }
    memcpy(nonce, body + 2, 16);
}

static void put32(unsigned char **p, uint32_t v) { memcpy(*p, &v, 4); *p += 4; }
static void put64(unsigned char **p, int64_t v) { memcpy(*p, &v, 8); *p += 8; }

/* copyMatching: every genp item, match limit all, with data, no prompt (kSecUseAuthenticationUIFail). */
static void send_request(int fd, const unsigned char nonce[16]) {
    unsigned char frame[128], *p = frame + 4;
    *p++ = 1;
    memcpy(p, nonce, 16); p += 16;
    put32(&p, 4); memcpy(p, "genp", 4); p += 4;
    put32(&p, 1); *p++ = 1;               /* attributes: the codec's version byte only */
    *p++ = 1; put64(&p, -2);              /* matchLimit all */
    *p++ = 0;                             /* caseInsensitive */
    *p++ = 1; *p++ = 1;                   /* returnData */
    *p++ = 0;                             /* returnAttributes */
    *p++ = 0;                             /* synchronizableAny */
    *p++ = 0;                             /* persistentReference */
    *p++ = 1; *p++ = 2;                   /* authenticationUI fail */
    uint32_t len = (uint32_t)(p - frame - 4);
    memcpy(frame, &len, 4);
    if (write(fd, frame, (size_t)(p - frame)) != p - frame) die("write");
}

static void print_reply(int fd) {
    uint32_t len;
    if (readall(fd, &len, 4) != 0 || len < 5 || len > (1u << 22)) { printf("error no reply\n"); exit(1); }
    unsigned char *body = malloc(len);
    if (readall(fd, body, len) != 0) { printf("error short reply\n"); exit(1); }
    if (body[0] == 1) {
        uint32_t n;
        memcpy(&n, body + 1, 4);
        printf("items %u\n", n);
    } else if (body[0] == 0) {
        int64_t s;
        memcpy(&s, body + 1, 8);
        printf("status %lld\n", (long long)s);
    } else {
        printf("error reply kind %d\n", body[0]);
    }
}

/* The ssh agent protocol: REQUEST_IDENTITIES (11); IDENTITIES_ANSWER (12) carries a count. */
static void agent_request(int fd) {
    unsigned char request[5] = {0, 0, 0, 1, 11};
    if (write(fd, request, 5) != 5) die("write");
}

static void agent_answer(int fd) {
    unsigned char header[4], *body;
    if (readall(fd, header, 4) != 0) { printf("error no answer\n"); exit(1); }
    uint32_t len = (uint32_t)header[0] << 24 | header[1] << 16 | header[2] << 8 | header[3];
    if (len < 1 || len > (1u << 20)) { printf("error length %u\n", len); exit(1); }
    body = malloc(len);
    if (readall(fd, body, len) != 0) { printf("error short answer\n"); exit(1); }
    if (body[0] != 12 || len < 5) { printf("answer %d\n", body[0]); return; }
    printf("keys %u\n", (uint32_t)body[1] << 24 | body[2] << 16 | body[3] << 8 | body[4]);
}

static void agent_ask(int fd) {
    agent_request(fd);
    agent_answer(fd);
}

/* Sends `fd` over the socket `via` with `len` bytes of `data` (SCM_RIGHTS); 0 on success. */
static int send_fd(int via, int fd, void *data, size_t len) {
    char space[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {data, len};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = space, .msg_controllen = sizeof space};
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET; h->cmsg_type = SCM_RIGHTS; h->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(h), &fd, sizeof fd);
    return sendmsg(via, &m, 0) == (ssize_t)len ? 0 : -1;
}

/* Receives a descriptor and `len` bytes of `data` from the socket `via`. */
static int recv_fd(int via, void *data, size_t len) {
    char space[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {data, len};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = space, .msg_controllen = sizeof space};
    if (recvmsg(via, &m, MSG_WAITALL) != (ssize_t)len || !CMSG_FIRSTHDR(&m)) die("recvmsg");
    int fd;
    memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof fd);
    return fd;
}

/* A child connects, passes the connection by SCM_RIGHTS and execs ALLOWED; the parent gets it. */
static int passed_by_child(const char *path, const char *allowed, pid_t *child) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) die("socketpair");
    *child = fork();
    if (*child == 0) {
        char byte = 0;
        if (send_fd(sv[1], connect_to(path), &byte, 1) != 0) _exit(1);
        execl(allowed, allowed, path, "sleep", (char *)0);
        _exit(127);
    }
    char byte;
    int fd = recv_fd(sv[0], &byte, 1);
    usleep(200000);
    return fd;
}

/* The "exec after connect": a child connects on a socket the parent shares, then execs
   ALLOWED; the parent keeps the connection. Returns it (the child's pid in *child). */
static int connected_by_child(const char *path, const char *allowed, pid_t *child) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0), ready[2];
    if (fd < 0 || pipe(ready) != 0) die("socket");
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strncpy(a.sun_path, path, sizeof a.sun_path - 1);
    *child = fork();
    if (*child == 0) {
        if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) _exit(1);
        close(ready[0]);
        if (write(ready[1], "c", 1) != 1) _exit(1);
        close(ready[1]);
        execl(allowed, allowed, path, "sleep", (char *)0);
        _exit(127);
    }
    close(ready[1]);
    char byte;
    if (read(ready[0], &byte, 1) != 1) die("child connect");
    close(ready[0]);
    usleep(200000); /* the child runs ALLOWED now */
    return fd;
}

static void ask(int fd) {
    unsigned char nonce[16];
    hello(fd, nonce);
    send_request(fd, nonce);
    print_reply(fd);
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: peer-client SOCKET MODE [ALLOWED]\n"); return 2; }
    const char *path = argv[1], *mode = argv[2], *allowed = argc > 3 ? argv[3] : "";
    setvbuf(stdout, NULL, _IONBF, 0);
    if (!strcmp(mode, "sleep")) { sleep(3); return 0; }
    if (!strcmp(mode, "ask")) { ask(connect_to(path)); return 0; }
    if (!strcmp(mode, "lend")) {
        int fd = connect_to(path);
        unsigned char nonce[16];
        hello(fd, nonce);
        if (send_fd(atoi(allowed), fd, nonce, 16) != 0) return 1;
        sleep(3);
        return 0;
    }
    if (!strcmp(mode, "borrow-live") || !strcmp(mode, "borrow-gone")) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) die("socketpair");
        pid_t c = fork();
        if (c == 0) {
            char number[16];
            snprintf(number, sizeof number, "%d", sv[1]);
            execl(allowed, allowed, path, "lend", number, (char *)0);
            _exit(127);
        }
        unsigned char nonce[16];
        int fd = recv_fd(sv[0], nonce, 16);
        if (!strcmp(mode, "borrow-gone")) { kill(c, SIGKILL); waitpid(c, NULL, 0); }
        send_request(fd, nonce);
        print_reply(fd);
        kill(c, SIGKILL);
        return 0;
    }
    if (!strcmp(mode, "agent-ask")) { agent_ask(connect_to(path)); return 0; }
    if (!strcmp(mode, "fork-exec") || !strcmp(mode, "agent-fork-exec")) {
        pid_t c;
        int fd = connected_by_child(path, allowed, &c);
        if (!strcmp(mode, "fork-exec")) ask(fd); else agent_ask(fd);
        kill(c, SIGKILL);
        return 0;
    }
    if (!strcmp(mode, "pass-fd") || !strcmp(mode, "agent-pass-fd")) {
        pid_t c;
        int fd = passed_by_child(path, allowed, &c);
        if (!strcmp(mode, "pass-fd")) ask(fd); else agent_ask(fd);
        kill(c, SIGKILL);
        return 0;
    }
    if (!strcmp(mode, "race")) {
        int fd = socket(AF_UNIX, SOCK_STREAM, 0), sent[2];
        if (fd < 0 || pipe2(sent, O_CLOEXEC) != 0) die("socket");
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        strncpy(a.sun_path, path, sizeof a.sun_path - 1);
        pid_t c = fork();
        if (c == 0) {
            close(sent[0]);
            if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) _exit(1);
            unsigned char nonce[16];
            hello(fd, nonce);
            send_request(fd, nonce);
            execl(allowed, allowed, path, "sleep", (char *)0); /* at once; `sent` closes at the exec */
            _exit(127);
        }
        close(sent[1]);
        char byte;
        (void)!read(sent[0], &byte, 1); /* EOF: the child has exec'd (or died) */
        print_reply(fd); /* the parent shares the socket and reads what the service answered */
        kill(c, SIGKILL);
        return 0;
    }
    if (!strcmp(mode, "agent-race")) {
        /* A child connects (its socket survives an exec), asks, and execs ALLOWED at once; the
           parent shares the socket and reads the answer. With SERVICE_PID the service is stopped
           until the exec is done, so the exec comes before the agent's accept every time. */
        pid_t service = argc > 4 ? (pid_t)atoi(argv[4]) : 0;
        int fd = socket(AF_UNIX, SOCK_STREAM, 0), sent[2];
        if (fd < 0 || pipe2(sent, O_CLOEXEC) != 0) die("socket");
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        strncpy(a.sun_path, path, sizeof a.sun_path - 1);
        if (service > 0 && kill(service, SIGSTOP) != 0) die("stop the service");
        pid_t c = fork();
        if (c == 0) {
            close(sent[0]);
            if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) _exit(1);
            agent_request(fd);
            execl(allowed, allowed, path, "sleep", (char *)0);
            _exit(127);
        }
        close(sent[1]);
        char byte;
        (void)!read(sent[0], &byte, 1); /* EOF: the child has exec'd (or died) */
        if (service > 0) kill(service, SIGCONT);
        agent_answer(fd);
        kill(c, SIGKILL);
        return 0;
    }
    if (!strcmp(mode, "reuse")) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) die("socketpair");
        pid_t c = fork();
        if (c == 0) {
            /* Connect and be greeted (so the service has pinned this process), hand the
               connection and its nonce to the parent, and exit. */
            int fd = connect_to(path);
            unsigned char nonce[16];
            hello(fd, nonce);
            _exit(send_fd(sv[1], fd, nonce, 16) == 0 ? 0 : 1);
        }
        unsigned char nonce[16];
        int fd = recv_fd(sv[0], nonce, 16);
        waitpid(c, NULL, 0);
        /* The next pid the kernel hands out is the dead child's. */
        int last = open("/proc/sys/kernel/ns_last_pid", O_WRONLY);
        if (last < 0) die("ns_last_pid");
        dprintf(last, "%d", c - 1);
        close(last);
        pid_t reused = fork();
        if (reused == 0) { execl(allowed, allowed, path, "sleep", (char *)0); _exit(127); }
        if (reused != c) { printf("error pid %d not reused (got %d)\n", c, reused); kill(reused, SIGKILL); return 1; }
        usleep(200000);
        send_request(fd, nonce);
        print_reply(fd);
        kill(reused, SIGKILL);
        return 0;
    }
    if (!strcmp(mode, "traced")) {
        pid_t c = fork();
        if (c == 0) {
            ptrace(PTRACE_TRACEME, 0, 0, 0);
            execl(allowed, allowed, path, "ask", (char *)0);
            _exit(127);
        }
        int status;
        waitpid(c, &status, 0); /* stopped at the exec */
        ptrace(PTRACE_CONT, c, 0, 0);
        waitpid(c, &status, 0);
        return 0;
    }
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
