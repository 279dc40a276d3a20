#ifndef KEYCHAINFS_CSQLITE_SHIM_H
#define KEYCHAINFS_CSQLITE_SHIM_H
#include <sqlite3.h>

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
#endif
