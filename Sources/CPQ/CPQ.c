/* libpq loaded on first use: see include/CPQ.h. */
#include "CPQ.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* Every libpq function keychainfs calls: X(name). The table holds one pointer per function,
   typed by libpq's own declaration (__typeof__), so a wrong signature does not compile. */
#define KCFS_PQ_FUNCTIONS(X) \
    X(PQconnectdbParams) X(PQstatus) X(PQerrorMessage) X(PQfinish) X(PQsetClientEncoding) \
    X(PQsetNoticeProcessor) X(PQsocket) X(PQtransactionStatus) X(PQexecParams) X(PQexec) \
    X(PQconsumeInput) X(PQnotifies) X(PQfreemem) X(PQconninfoParse) X(PQconninfoFree) \
    X(PQresultStatus) X(PQresultErrorField) X(PQresultErrorMessage) X(PQclear) X(PQntuples) \
    X(PQnfields) X(PQfname) X(PQftype) X(PQgetisnull) X(PQgetlength) X(PQgetvalue) X(PQcmdTuples)

#define KCFS_PQ_POINTER(name) __typeof__(name) *name;
static struct { KCFS_PQ_FUNCTIONS(KCFS_PQ_POINTER) } pq;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int loaded = -1;
static char load_error[256];

static void load(void) {
    /* RTLD_LOCAL: libpq's dependencies stay out of the global scope, where they could interpose
       on symbols of libraries loaded later. */
    void *handle = dlopen("libpq.so.5", RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *message = dlerror();
        snprintf(load_error, sizeof load_error, "%s", message ? message : "libpq.so.5: cannot be loaded");
        return;
    }
#define KCFS_PQ_RESOLVE(name)                                                                      \
    pq.name = (__typeof__(name) *)dlsym(handle, #name);                                            \
    if (pq.name == NULL) {                                                                         \
        snprintf(load_error, sizeof load_error, "libpq.so.5 has no %s", #name);                    \
        return;                                                                                    \
    }
    KCFS_PQ_FUNCTIONS(KCFS_PQ_RESOLVE)
    /* The handle is never closed: libpq stays loaded for the process's life, as a linked
       library would. */
    loaded = 0;
}

int kcfs_pq_load(char *error, size_t size) {
    pthread_once(&once, load);
    if (loaded != 0 && error != NULL && size > 0) {
        snprintf(error, size, "%s", load_error);
    }
    return loaded;
}

PGconn *kcfs_PQconnectdbParams(const char *const *keywords, const char *const *values, int expand_dbname) {
    return pq.PQconnectdbParams(keywords, values, expand_dbname);
}
ConnStatusType kcfs_PQstatus(const PGconn *conn) { return pq.PQstatus(conn); }
char *kcfs_PQerrorMessage(const PGconn *conn) { return pq.PQerrorMessage(conn); }
void kcfs_PQfinish(PGconn *conn) { pq.PQfinish(conn); }
int kcfs_PQsetClientEncoding(PGconn *conn, const char *encoding) { return pq.PQsetClientEncoding(conn, encoding); }
PQnoticeProcessor kcfs_PQsetNoticeProcessor(PGconn *conn, PQnoticeProcessor proc, void *arg) {
    return pq.PQsetNoticeProcessor(conn, proc, arg);
}
int kcfs_PQsocket(const PGconn *conn) { return pq.PQsocket(conn); }
PGTransactionStatusType kcfs_PQtransactionStatus(const PGconn *conn) { return pq.PQtransactionStatus(conn); }
PGresult *kcfs_PQexecParams(PGconn *conn, const char *command, int nParams, const Oid *paramTypes,
                            const char *const *paramValues, const int *paramLengths, const int *paramFormats,
                            int resultFormat) {
    return pq.PQexecParams(conn, command, nParams, paramTypes, paramValues, paramLengths, paramFormats,
                           resultFormat);
}
PGresult *kcfs_PQexec(PGconn *conn, const char *query) { return pq.PQexec(conn, query); }
int kcfs_PQconsumeInput(PGconn *conn) { return pq.PQconsumeInput(conn); }
PGnotify *kcfs_PQnotifies(PGconn *conn) { return pq.PQnotifies(conn); }
void kcfs_PQfreemem(void *ptr) { pq.PQfreemem(ptr); }
PQconninfoOption *kcfs_PQconninfoParse(const char *conninfo, char **errmsg) {
    return pq.PQconninfoParse(conninfo, errmsg);
}
void kcfs_PQconninfoFree(PQconninfoOption *connOptions) { pq.PQconninfoFree(connOptions); }
ExecStatusType kcfs_PQresultStatus(const PGresult *res) { return pq.PQresultStatus(res); }
char *kcfs_PQresultErrorField(const PGresult *res, int fieldcode) { return pq.PQresultErrorField(res, fieldcode); }
char *kcfs_PQresultErrorMessage(const PGresult *res) { return pq.PQresultErrorMessage(res); }
void kcfs_PQclear(PGresult *res) { pq.PQclear(res); }
int kcfs_PQntuples(const PGresult *res) { return pq.PQntuples(res); }
int kcfs_PQnfields(const PGresult *res) { return pq.PQnfields(res); }
char *kcfs_PQfname(const PGresult *res, int field_num) { return pq.PQfname(res, field_num); }
Oid kcfs_PQftype(const PGresult *res, int field_num) { return pq.PQftype(res, field_num); }
int kcfs_PQgetisnull(const PGresult *res, int tup_num, int field_num) {
    return pq.PQgetisnull(res, tup_num, field_num);
}
int kcfs_PQgetlength(const PGresult *res, int tup_num, int field_num) {
    return pq.PQgetlength(res, tup_num, field_num);
}
char *kcfs_PQgetvalue(const PGresult *res, int tup_num, int field_num) {
    return pq.PQgetvalue(res, tup_num, field_num);
}
char *kcfs_PQcmdTuples(PGresult *res) { return pq.PQcmdTuples(res); }
