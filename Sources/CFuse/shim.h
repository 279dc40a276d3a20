#ifndef KEYCHAINFS_CFUSE_SHIM_H
#define KEYCHAINFS_CFUSE_SHIM_H
#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <sys/xattr.h>
#include <sys/stat.h>
#include <stdio.h>
#include <linux/fs.h>

/* Macros and bit-fields Swift cannot reach, wrapped once. */
static inline struct fuse_args kcfs_fuse_args_init(int argc, char **argv) {
    struct fuse_args a = FUSE_ARGS_INIT(argc, argv);
    return a;
}
static inline void kcfs_fi_set_direct_io(struct fuse_file_info *fi, int on) { fi->direct_io = on ? 1 : 0; }
/* FOPEN_NOFLUSH: the kernel sends no FLUSH at close(2) (a handle with nothing to commit). */
static inline void kcfs_fi_set_noflush(struct fuse_file_info *fi, int on) { fi->noflush = on ? 1 : 0; }
static inline void kcfs_fi_set_keep_cache(struct fuse_file_info *fi, int on) { fi->keep_cache = on ? 1 : 0; }
static inline void kcfs_fi_set_nonseekable(struct fuse_file_info *fi, int on) { fi->nonseekable = on ? 1 : 0; }
static inline unsigned int kcfs_rename_noreplace(void) { return RENAME_NOREPLACE; }
static inline unsigned int kcfs_rename_exchange(void) { return RENAME_EXCHANGE; }

/* The multithreaded loop's config API changed across 3.x; one call hides it. */
static inline int kcfs_session_loop_mt(struct fuse_session *se, unsigned int max_threads) {
    struct fuse_loop_config *config = fuse_loop_cfg_create();
    if (!config) return -1;
    fuse_loop_cfg_set_max_threads(config, max_threads);
    fuse_loop_cfg_set_clone_fd(config, 0);
    int rc = fuse_session_loop_mt(se, config);
    fuse_loop_cfg_destroy(config);
    return rc;
}
/* The same loop with idle workers bounded: past max_idle_threads, a worker that finishes a
   request and finds enough others idle exits, so a burst's threads do not stay for the mount's life. */
static inline int kcfs_session_loop_mt_bounded(struct fuse_session *se, unsigned int max_threads,
                                               unsigned int max_idle_threads) {
    struct fuse_loop_config *config = fuse_loop_cfg_create();
    if (!config) return -1;
    fuse_loop_cfg_set_max_threads(config, max_threads);
    fuse_loop_cfg_set_idle_threads(config, max_idle_threads);
    fuse_loop_cfg_set_clone_fd(config, 0);
    int rc = fuse_session_loop_mt(se, config);
    fuse_loop_cfg_destroy(config);
    return rc;
}
#endif
