/* A forward produced straight into librdkafka, from the consumed record's own bytes: no Python
 * object is built for it, and it carries no delivery report.
 *
 * Why: through Producer.produce each forward cost a headers list converted from librdkafka's
 * headers (a list, four tuples, four names, four values), a new list with bg.src, the argument
 * parsing, the list converted back into librdkafka's headers, and a per-message state that
 * confluent-kafka allocates even without a callback. Its delivery report then took the
 * interpreter's lock once per record, in whichever thread served the producer's queue (the
 * batch's flush, or the commit threads): a report for each of the transaction's records, when
 * only each partition's last one is read (router.durability.output_writer.last_records). Here the
 * headers are rebuilt in librdkafka from the copy on_consume kept (_plugin.h), bg.src added, the
 * key and value given from the consumed Message's bytes (its public key() and value()), and
 * the message has no opaque, so confluent-kafka's delivery callback has nothing to report. The
 * record on the wire is the same: tests/integration/test_direct_produce.py reads a routed output
 * back and compares every header, key and value with what the consumed record had.
 *
 * The producer's ``rd_kafka_t *`` is the one its tap was handed by on_new (_plugin.h): public
 * API only. It is used while the compiled run holds a reference to the Producer (the stream's),
 * so the client is not destroyed meanwhile (confluent-kafka destroys it when the Producer is
 * freed; the router does not close its transactional producers otherwise). Where the producer
 * has no tap, forwards go through Producer.produce as before. Included by _fastpath.c, after
 * _plugin.h. */

#ifndef CUTOVER_PRODUCE_H
#define CUTOVER_PRODUCE_H

#include <Python.h>
#include <stdint.h>
#include <sys/types.h>

#include "_plugin.h"

/* rdkafka.h's rd_kafka_vtype_t, RD_KAFKA_MSG_F_COPY and RD_KAFKA_RESP_ERR__QUEUE_FULL */
enum { VT_END, VT_TOPIC, VT_RKT, VT_PARTITION, VT_VALUE, VT_KEY, VT_OPAQUE, VT_MSGFLAGS,
       VT_TIMESTAMP, VT_HEADER, VT_HEADERS };
#define MSG_F_COPY 0x2
#define ERR_QUEUE_FULL (-184)
#define NOT_DIRECT (-100000)  /* not produced here: the caller goes through Producer.produce */

static unsigned long long produced_directly = 0;  /* forwards produced here (tests read it) */

/* The tap of ``producer`` if its records can be produced directly (bound to it by
 * Tap.bind, and its client not destroyed), else NULL. */
static Tap *producer_tap(PyObject *producer) {
    static int last = 0;
    if (!plugin_on) return NULL;
    if (taps[last].client == producer && taps[last].rk != NULL) return &taps[last];
    for (int k = 0; k < TAP_MAX; k++)
        if (taps[k].client == producer && taps[k].rk != NULL) {
            last = k;
            return &taps[k];
        }
    return NULL;
}

/* Produce a copy of consumed record ``e`` (kept by ``from``; its key and value bytes or None,
 * then the header ``name`` = ``src``) to ``topic``/``partition`` through ``to``'s client,
 * timestamped now, with no delivery report. Returns 0, librdkafka's error (ERR_QUEUE_FULL:
 * poll and ask again), or NOT_DIRECT (it cannot be produced here). */
static int produce_direct(Tap *to, const char *topic, int32_t partition, const Tap *from,
                          const Entry *e, PyObject *key, PyObject *value, const char *name,
                          const char *src, size_t src_len) {
    if (key == Py_None) key = NULL;
    if (value == Py_None) value = NULL;
    if ((key != NULL && !PyBytes_CheckExact(key)) || (value != NULL && !PyBytes_CheckExact(value))
        || to->rk == NULL)
        return NOT_DIRECT;
    rd_kafka_headers_t *hdrs = rk.headers_new(e->nhdr + 1);
    if (hdrs == NULL) return NOT_DIRECT;
    for (const char *p = from->arena + e->hdr_at, *end = p + e->hdr_len; p < end;) {
        KeptHeader kh;
        kept_header_next(&p, &kh);
        if (rk.header_add(hdrs, kh.name, -1, kh.value, (ssize_t)kh.size) != 0) {
            rk.headers_destroy(hdrs);
            return NOT_DIRECT;
        }
    }
    int err = NOT_DIRECT;
    if (rk.header_add(hdrs, name, -1, src, (ssize_t)src_len) == 0) {
        const char *kp = key == NULL ? NULL : PyBytes_AS_STRING(key);
        size_t kn = key == NULL ? 0 : (size_t)PyBytes_GET_SIZE(key);
        const char *vp = value == NULL ? NULL : PyBytes_AS_STRING(value);
        size_t vn = value == NULL ? 0 : (size_t)PyBytes_GET_SIZE(value);
        err = rk.producev(to->rk, VT_MSGFLAGS, MSG_F_COPY, VT_TOPIC, topic, VT_PARTITION,
                          partition, VT_KEY, kp, kn, VT_VALUE, vp, vn, VT_TIMESTAMP, (int64_t)0,
                          VT_HEADERS, hdrs, VT_OPAQUE, (void *)NULL, VT_END);
        if (err == 0) hdrs = NULL;  /* the message owns them now */
    }
    if (hdrs != NULL) rk.headers_destroy(hdrs);
    if (err == 0) produced_directly++;
    return err;
}

#endif
