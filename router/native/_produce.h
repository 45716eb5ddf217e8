/* A forward produced straight into librdkafka, from the consumed record's own fields and
 * headers: no Python object is built for it, and it carries no delivery report.
 *
 * Why: through Producer.produce each forward cost a headers list converted from librdkafka's
 * headers (a list, four tuples, four names, four values), a new list with bg.src, the argument
 * parsing, the list converted back into librdkafka's headers, and a per-message state that
 * confluent-kafka allocates even without a callback. Its delivery report then took the
 * interpreter's lock once per record, in whichever thread served the producer's queue (the
 * batch's flush, or the commit threads): a report for each of the transaction's records, when
 * only each partition's last one is read (router.durability.output_writer.last_records). Here the
 * headers are copied in librdkafka (rd_kafka_headers_copy, then bg.src added), the key and
 * value given from the consumed Message's bytes, and the message has no opaque, which
 * confluent-kafka's delivery callback returns on at once. The record on the wire is the same:
 * tests/integration/test_direct_produce.py reads a routed output back and compares every
 * header, key and value with what the consumed record had.
 *
 * The handle's layout is confluent_kafka.h's Handle (confluent-kafka 2.16);
 * producer_refusal() checks its size and finds librdkafka's functions in the library the
 * client loaded, and direct_handle() checks each producer before a run uses it (librdkafka's
 * opaque of the handle must be the Producer object itself). Where either fails, forwards go
 * through Producer.produce as before. Included by _fastpath.c, after _message.h. */

#ifndef CUTOVER_PRODUCE_H
#define CUTOVER_PRODUCE_H

#include <Python.h>
#include <stdint.h>
#include <sys/types.h>

#include "_message.h"

typedef struct {
    PyObject_HEAD
    void *rk;
    PyObject *error_cb, *throttle_cb, *stats_cb;
    int initiated;
    Py_tss_t tlskey;
    int type;
    PyObject *logger, *oauth_cb;
    int oauth_token_set;
    int active_calls;            /* Handle_rk_use_begin/end's gate against close() */
    int closing;
    unsigned long closing_thread;
    union {
        struct {
            PyObject *default_dr_cb;
            int dr_only_error;
        } producer;
        struct {
            int assigned[3];
            PyObject *on_assign, *on_revoke, *on_lost, *on_commit;
            void *rkqu;
            unsigned long gate_owner;
            int gate_depth;
        } consumer;
        struct {
            PyObject *on_ack;
        } share;
    } u;
} CKHandle;

/* rdkafka.h's rd_kafka_vtype_t, RD_KAFKA_MSG_F_COPY and RD_KAFKA_RESP_ERR__QUEUE_FULL */
enum { VT_END, VT_TOPIC, VT_RKT, VT_PARTITION, VT_VALUE, VT_KEY, VT_OPAQUE, VT_MSGFLAGS,
       VT_TIMESTAMP, VT_HEADER, VT_HEADERS };
#define MSG_F_COPY 0x2
#define ERR_QUEUE_FULL (-184)
#define NOT_DIRECT (-100000)  /* not produced here: the caller goes through Producer.produce */

typedef int (*producev_fn)(void *, ...);
typedef void *(*headers_copy_fn)(const void *);
typedef int (*header_add_fn)(void *, const char *, ssize_t, const void *, ssize_t);
typedef void (*headers_destroy_fn)(void *);
typedef void *(*opaque_fn)(const void *);
static producev_fn producev;
static headers_copy_fn headers_copy;
static header_add_fn header_add;
static headers_destroy_fn headers_destroy;
static opaque_fn rk_opaque;

static PyTypeObject *producer_type;
static int direct_produce = 0;
static unsigned long long produced_directly = 0;  /* forwards produced here (tests read it) */

/* Why Producers of type ``pt`` cannot be produced to directly, as a str; or None, with
 * librdkafka's functions found in ``lib`` (the path of the library the client loaded);
 * NULL on error. */
static PyObject *producer_refusal(PyTypeObject *pt, PyObject *lib) {
    if (pt->tp_basicsize != (Py_ssize_t)sizeof(CKHandle))
        return PyUnicode_FromFormat("confluent_kafka.Producer is %zd bytes, not %zd",
                                    pt->tp_basicsize, (Py_ssize_t)sizeof(CKHandle));
    static const char *const names[5] = {"rd_kafka_producev", "rd_kafka_headers_copy",
                                         "rd_kafka_header_add", "rd_kafka_headers_destroy",
                                         "rd_kafka_opaque"};
    void *found[5];
    PyObject *missing = find_rdkafka(lib, names, found, 5);
    if (missing != Py_None) return missing;
    producev = (producev_fn)found[0];
    headers_copy = (headers_copy_fn)found[1];
    header_add = (header_add_fn)found[2];
    headers_destroy = (headers_destroy_fn)found[3];
    rk_opaque = (opaque_fn)found[4];
    return missing;
}

/* ``producer``'s handle if its records can be produced directly: the checked type, open, no
 * default delivery callback (Producer.produce would give every record a report), and
 * librdkafka's opaque is the object itself (confluent-kafka sets it so); else NULL. */
static CKHandle *direct_handle(PyObject *producer) {
    if (!direct_produce || Py_TYPE(producer) != producer_type) return NULL;
    CKHandle *h = (CKHandle *)producer;
    if (h->rk == NULL || __atomic_load_n(&h->closing, __ATOMIC_SEQ_CST)
        || h->u.producer.default_dr_cb != NULL || h->u.producer.dr_only_error)
        return NULL;
    return rk_opaque(h->rk) == (void *)producer ? h : NULL;
}

/* Produce a copy of consumed record ``m`` (key, value, librdkafka's headers, then the header
 * ``name`` = ``src``) to ``topic``/``partition``, timestamped now, with no delivery report.
 * Returns 0, librdkafka's error (ERR_QUEUE_FULL: poll and ask again), or NOT_DIRECT (the
 * record or the handle cannot be produced here). */
static int produce_direct(CKHandle *h, const char *topic, int32_t partition, CKMessage *m,
                          const char *name, const char *src, size_t src_len) {
    /* NULL (confluent-kafka's Message leaves a null key or value unset) or None: none */
    PyObject *key = m->key == Py_None ? NULL : m->key;
    PyObject *value = m->value == Py_None ? NULL : m->value;
    if (m->c_headers == NULL || m->headers != NULL || (key != NULL && !PyBytes_CheckExact(key))
        || (value != NULL && !PyBytes_CheckExact(value)))
        return NOT_DIRECT;
    /* as Handle_rk_use_begin: counted while librdkafka's handle is in use */
    __atomic_add_fetch(&h->active_calls, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&h->closing, __ATOMIC_SEQ_CST) || h->rk == NULL) {
        __atomic_sub_fetch(&h->active_calls, 1, __ATOMIC_SEQ_CST);
        return NOT_DIRECT;
    }
    int err = NOT_DIRECT;
    void *hdrs = headers_copy(m->c_headers);
    if (hdrs != NULL && header_add(hdrs, name, -1, src, (ssize_t)src_len) == 0) {
        const char *kp = key == NULL ? NULL : PyBytes_AS_STRING(key);
        size_t kn = key == NULL ? 0 : (size_t)PyBytes_GET_SIZE(key);
        const char *vp = value == NULL ? NULL : PyBytes_AS_STRING(value);
        size_t vn = value == NULL ? 0 : (size_t)PyBytes_GET_SIZE(value);
        err = producev(h->rk, VT_MSGFLAGS, MSG_F_COPY, VT_TOPIC, topic, VT_PARTITION, partition,
                       VT_KEY, kp, kn, VT_VALUE, vp, vn, VT_TIMESTAMP, (int64_t)0,
                       VT_HEADERS, hdrs, VT_OPAQUE, (void *)NULL, VT_END);
        if (err == 0) hdrs = NULL;  /* the message owns them now */
    }
    if (hdrs != NULL) headers_destroy(hdrs);
    __atomic_sub_fetch(&h->active_calls, 1, __ATOMIC_SEQ_CST);
    if (err == 0) produced_directly++;
    return err;
}

#endif
