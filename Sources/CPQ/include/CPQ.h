#ifndef KEYCHAINFS_CPQ_H
#define KEYCHAINFS_CPQ_H
/* libpq (PostgreSQL's client library, libpq.so.5), for the sync engine's server side, loaded
   with dlopen on first use rather than linked: libpq brings 24 libraries (OpenSSL, GnuTLS,
   Kerberos, LDAP, SASL…) whose loading and constructors every start of keychainfs paid, a
   `--version` and each credential helper's answer included, though only sync uses them.
   The types come from libpq's own header (libpq-dev at build time); the calls go through the
   kcfs_PQ* functions below, each libpq's function of the same name without the prefix. They may
   be called only after kcfs_pq_load() returned 0. Names differ from libpq's on purpose: the
   executable exports its symbols, and same-named functions would interpose on libpq's own
   internal calls. */
#include <postgresql/libpq-fe.h>
#include <poll.h>
#include <stddef.h>

/* PG_DIAG_* are character-literal macros, which Swift does not import. */
static const int kcfs_pg_diag_sqlstate = PG_DIAG_SQLSTATE;
static const int kcfs_pg_diag_message_primary = PG_DIAG_MESSAGE_PRIMARY;

/* Loads libpq.so.5 and resolves every function below, once per process (later calls return the
   first call's result). 0 on success; otherwise -1, with dlopen's or dlsym's message copied
   into `error` (NUL-terminated, cut to `size`). */
int kcfs_pq_load(char *error, size_t size);

PGconn *kcfs_PQconnectdbParams(const char *const *keywords, const char *const *values, int expand_dbname);
ConnStatusType kcfs_PQstatus(const PGconn *conn);
char *kcfs_PQerrorMessage(const PGconn *conn);
void kcfs_PQfinish(PGconn *conn);
int kcfs_PQsetClientEncoding(PGconn *conn, const char *encoding);
PQnoticeProcessor kcfs_PQsetNoticeProcessor(PGconn *conn, PQnoticeProcessor proc, void *arg);
int kcfs_PQsocket(const PGconn *conn);
PGTransactionStatusType kcfs_PQtransactionStatus(const PGconn *conn);
PGresult *kcfs_PQexecParams(PGconn *conn, const char *command, int nParams, const Oid *paramTypes,
                            const char *const *paramValues, const int *paramLengths, const int *paramFormats,
                            int resultFormat);
PGresult *kcfs_PQexec(PGconn *conn, const char *query);
int kcfs_PQconsumeInput(PGconn *conn);
PGnotify *kcfs_PQnotifies(PGconn *conn);
void kcfs_PQfreemem(void *ptr);
PQconninfoOption *kcfs_PQconninfoParse(const char *conninfo, char **errmsg);
void kcfs_PQconninfoFree(PQconninfoOption *connOptions);
ExecStatusType kcfs_PQresultStatus(const PGresult *res);
char *kcfs_PQresultErrorField(const PGresult *res, int fieldcode);
char *kcfs_PQresultErrorMessage(const PGresult *res);
void kcfs_PQclear(PGresult *res);
int kcfs_PQntuples(const PGresult *res);
int kcfs_PQnfields(const PGresult *res);
char *kcfs_PQfname(const PGresult *res, int field_num);
Oid kcfs_PQftype(const PGresult *res, int field_num);
int kcfs_PQgetisnull(const PGresult *res, int tup_num, int field_num);
int kcfs_PQgetlength(const PGresult *res, int tup_num, int field_num);
char *kcfs_PQgetvalue(const PGresult *res, int tup_num, int field_num);
char *kcfs_PQcmdTuples(PGresult *res);

#endif
