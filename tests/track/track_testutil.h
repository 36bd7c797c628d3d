/* Helpers the tracking tests share: raw SQL on the store's file through a second connection (a
 * reader or writer that is not dtrain's), to check what dtrain wrote or to damage it. */
#ifndef DT_TESTS_TRACK_TESTUTIL_H
#define DT_TESTS_TRACK_TESTUTIL_H

#include <sqlite3.h>

/* The first column of the first row of sql on db, or -1 when it cannot be read. */
static inline long long sql_int(const char *db, const char *sql) {
    sqlite3 *c;
    sqlite3_stmt *q;
    long long v = -1;
    if (sqlite3_open_v2(db, &c, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(c, sql, -1, &q, NULL) == SQLITE_OK) {
        if (sqlite3_step(q) == SQLITE_ROW) v = sqlite3_column_int64(q, 0);
        sqlite3_finalize(q);
    }
    sqlite3_close(c);
    return v;
}

#endif
