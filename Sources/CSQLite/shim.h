#ifndef KEYCHAINFS_CSQLITE_SHIM_H
#define KEYCHAINFS_CSQLITE_SHIM_H
#include <sqlite3.h>
#include <string.h>

/* SQLITE_TRANSIENT is a cast of -1 to a function pointer, which Swift cannot spell.
   These wrappers make SQLite copy the bound bytes before the call returns. */
static inline int kcfs_sqlite3_bind_blob_copy(sqlite3_stmt *s, int i, const void *p, int n) {
    return sqlite3_bind_blob(s, i, p, n, SQLITE_TRANSIENT);
}
static inline int kcfs_sqlite3_bind_text_copy(sqlite3_stmt *s, int i, const char *p, int n) {
    return sqlite3_bind_text(s, i, p, n, SQLITE_TRANSIENT);
}
/* Extended result codes are macro expressions, which Swift does not import. */
static const int kcfs_sqlite_constraint_unique = SQLITE_CONSTRAINT_UNIQUE;
static const int kcfs_sqlite_constraint_primarykey = SQLITE_CONSTRAINT_PRIMARYKEY;

/* SQLite's own mapping of the wal-index's first region (the shared-memory file of a WAL
   database) for `db`'s main file, through the VFS's public xShmMap with bExtend = 0: nothing
   is created or grown. NULL if the connection has not opened it yet or the VFS has none. Call
   it only while nothing else uses `db`. The region stays mapped at this address for as long as
   the connection is open. */
static inline void *kcfs_sqlite3_wal_index(sqlite3 *db) {
    sqlite3_file *file = NULL;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &file) != SQLITE_OK || file == NULL) return NULL;
    const sqlite3_io_methods *m = file->pMethods;
    if (m == NULL || m->iVersion < 2 || m->xShmMap == NULL) return NULL;
    void volatile *region = NULL;
    if (m->xShmMap(file, 0, 32768, 0, &region) != SQLITE_OK) return NULL;
    return (void *)region;
}

/* The wal-index header (https://sqlite.org/walformat.html, "The WAL-Index Header"): 48
   bytes, kept twice at the start of the region. A committing writer changes it (its change
   counter, last frame, checksums and salts) before its COMMIT returns, writing the second copy,
   then a barrier, then the first; a reader that reads the first, then (after a barrier) the
   second, and finds them equal has read a header no writer was changing: what SQLite's own
   readers do before trusting their page cache. Copies it into `out` and returns 1 when the two
   copies agree and the header is initialised; returns 0 otherwise (the caller then reads
   through SQLite as usual). */
static inline int kcfs_wal_index_header(const void *region, unsigned char out[48]) {
    const volatile unsigned char *h = (const volatile unsigned char *)region;
    unsigned char first[48], second[48];
    for (int i = 0; i < 48; i++) first[i] = h[i];
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    for (int i = 0; i < 48; i++) second[i] = h[48 + i];
    if (memcmp(first, second, 48) != 0 || first[12] == 0) return 0;
    memcpy(out, first, 48);
    return 1;
}
#endif
