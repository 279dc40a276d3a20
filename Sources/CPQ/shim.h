#ifndef KEYCHAINFS_CPQ_SHIM_H
#define KEYCHAINFS_CPQ_SHIM_H
/* libpq (PostgreSQL 15's client library), for the sync engine's server side. */
#include <libpq-fe.h>
#include <poll.h>

/* PG_DIAG_* are character-literal macros, which Swift does not import. */
static const int kcfs_pg_diag_sqlstate = PG_DIAG_SQLSTATE;
static const int kcfs_pg_diag_message_primary = PG_DIAG_MESSAGE_PRIMARY;

#endif
