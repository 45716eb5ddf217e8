/* The router's per-record path for the common case, compiled: a run of one raw partition's
 * well-formed data records, each suppressed (not the primary for its event time) or forwarded
 * (the primary's, new to the dedup store). It is router.worker.datapath.DataPath._handle_all's
 * loop, PartitionRouter.suppresses/decide's two common branches, DedupStore.__contains__/add and
 * InlineStream.send / OutputWriter.forward, written over the same Python objects: it reads the
 * partition's rule state from them when a run starts and writes it back when it ends.
 *
 * Anything else it leaves to the interpreted path and stops the run there, before it changed
 * anything for that record: another partition, an error, headers in neither of the tagger's
 * layouts, a heartbeat that may close a handover, no plan yet, a record the ordered handover
 * holds, a poison timestamp, one older than the dedup retention, an identity the filter or
 * the batch's pending identities may have seen (a duplicate, or a RocksDB read), an identity
 * that cannot be computed. A heartbeat in the tagger's layout (PartitionRouter.observe) that
 * closes nothing (every boundary closed, or a watermark not above the version's) only raises
 * the version's watermark here: the tagger writes one per partition after each micro-batch,
 * so at many partitions per worker they come often enough that ending a run at each cost a
 * share of the routing rate (docs/decisions/029). The caller (router.native.compiled) decides
 * a record it leaves interpreted and starts the next run after it. The rule therefore has one definition, the Python one; this file is a faster
 * reading of its common branches, and tests/unit/test_compiled_path.py runs both on the same
 * records (generated) and compares every output and every piece of state. Consumed Messages are
 * read through their public accessors; where librdkafka's on_consume interceptor kept the
 * record (router/native/_plugin.h), its headers, event time, version and timestamp are taken
 * from that entry instead of converted (tests/integration/test_direct_reads.py compares those
 * with the accessors on records from a broker).
 *
 * With a per-key canary in the timeline a record's primary depends on its key: the run reads
 * the key's bucket (cutover.key_bucket: BLAKE2b-64 of the key bytes, big-endian, mod 10,000,
 * with _blake2b.h) in the segments that have a canary, and leaves every record of a segment
 * past the closed handover to the interpreted path (there only the keys that move are held). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_blake2b.h"
#include "_plugin.h"
#include "_produce.h"

#define MASK_COUNT 4096
#define MAX_BOUNDS 64
#define MAX_LIVE 8
#define KEY_BUCKETS 10000  /* cutover.key_bucket.BUCKETS */

static uint64_t masks[MASK_COUNT];
static int mask_hi_shift = 52;
static int configured = 0;
static PyObject *known_versions;        /* cutover.headers.KNOWN_VERSIONS: bytes -> str */
static PyObject *record_identity;       /* router.rule.identity.record_identity */
static PyObject *kafka_exception;       /* confluent_kafka.KafkaException */
static PyObject *envelope_names;        /* frozenset of the tagger's header names */
static PyObject *h_version, *h_event_time, *h_watermark, *h_batch, *h_kind, *h_src;
static const char *c_names[5];          /* the same names in UTF-8: version, ..., kind */
static const char *c_src;               /* bg.src in UTF-8 */
static PyObject *poll_timeout;          /* 0.05: as InlineStream.send waits on a full queue */

static PyObject *s_error, *s_topic, *s_partition, *s_offset, *s_headers, *s_timestamp, *s_key,
    *s_value, *s_produce, *s_poll, *s_failed, *s_topics, *s_primaries, *s_bounds,
    *s_tolerance, *s_horizon, *s_retention, *s_ordered, *s_closed_upto, *s_counters,
    *s_suppressed, *s_forwarded, *s_unflushed, *s_live_bits, *s_skip, *s_next_offsets,
    *s_dirty, *s_undelivered, *s_out_pos, *s_queued, *s_live_flag, *s_held, *s_producer,
    *s_key_rules, *s_canary, *s_buckets, *s_watermarks, *int_zero;

/* The versions read from kept headers in one scan: raw value -> str (a partition's records
 * carry one or two versions). */
#define VERSION_CACHE 4
typedef struct {
    PyObject *raw[VERSION_CACHE], *ver[VERSION_CACHE];
    int n;
} VersionCache;

static void version_cache_clear(VersionCache *c) {
    for (int k = 0; k < c->n; k++) {
        Py_CLEAR(c->raw[k]);
        Py_CLEAR(c->ver[k]);
    }
    c->n = 0;
}

/* The version str of a raw version value (borrowed), from the cache, else from ``known``
 * (cutover.headers.KNOWN_VERSIONS: bytes -> str); NULL when unknown or on error. */
static PyObject *version_of(VersionCache *c, PyObject *known, const char *raw, size_t size) {
    for (int k = 0; k < c->n; k++) {
        PyObject *b = c->raw[k];
        if ((size_t)PyBytes_GET_SIZE(b) == size && memcmp(PyBytes_AS_STRING(b), raw, size) == 0)
            return c->ver[k];
    }
    PyObject *b = PyBytes_FromStringAndSize(raw, (Py_ssize_t)size);
    if (b == NULL) return NULL;
    PyObject *v = PyDict_GetItemWithError(known, b);
    if (v == NULL || c->n == VERSION_CACHE) {
        Py_DECREF(b);
        return v;  /* borrowed: known keeps it */
    }
    Py_INCREF(v);
    c->raw[c->n] = b;
    c->ver[c->n++] = v;
    return v;
}

/* A client's tap (router/native/_plugin.h): a slot of the table there, which this object
 * holds one reference to */
typedef struct {
    PyObject_HEAD
    int slot;
    unsigned gen;
} TapObject;

static PyTypeObject TapType;

/* ``obj``'s tap if it may be read in this thread now: the tap's owner is this thread (it
 * called begin() last, and consume() since), and it kept some entries; else NULL */
static Tap *tap_entries_here(PyObject *obj) {
    if (obj == NULL || Py_TYPE(obj) != &TapType) return NULL;
    Tap *t = &taps[((TapObject *)obj)->slot];
    if (!t->owned || t->n == 0 || !pthread_equal(t->owner, pthread_self())) return NULL;
    return t;
}

/* The index of topic ``name`` among the tap's topics, or -1 */
static int tap_topic_named(const Tap *t, const char *name) {
    for (int k = 0; k < t->ntopics; k++)
        if (strcmp(t->topics[k], name) == 0) return k;
    return -1;
}

/* The entry on_consume kept of (topic, partition, offset), or NULL. Messages come in the
 * order their records were consumed, so the entry after the last one found is tried first;
 * else the table (an entry may have no Message, a Message no entry). */
static const Entry *tap_find(Tap *t, int topic, int32_t partition, int64_t offset) {
    if (t->next < t->n) {
        const Entry *e = &t->ents[t->next];
        if (e->offset == offset && e->partition == partition && e->topic == (uint32_t)topic) {
            t->next++;
            return e;
        }
    }
    size_t h = entry_hash((uint32_t)topic, partition, offset) & t->tmask;
    for (;; h = (h + 1) & t->tmask) {
        uint32_t cur = t->table[h];
        if (cur == 0) return NULL;
        const Entry *e = &t->ents[cur - 1];
        if (e->offset == offset && e->partition == partition && e->topic == (uint32_t)topic) {
            t->next = cur;
            return e;
        }
    }
}

typedef struct {
    PyObject_HEAD
    PyObject *router;      /* router.rule.decision.PartitionRouter */
    PyObject *store;       /* router.dedup.store.DedupStore */
    PyObject *dur;         /* router.durability.resume.Durability */
    PyObject *bound;       /* router.rule.held_bound.HeldBound */
    PyObject *identity;    /* the route's identity function */
    PyObject *topic;       /* the raw topic (str) */
    PyObject *output;      /* the output topic (str) */
    PyObject *stream;      /* router.durability.inline_output.InlineStream or None */
    PyObject *queue;       /* the batch's OutputWriter.queue (list) */
    PyObject *reads;       /* the data consumer's Tap (router/native/_plugin.h), or None */
    PyObject *partition_obj;
    long partition;
    char src_prefix[320];  /* "topic:partition:" */
    Py_ssize_t src_prefix_len;
} RunObject;

/* What one scan reads from the Python objects when it starts, and writes back when it ends. */
typedef struct {
    PyObject *prims;       /* tuple of str */
    Py_ssize_t nprims;
    int64_t bounds[MAX_BOUNDS];
    Py_ssize_t nb;
    /* a per-key canary (router.rule.decision.PartitionRouter.key_rules, cutover.key_primary.KeyRule):
     * segment k's canary version (borrowed from rules) and its buckets, 0 without one */
    PyObject *rules;       /* the tuple of KeyRule, or NULL when no segment has a canary */
    PyObject *canary[MAX_BOUNDS + 1];
    int64_t cbuckets[MAX_BOUNDS + 1];
    int has_tol;
    int64_t tol;
    int has_h, h_changed;
    int64_t h;
    int64_t retention;
    int ordered;
    Py_ssize_t closed_upto;
    PyObject *watermarks;  /* dict: version -> the watermark of its last heartbeat */
    PyObject *counters, *suppressed, *pending, *skip;
    Py_buffer live[MAX_LIVE];
    uint64_t live_mask[MAX_LIVE];   /* each bucket's words - 1 (a power of two each) */
    int nlive;
    /* results */
    int consumed;
    int64_t last_off;
    Py_ssize_t nfwd, nsent;
    int64_t first_sent;
    PyObject *sup_version;  /* borrowed from known_versions (kept alive by it) */
    VersionCache versions;  /* read from kept headers in this scan */
    Py_ssize_t sup_count;
    int stream_mode;
    PyObject *producer;
    PyObject *held;         /* the stream's held-back forward (new ref) or NULL */
    Tap *rt;                /* the consumer's tap, when its entries may be read here ... */
    int rtopic;             /* ... and the raw topic's index among its topics */
    Tap *ptap;              /* the producer's tap, when forwards are produced directly */
    const char *out_name;   /* the output topic in UTF-8, then */
    PyObject *held_msg;     /* or the held-back forward's consumed Message (new ref), */
    const Entry *held_entry;  /* its entry, */
    PyObject *held_key, *held_value;  /* its key and value (new refs) */
    int64_t held_off;       /* and its offset */
} Scan;

static PyObject *call0(PyObject *obj, PyObject *name) {
    return PyObject_CallMethodNoArgs(obj, name);
}

/* confluent_kafka.Message's accessors, called through their method descriptors (no lookup
 * per call) when a record is exactly that type */
enum { M_ERROR, M_TOPIC, M_PARTITION, M_OFFSET, M_HEADERS, M_TIMESTAMP, M_KEY, M_VALUE, M_N };
static PyObject *message_type;
static PyObject *accessor[M_N];
static PyObject **accessor_name[M_N] = {&s_error, &s_topic, &s_partition, &s_offset,
                                        &s_headers, &s_timestamp, &s_key, &s_value};

static PyObject *msg_get(PyObject *msg, int which) {
    if ((PyObject *)Py_TYPE(msg) == message_type && accessor[which] != NULL)
        return PyObject_Vectorcall(accessor[which], &msg, 1, NULL);
    return call0(msg, *accessor_name[which]);
}

/* -1 on error, 0 when the value does not fit (the caller declines), 1 on success */
static int get_i64(PyObject *obj, PyObject *name, int64_t *out, int *is_none) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) return -1;
    if (v == Py_None) {
        Py_DECREF(v);
        if (is_none) {
            *is_none = 1;
            return 1;
        }
        return 0;
    }
    if (is_none) *is_none = 0;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (overflow) return 0;
    *out = (int64_t)x;
    return 1;
}

static void scan_release(Scan *s) {
    for (int k = 0; k < s->nlive; k++) PyBuffer_Release(&s->live[k]);
    s->nlive = 0;
    version_cache_clear(&s->versions);
    Py_CLEAR(s->prims);
    Py_CLEAR(s->rules);
    Py_CLEAR(s->watermarks);
    Py_CLEAR(s->counters);
    Py_CLEAR(s->suppressed);
    Py_CLEAR(s->pending);
    Py_CLEAR(s->skip);
    Py_CLEAR(s->producer);
    Py_CLEAR(s->held);
    Py_CLEAR(s->held_msg);
    Py_CLEAR(s->held_key);
    Py_CLEAR(s->held_value);
}

/* The segments' canaries, when the timeline has one (PartitionRouter.key_rules is then a tuple
 * of KeyRule, one per segment): -1 error, 0 decline, 1 loaded. */
static int load_rules(RunObject *self, Scan *s) {
    PyObject *rules = PyObject_GetAttr(self->router, s_key_rules);
    if (rules == NULL) return -1;
    if (rules == Py_None) {
        Py_DECREF(rules);
        return 1;
    }
    s->rules = rules;
    if (!PyTuple_Check(rules) || PyTuple_GET_SIZE(rules) != s->nprims) return 0;
    for (Py_ssize_t k = 0; k < s->nprims; k++) {
        PyObject *rule = PyTuple_GET_ITEM(rules, k);
        PyObject *c = PyObject_GetAttr(rule, s_canary);
        if (c == NULL) return -1;
        /* the rule (kept alive by the tuple held) keeps its canary's str alive */
        Py_DECREF(c);
        int64_t nb;
        int rc = get_i64(rule, s_buckets, &nb, NULL);
        if (rc <= 0) return rc;
        if (c == Py_None) {
            s->canary[k] = NULL;
            s->cbuckets[k] = 0;
        } else {
            if (!PyUnicode_Check(c) || nb < 0 || nb > KEY_BUCKETS) return 0;
            s->canary[k] = c;
            s->cbuckets[k] = nb;
        }
    }
    return 1;
}

/* cutover.key_bucket.key_bucket: the 8-byte BLAKE2b digest of the key, big-endian, mod
 * 10,000 */
static int64_t key_bucket(const char *key, Py_ssize_t len) {
    b2b_state st;
    b2b_init(&st, 8);
    b2b_update(&st, (const uint8_t *)key, (size_t)len);
    uint8_t out[8];
    b2b_final(&st, out);
    uint64_t x = 0;
    for (int k = 0; k < 8; k++) x = (x << 8) | out[k];
    return (int64_t)(x % KEY_BUCKETS);
}

/* -1 error, 0 this run cannot be served (decline), 1 loaded */
static int scan_load(RunObject *self, Scan *s) {
    PyObject *v;
    int none, rc;
    /* a partition paused over max_held or re-reading: the interpreted path
     * (router.worker.held_reads) */
    v = PyObject_GetAttr(self->bound, s_topics);
    if (v == NULL) return -1;
    rc = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (rc != 0) return rc < 0 ? -1 : 0;

    s->prims = PyObject_GetAttr(self->router, s_primaries);
    if (s->prims == NULL) return -1;
    if (!PyTuple_Check(s->prims)) return 0;
    s->nprims = PyTuple_GET_SIZE(s->prims);
    if (s->nprims == 0) return 0;  /* no plan yet: every record is held */
    v = PyObject_GetAttr(self->router, s_bounds);
    if (v == NULL) return -1;
    if (!PyTuple_Check(v) || PyTuple_GET_SIZE(v) > MAX_BOUNDS
        || PyTuple_GET_SIZE(v) != s->nprims - 1) {
        Py_DECREF(v);
        return 0;
    }
    s->nb = PyTuple_GET_SIZE(v);
    for (Py_ssize_t k = 0; k < s->nb; k++) {
        int overflow = 0;
        long long b = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(v, k), &overflow);
        if (b == -1 && PyErr_Occurred()) {
            Py_DECREF(v);
            return -1;
        }
        if (overflow) {
            Py_DECREF(v);
            return 0;
        }
        s->bounds[k] = b;
    }
    Py_DECREF(v);
    rc = load_rules(self, s);
    if (rc <= 0) return rc;
    rc = get_i64(self->router, s_tolerance, &s->tol, NULL);
    if (rc < 0) return -1;
    if (rc == 0) {  /* too large for 64 bits: no limit, unless negative (then decline) */
        v = PyObject_GetAttr(self->router, s_tolerance);
        if (v == NULL) return -1;
        int neg = PyObject_RichCompareBool(v, int_zero, Py_LT);
        Py_DECREF(v);
        if (neg != 0) return neg < 0 ? -1 : 0;
        s->has_tol = 0;
    } else {
        if (s->tol < 0) return 0;
        s->has_tol = 1;
    }
    rc = get_i64(self->router, s_horizon, &s->h, &none);
    if (rc <= 0) return rc;
    s->has_h = !none;
    rc = get_i64(self->router, s_retention, &s->retention, NULL);
    if (rc <= 0) return rc;
    v = PyObject_GetAttr(self->router, s_ordered);
    if (v == NULL) return -1;
    s->ordered = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (s->ordered < 0) return -1;
    int64_t cu;
    rc = get_i64(self->router, s_closed_upto, &cu, NULL);
    if (rc <= 0) return rc;
    s->closed_upto = (Py_ssize_t)cu;
    s->watermarks = PyObject_GetAttr(self->router, s_watermarks);
    if (s->watermarks == NULL) return -1;
    if (!PyDict_Check(s->watermarks)) return 0;
    s->counters = PyObject_GetAttr(self->router, s_counters);
    if (s->counters == NULL) return -1;
    s->suppressed = PyObject_GetAttr(s->counters, s_suppressed);
    if (s->suppressed == NULL) return -1;
    if (!PyDict_Check(s->suppressed)) return 0;

    /* the dedup store: its batch of pending identities and its live filter buckets */
    s->pending = PyObject_GetAttr(self->store, s_unflushed);
    if (s->pending == NULL) return -1;
    if (!PyDict_Check(s->pending)) return 0;
    v = PyObject_GetAttr(self->store, s_live_bits);
    if (v == NULL) return -1;
    if (!PyList_Check(v) || PyList_GET_SIZE(v) > MAX_LIVE) {
        Py_DECREF(v);
        return 0;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(v); k++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(v, k), &s->live[k], PyBUF_SIMPLE) < 0) {
            Py_DECREF(v);
            return -1;
        }
        s->nlive++;
        Py_ssize_t words = s->live[k].len / 8;
        if (words < 1 || (words & (words - 1)) != 0 || s->live[k].len % 8 != 0) {
            Py_DECREF(v);
            return 0;
        }
        s->live_mask[k] = (uint64_t)words - 1;
    }
    Py_DECREF(v);

    s->skip = PyObject_GetAttr(self->dur, s_skip);
    if (s->skip == NULL) return -1;
    if (!PyAnySet_Check(s->skip)) return 0;

    /* how forwards leave: produced into the partition's transaction, or queued */
    s->stream_mode = 0;
    if (self->stream != Py_None) {
        v = PyObject_GetAttr(self->stream, s_live_flag);
        if (v == NULL) return -1;
        s->stream_mode = PyObject_IsTrue(v);
        Py_DECREF(v);
        if (s->stream_mode < 0) return -1;
    }
    if (s->stream_mode) {
        /* Already-written records (skip) go through OutputWriter.forward, which stops the
         * stream: the interpreted path does that, then the next run queues. */
        if (PySet_GET_SIZE(s->skip) > 0) return 0;
        s->producer = PyObject_GetAttr(self->stream, s_producer);
        if (s->producer == NULL) return -1;
        v = PyObject_GetAttr(self->stream, s_held);
        if (v == NULL) return -1;
        if (v == Py_None)
            Py_DECREF(v);
        else
            s->held = v;
        s->ptap = producer_tap(s->producer);
        if (s->ptap != NULL && (s->out_name = PyUnicode_AsUTF8(self->output)) == NULL)
            return -1;
    }
    /* the records on_consume kept, read in the thread that consumed them (_plugin.h) */
    s->rt = tap_entries_here(self->reads);
    if (s->rt != NULL) {
        const char *tname = PyUnicode_AsUTF8(self->topic);
        if (tname == NULL) return -1;
        s->rtopic = tap_topic_named(s->rt, tname);
        if (s->rtopic < 0) s->rt = NULL;
    }
    if (s->rt == NULL) s->ptap = NULL;  /* forwards held as kept entries only */
    return 1;
}

static int flush_suppressed(Scan *s) {
    if (s->sup_count == 0) return 0;
    PyObject *old = PyDict_GetItemWithError(s->suppressed, s->sup_version);
    if (old == NULL && PyErr_Occurred()) return -1;
    PyObject *n = PyLong_FromSsize_t(s->sup_count);
    if (n == NULL) return -1;
    if (old != NULL) {
        PyObject *sum = PyNumber_Add(old, n);
        Py_DECREF(n);
        if (sum == NULL) return -1;
        n = sum;
    }
    int rc = PyDict_SetItem(s->suppressed, s->sup_version, n);
    Py_DECREF(n);
    s->sup_count = 0;
    return rc;
}

static int add_to_attr(PyObject *obj, PyObject *name, Py_ssize_t delta) {
    PyObject *old = PyObject_GetAttr(obj, name);
    if (old == NULL) return -1;
    PyObject *d = PyLong_FromSsize_t(delta);
    if (d == NULL) {
        Py_DECREF(old);
        return -1;
    }
    PyObject *sum = PyNumber_Add(old, d);
    Py_DECREF(old);
    Py_DECREF(d);
    if (sum == NULL) return -1;
    int rc = PyObject_SetAttr(obj, name, sum);
    Py_DECREF(sum);
    return rc;
}

/* Write the run's effects back: what the interpreted path did per record, once. */
static int scan_store(RunObject *self, Scan *s) {
    int rc = 0;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);  /* keep an error being raised */
    if (flush_suppressed(s) < 0) rc = -1;
    if (s->h_changed) {
        PyObject *h = PyLong_FromLongLong(s->h);
        if (h == NULL || PyObject_SetAttr(self->router, s_horizon, h) < 0) rc = -1;
        Py_XDECREF(h);
    }
    if (s->nfwd && add_to_attr(s->counters, s_forwarded, s->nfwd) < 0) rc = -1;
    if (s->consumed) {
        PyObject *offsets = PyObject_GetAttr(self->dur, s_next_offsets);
        PyObject *next = PyLong_FromLongLong(s->last_off + 1);
        if (offsets == NULL || next == NULL || PyObject_SetItem(offsets, self->topic, next) < 0
            || PyObject_SetAttr(self->dur, s_dirty, Py_True) < 0)
            rc = -1;
        Py_XDECREF(offsets);
        Py_XDECREF(next);
    }
    if (s->nsent) {  /* Durability.queue_forward, for the run's forwards at once */
        PyObject *und = PyObject_GetAttr(self->dur, s_undelivered);
        if (und == NULL) {
            rc = -1;
        } else {
            PyObject *low = PyDict_GetItemWithError(und, self->topic);
            int lower = 1;
            if (low != NULL) {
                long long l = PyLong_AsLongLong(low);
                if (l == -1 && PyErr_Occurred())
                    rc = -1;
                else
                    lower = s->first_sent < l;
            } else if (PyErr_Occurred()) {
                rc = -1;
            }
            if (rc == 0 && lower) {
                PyObject *f = PyLong_FromLongLong(s->first_sent);
                if (f == NULL || PyDict_SetItem(und, self->topic, f) < 0) rc = -1;
                Py_XDECREF(f);
            }
            Py_DECREF(und);
        }
        if (add_to_attr(self->dur, s_out_pos, s->nsent) < 0) rc = -1;
        if (add_to_attr(self->dur, s_queued, s->nsent) < 0) rc = -1;
    }
    if (s->stream_mode) {
        if (PyObject_SetAttr(self->stream, s_held, s->held ? s->held : Py_None) < 0) rc = -1;
    }
    if (et != NULL) {
        if (rc < 0) PyErr_Clear();
        PyErr_Restore(et, ev, tb);
        rc = -1;
    }
    return rc;
}

/* The values of the four headers of ``headers`` (a list) from ``at`` on into ``vals``, when
 * they are (name, value) pairs named ``names`` in that order: 1, or 0. */
static int four_headers(PyObject *headers, Py_ssize_t at, PyObject *const names[4],
                        PyObject *vals[4]) {
    for (int k = 0; k < 4; k++) {
        PyObject *h = PyList_GET_ITEM(headers, at + k);
        if (!PyTuple_CheckExact(h) || PyTuple_GET_SIZE(h) != 2) return 0;
        PyObject *name = PyTuple_GET_ITEM(h, 0);
        if (name != names[k]
            && (!PyUnicode_CheckExact(name) || PyUnicode_Compare(name, names[k]) != 0))
            return 0;
        vals[k] = PyTuple_GET_ITEM(h, 1);
    }
    return 1;
}

/* The tagger's data layout (cutover.headers.data_envelope): 1 and (version, t), or 0. */
static int recognize(PyObject *headers, PyObject **version, int64_t *t) {
    if (headers == NULL || !PyList_CheckExact(headers)) return 0;
    Py_ssize_t n = PyList_GET_SIZE(headers);
    if (n < 4) return 0;
    PyObject *const names[4] = {h_version, h_event_time, h_watermark, h_batch};
    PyObject *vals[4];
    if (!four_headers(headers, n - 4, names, vals)) return 0;
    for (int k = 1; k < 4; k++) {
        PyObject *b = vals[k];
        if (!PyBytes_CheckExact(b) || PyBytes_GET_SIZE(b) == 0) return 0;
        const char *p = PyBytes_AS_STRING(b);
        for (Py_ssize_t j = 0; j < PyBytes_GET_SIZE(b); j++)
            if (p[j] < '0' || p[j] > '9') return 0;
    }
    for (Py_ssize_t j = 0; j < n - 4; j++) {
        PyObject *h = PyList_GET_ITEM(headers, j);
        if (!PyTuple_CheckExact(h) || PyTuple_GET_SIZE(h) < 1) return 0;
        int in = PySet_Contains(envelope_names, PyTuple_GET_ITEM(h, 0));
        if (in != 0) {
            if (in < 0) PyErr_Clear();
            return 0;
        }
    }
    if (!PyBytes_CheckExact(vals[0])) return 0;
    PyObject *v = PyDict_GetItemWithError(known_versions, vals[0]);
    if (v == NULL) {
        PyErr_Clear();
        return 0;
    }
    PyObject *raw_t = vals[1];
    if (PyBytes_GET_SIZE(raw_t) > 18) return 0;  /* int() of more digits: interpreted */
    const char *p = PyBytes_AS_STRING(raw_t);
    int64_t x = 0;
    for (Py_ssize_t j = 0; j < PyBytes_GET_SIZE(raw_t); j++) x = x * 10 + (p[j] - '0');
    *version = v;
    *t = x;
    return 1;
}

/* The tagger's heartbeat layout (cutover.headers.heartbeat_headers: exactly the version, kind
 * "heartbeat", watermark and batch): 1 and (version, watermark), or 0. */
static int recognize_heartbeat(PyObject *headers, PyObject **version, int64_t *wm) {
    if (headers == NULL || !PyList_CheckExact(headers) || PyList_GET_SIZE(headers) != 4)
        return 0;
    PyObject *const names[4] = {h_version, h_kind, h_watermark, h_batch};
    PyObject *vals[4];
    if (!four_headers(headers, 0, names, vals)) return 0;
    for (int k = 0; k < 4; k++)
        if (!PyBytes_CheckExact(vals[k])) return 0;
    if (PyBytes_GET_SIZE(vals[1]) != 9 || memcmp(PyBytes_AS_STRING(vals[1]), "heartbeat", 9))
        return 0;
    for (int k = 2; k < 4; k++) {
        PyObject *b = vals[k];
        if (PyBytes_GET_SIZE(b) == 0) return 0;
        const char *p = PyBytes_AS_STRING(b);
        for (Py_ssize_t j = 0; j < PyBytes_GET_SIZE(b); j++)
            if (p[j] < '0' || p[j] > '9') return 0;
    }
    if (PyBytes_GET_SIZE(vals[2]) > 18) return 0;  /* int() of more digits: interpreted */
    PyObject *v = PyDict_GetItemWithError(known_versions, vals[0]);
    if (v == NULL) {
        PyErr_Clear();
        return 0;
    }
    const char *p = PyBytes_AS_STRING(vals[2]);
    int64_t x = 0;
    for (Py_ssize_t j = 0; j < PyBytes_GET_SIZE(vals[2]); j++) x = x * 10 + (p[j] - '0');
    *version = v;
    *wm = x;
    return 1;
}

/* PartitionRouter.observe for a heartbeat of ``version`` at watermark ``wm``: 1 served (the
 * version's watermark raised, if above), 0 it may close a boundary (declined before changing
 * anything: _advance_closed and the release of held records are the interpreted path's),
 * -1 error */
static int serve_heartbeat(Scan *s, PyObject *version, int64_t wm) {
    PyObject *w = PyLong_FromLongLong(wm);
    if (w == NULL) return -1;
    PyObject *cur = PyDict_GetItemWithError(s->watermarks, version);
    int higher = 1;  /* none yet: NO_WATERMARK, below any watermark of digits */
    if (cur != NULL)
        higher = PyObject_RichCompareBool(w, cur, Py_GT);
    else if (PyErr_Occurred())
        higher = -1;
    int rc = higher;
    if (higher == 1) {
        if (s->closed_upto < s->nb)
            rc = 0;
        else
            rc = PyDict_SetItem(s->watermarks, version, w) < 0 ? -1 : 1;
    } else if (higher == 0) {
        rc = 1;  /* not above: observe changes nothing */
    }
    Py_DECREF(w);
    return rc;
}

static void put_len(b2b_state *st, PyObject *b) {
    static const uint8_t none[4] = {0xff, 0xff, 0xff, 0xff};
    if (b == Py_None) {
        b2b_update(st, none, 4);
        return;
    }
    uint64_t n = (uint64_t)PyBytes_GET_SIZE(b);
    uint8_t be[4] = {(uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
    b2b_update(st, be, 4);
    b2b_update(st, (const uint8_t *)PyBytes_AS_STRING(b), (size_t)n);
}

/* router.rule.identity.record_identity; NULL (no error set) when key/value are not bytes/None */
static PyObject *identity_of_record(PyObject *key, PyObject *value, int64_t t) {
    if ((key != Py_None && !PyBytes_CheckExact(key))
        || (value != Py_None && !PyBytes_CheckExact(value)))
        return NULL;
    if ((key != Py_None && (uint64_t)PyBytes_GET_SIZE(key) >= (1ULL << 32))
        || (value != Py_None && (uint64_t)PyBytes_GET_SIZE(value) >= (1ULL << 32)))
        return NULL;
    b2b_state st;
    b2b_init(&st, 16);
    put_len(&st, key);
    put_len(&st, value);
    uint8_t be[8];
    for (int k = 0; k < 8; k++) be[k] = (uint8_t)((uint64_t)t >> (56 - 8 * k));
    b2b_update(&st, be, 8);
    uint8_t out[16];
    b2b_final(&st, out);
    return PyBytes_FromStringAndSize((const char *)out, 16);
}

/* 1: the filter or the pending batch may hold ident (the interpreted path asks RocksDB);
 * 0: surely new; -1 error */
static int maybe_seen(Scan *s, PyObject *ident) {
    int in = PyDict_Contains(s->pending, ident);
    if (in != 0) return in;
    const uint8_t *d = (const uint8_t *)PyBytes_AS_STRING(ident);
    uint64_t lo = b2b_load64(d), hi = b2b_load64(d + 8);
    uint64_t m = masks[hi >> mask_hi_shift];
    for (int k = 0; k < s->nlive; k++) {
        const uint64_t *w = (const uint64_t *)s->live[k].buf;
        if ((w[lo & s->live_mask[k]] & m) == m) return 1;
    }
    return 0;
}

/* "topic:partition:offset" into ``buf`` (352 bytes); its length */
static Py_ssize_t src_into(RunObject *self, int64_t off, char *buf) {
    memcpy(buf, self->src_prefix, (size_t)self->src_prefix_len);
    char digits[20];
    int n = 0;
    uint64_t u = (uint64_t)off;  /* off >= 0 (Run_scan declines others); not snprintf: its
                                  * format parsing costs per record (docs/decisions/008) */
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    for (int k = 0; k < n; k++) buf[self->src_prefix_len + k] = digits[n - 1 - k];
    return self->src_prefix_len + n;
}

static PyObject *src_of(RunObject *self, int64_t off) {
    char buf[352];
    return PyBytes_FromStringAndSize(buf, src_into(self, off, buf));
}

/* (output, p, key, value, headers + [(bg.src, src)], src): OutputWriter's Output */
static PyObject *output_of(RunObject *self, PyObject *headers, PyObject *key, PyObject *value,
                           int64_t off) {
    PyObject *src = src_of(self, off);
    if (src == NULL) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(headers);
    PyObject *hdrs = PyList_New(n + 1);
    if (hdrs == NULL) {
        Py_DECREF(src);
        return NULL;
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *h = PyList_GET_ITEM(headers, j);
        Py_INCREF(h);
        PyList_SET_ITEM(hdrs, j, h);
    }
    PyObject *pair = PyTuple_Pack(2, h_src, src);
    if (pair == NULL) {
        Py_DECREF(src);
        Py_DECREF(hdrs);
        return NULL;
    }
    PyList_SET_ITEM(hdrs, n, pair);
    PyObject *out = PyTuple_Pack(6, self->output, self->partition_obj, key, value, hdrs, src);
    Py_DECREF(src);
    Py_DECREF(hdrs);
    return out;
}

/* The Output tuple of a forward held as its consumed Message (its headers converted now) */
static PyObject *output_of_msg(RunObject *self, PyObject *msg, int64_t off) {
    PyObject *headers = msg_get(msg, M_HEADERS);
    if (headers == NULL) return NULL;
    if (!PyList_CheckExact(headers)) {
        Py_DECREF(headers);
        PyErr_SetString(PyExc_TypeError, "headers must be a list");
        return NULL;
    }
    PyObject *key = msg_get(msg, M_KEY), *value = NULL, *out = NULL;
    if (key != NULL && (value = msg_get(msg, M_VALUE)) != NULL)
        out = output_of(self, headers, key, value, off);
    Py_DECREF(headers);
    Py_XDECREF(key);
    Py_XDECREF(value);
    return out;
}

/* InlineStream.send's produce of the held-back record ``old`` (an Output), before the
 * stream holds the next forward: ``new_held`` (an Output), or if NULL the consumed Message
 * ``new_msg`` at ``new_off``. 0 produced, 1 the stream stopped (a produce error, handled by
 * InlineStream.failed, which queues both), -1 error */
static int produce_held(RunObject *self, Scan *s, PyObject *old, PyObject *new_held,
                        PyObject *new_msg, int64_t new_off) {
    /* Producer.produce(topic, value, key, partition, callback, on_delivery, timestamp,
     * headers): positionally, in confluent-kafka's order. With keywords, its argument parser
     * looks each of its eight names up in a dict built per call (docs/decisions/008). */
    PyObject *args[9] = {s->producer, PyTuple_GET_ITEM(old, 0), PyTuple_GET_ITEM(old, 3),
                         PyTuple_GET_ITEM(old, 2), self->partition_obj, Py_None, Py_None,
                         int_zero, PyTuple_GET_ITEM(old, 4)};
    for (;;) {
        PyObject *r = PyObject_VectorcallMethod(s_produce, args, 9, NULL);
        if (r != NULL) {
            Py_DECREF(r);
            return 0;
        }
        if (PyErr_ExceptionMatches(PyExc_BufferError)) {
            PyErr_Clear();
            PyObject *pargs[2] = {s->producer, poll_timeout};
            r = PyObject_VectorcallMethod(s_poll, pargs, 2, NULL);
            if (r == NULL) return -1;
            Py_DECREF(r);
            continue;
        }
        if (!PyErr_ExceptionMatches(kafka_exception)) return -1;
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyErr_NormalizeException(&et, &ev, &tb);
        PyObject *exc = ev;
        Py_XDECREF(et);
        Py_XDECREF(tb);
        if (exc == NULL) return -1;
        /* the stream queues its held record (the next forward) when it stops */
        PyObject *held = new_held;
        if (held == NULL) held = output_of_msg(self, new_msg, new_off);
        else Py_INCREF(held);
        if (held == NULL || PyObject_SetAttr(self->stream, s_held, held) < 0) {
            Py_XDECREF(held);
            Py_DECREF(exc);
            return -1;
        }
        Py_DECREF(held);
        Py_CLEAR(s->held);
        PyObject *fargs[3] = {self->stream, old, exc};
        r = PyObject_VectorcallMethod(s_failed, fargs, 3, NULL);
        Py_DECREF(exc);
        if (r == NULL) return -1;
        Py_DECREF(r);
        s->stream_mode = 0;
        return 1;
    }
}

static int send(RunObject *self, Scan *s, PyObject *headers, PyObject *key, PyObject *value,
                int64_t off) {
    if (!PyList_CheckExact(headers)) {
        PyErr_SetString(PyExc_TypeError, "headers must be a list");
        return -1;
    }
    PyObject *out = output_of(self, headers, key, value, off);
    if (out == NULL) return -1;
    if (s->nsent == 0) s->first_sent = off;
    s->nsent++;
    if (!s->stream_mode) {
        int rc = PyList_Append(self->queue, out);
        Py_DECREF(out);
        return rc;
    }
    PyObject *old = s->held;
    s->held = out;  /* owns the new ref */
    if (old == NULL) return 0;
    int rc = produce_held(self, s, old, out, NULL, 0);
    Py_DECREF(old);
    return rc < 0 ? -1 : 0;
}

static void clear_held_msg(Scan *s) {
    Py_CLEAR(s->held_msg);
    Py_CLEAR(s->held_key);
    Py_CLEAR(s->held_value);
    s->held_entry = NULL;
}

/* Produce the forward held as a consumed Message and its kept entry (router/native/_produce.h),
 * before the stream holds ``msg`` at ``off``; where it cannot be produced directly, through
 * Producer.produce (produce_held). 0 produced, 1 the stream stopped, -1 error */
static int release_held_msg(RunObject *self, Scan *s, PyObject *msg, int64_t off) {
    char src[352];
    Py_ssize_t n = src_into(self, s->held_off, src);
    for (;;) {
        int err = produce_direct(s->ptap, s->out_name, (int32_t)self->partition, s->rt,
                                 s->held_entry, s->held_key, s->held_value, c_src, src,
                                 (size_t)n);
        if (err == 0) {
            clear_held_msg(s);
            return 0;
        }
        if (err == ERR_QUEUE_FULL) {  /* as Producer.produce's BufferError */
            PyObject *pargs[2] = {s->producer, poll_timeout};
            PyObject *r = PyObject_VectorcallMethod(s_poll, pargs, 2, NULL);
            if (r == NULL) return -1;
            Py_DECREF(r);
            continue;
        }
        /* any other error: Producer.produce meets it again and names it */
        PyObject *old = output_of_msg(self, s->held_msg, s->held_off);
        if (old == NULL) return -1;
        clear_held_msg(s);
        int rc = produce_held(self, s, old, NULL, msg, off);
        Py_DECREF(old);
        return rc;
    }
}

/* send() for a record on_consume kept (``e``), whose producer takes forwards directly: held as
 * its consumed Message and entry, produced when the next forward comes (or queued as an Output
 * when the run ends: scan_store) */
static int send_direct(RunObject *self, Scan *s, PyObject *msg, const Entry *e, PyObject *key,
                       PyObject *value, int64_t off) {
    if (s->nsent == 0) s->first_sent = off;
    s->nsent++;
    int rc = 0;
    if (s->held != NULL) {  /* held by InlineStream.send, or an earlier run */
        PyObject *old = s->held;
        s->held = NULL;
        rc = produce_held(self, s, old, NULL, msg, off);
        Py_DECREF(old);
    } else if (s->held_msg != NULL) {
        rc = release_held_msg(self, s, msg, off);
    }
    if (rc != 0) return rc < 0 ? -1 : 0;  /* stopped: this forward is queued already */
    Py_INCREF(msg);
    s->held_msg = msg;
    Py_INCREF(key);
    s->held_key = key;
    Py_INCREF(value);
    s->held_value = value;
    s->held_entry = e;
    s->held_off = off;
    return 0;
}

static int same_str(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    if (!PyUnicode_CheckExact(a)) return 0;
    return PyUnicode_Compare(a, b) == 0;
}

static PyObject *Run_scan(RunObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "router.native._fastpath.configure() was not called");
        return NULL;
    }
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "scan(msgs: list, start: int)");
        return NULL;
    }
    PyObject *msgs = args[0];
    Py_ssize_t i = PyLong_AsSsize_t(args[1]);
    if (i == -1 && PyErr_Occurred()) return NULL;
    Scan s;
    memset(&s, 0, sizeof s);
    int rc = scan_load(self, &s);
    if (rc <= 0) {  /* not served now: -1 (the caller interprets the partition's stretch) */
        scan_release(&s);
        return rc < 0 ? NULL : PyLong_FromLong(-1);
    }
    int failed = 0;
    PyObject *r = NULL, *headers = NULL, *key = NULL, *value = NULL, *ident = NULL;
    while (i < PyList_GET_SIZE(msgs)) {
        PyObject *msg = PyList_GET_ITEM(msgs, i);
        PyObject *version;
        int64_t t, off, written;
        const Entry *e = NULL;
        r = msg_get(msg, M_ERROR);
        if (r == NULL) goto error;
        int err = r != Py_None;
        Py_CLEAR(r);
        if (err) break;
        r = msg_get(msg, M_TOPIC);
        if (r == NULL) goto error;
        int same = same_str(r, self->topic);
        Py_CLEAR(r);
        if (!same) break;
        r = msg_get(msg, M_PARTITION);
        if (r == NULL) goto error;
        long p = PyLong_AsLong(r);
        Py_CLEAR(r);
        if (p == -1 && PyErr_Occurred()) goto error;
        if (p != self->partition) break;
        r = msg_get(msg, M_OFFSET);
        if (r == NULL) goto error;
        off = PyLong_AsLongLong(r);
        Py_CLEAR(r);
        if (off == -1 && PyErr_Occurred()) goto error;
        if (off < 0) break;  /* src_of() writes offsets >= 0 */
        if (s.rt != NULL && (e = tap_find(s.rt, s.rtopic, (int32_t)p, off)) != NULL) {
            /* kept by on_consume (the data layout): its headers are not converted */
            version = version_of(&s.versions, known_versions, s.rt->arena + e->ver_at,
                                 e->ver_len);
            if (version == NULL) {
                PyErr_Clear();  /* unknown, or a lookup error: not recognized, as recognize() */
                break;
            }
            t = e->t;
            written = e->timestamp;
            s.rt->read++;
        } else {
            headers = msg_get(msg, M_HEADERS);
            if (headers == NULL) goto error;
            if (!recognize(headers, &version, &t)) {
                int64_t wm;
                if (!recognize_heartbeat(headers, &version, &wm)) break;
                rc = serve_heartbeat(&s, version, wm);
                if (rc < 0) goto error;
                if (rc == 0) break;
                s.consumed = 1;
                s.last_off = off;
                Py_CLEAR(headers);
                i++;
                continue;
            }
            r = msg_get(msg, M_TIMESTAMP);
            if (r == NULL) goto error;
            if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 2) break;
            written = PyLong_AsLongLong(PyTuple_GET_ITEM(r, 1));
            Py_CLEAR(r);
            if (written == -1 && PyErr_Occurred()) goto error;
        }
        /* PartitionRouter.suppresses / decide: the record's segment and its primary */
        Py_ssize_t seg;
        if (s.nb == 0 || t >= s.bounds[s.nb - 1]) {
            seg = s.nb;
        } else {
            Py_ssize_t lo = 0, hi = s.nb;  /* bisect_right */
            while (lo < hi) {
                Py_ssize_t mid = (lo + hi) / 2;
                if (t < s.bounds[mid])
                    hi = mid;
                else
                    lo = mid + 1;
            }
            seg = lo;
        }
        PyObject *prim = PyTuple_GET_ITEM(s.prims, seg);
        if (s.rules != NULL && s.cbuckets[seg] > 0) {
            /* a canary: the primary of the record's key (cutover.key_primary.KeyRule.owner) */
            key = msg_get(msg, M_KEY);
            if (key == NULL) goto error;
            PyObject *k = key;
            if (k != Py_None) {  /* a record without a key follows the primary */
                if (!PyBytes_CheckExact(k)) break;
                if (key_bucket(PyBytes_AS_STRING(k), PyBytes_GET_SIZE(k)) < s.cbuckets[seg])
                    prim = s.canary[seg];
            }
        }
        int primary = version == prim;
        if (!primary) {
            int c = PyObject_RichCompareBool(version, prim, Py_EQ);
            if (c < 0) goto error;
            primary = c;
        }
        int poison = s.has_tol && written >= 0 && (__int128)t - s.tol > (__int128)written;
        if (poison) break;
        if (!primary) {  /* suppressed */
            if (!s.has_h || t > s.h) {
                s.h = t;
                s.has_h = 1;
                s.h_changed = 1;
            }
            if (s.sup_count && version != s.sup_version && flush_suppressed(&s) < 0) goto error;
            s.sup_version = version;
            s.sup_count++;
            s.consumed = 1;
            s.last_off = off;
            Py_CLEAR(headers);
            Py_CLEAR(key);
            i++;
            continue;
        }
        /* held, or with a canary maybe held (only keys that move are): interpreted */
        if (s.ordered && seg > s.closed_upto) break;
        if (s.has_h && (__int128)t < (__int128)s.h - s.retention) break;  /* too old */
        if (key == NULL) {
            key = msg_get(msg, M_KEY);
            if (key == NULL) goto error;
        }
        value = msg_get(msg, M_VALUE);
        if (value == NULL) goto error;
        if (self->identity == record_identity) {
            ident = identity_of_record(key, value, t);
        } else {
            PyObject *tt = PyLong_FromLongLong(t);
            if (tt == NULL) goto error;
            PyObject *iargs[3] = {key, value, tt};
            ident = PyObject_Vectorcall(self->identity, iargs, 3, NULL);
            Py_DECREF(tt);
            PyErr_Clear();  /* the interpreted path computes it again and names the problem */
        }
        if (ident == NULL || !PyBytes_CheckExact(ident) || PyBytes_GET_SIZE(ident) != 16) {
            if (PyErr_Occurred()) goto error;
            break;
        }
        int seen = maybe_seen(&s, ident);
        if (seen < 0) goto error;
        if (seen) break;  /* a duplicate, or a RocksDB read: interpreted */
        /* forwarded: DedupStore.add, the counters, then the output */
        if (!s.has_h || t > s.h) {
            s.h = t;
            s.has_h = 1;
            s.h_changed = 1;
        }
        PyObject *tt = PyLong_FromLongLong(t);
        if (tt == NULL) goto error;
        rc = PyDict_SetItem(s.pending, ident, tt);
        Py_DECREF(tt);
        if (rc < 0) goto error;
        s.nfwd++;
        s.consumed = 1;
        s.last_off = off;
        i++;
        int in_skip = 0;
        if (PySet_GET_SIZE(s.skip) > 0) {  /* already in the output log: not sent again */
            PyObject *ref = Py_BuildValue("(OL)", self->topic, (long long)off);
            if (ref == NULL) goto error;
            in_skip = PySet_Contains(s.skip, ref);
            Py_DECREF(ref);
            if (in_skip < 0) goto error;
        }
        if (!in_skip && e != NULL && s.ptap != NULL && s.stream_mode) {
            if (send_direct(self, &s, msg, e, key, value, off) < 0) goto error;
        } else if (!in_skip) {
            if (headers == NULL) {  /* kept by on_consume: the output needs them converted */
                headers = msg_get(msg, M_HEADERS);
                if (headers == NULL) goto error;
            }
            if (send(self, &s, headers, key, value, off) < 0) goto error;
        }
        Py_CLEAR(headers);
        Py_CLEAR(key);
        Py_CLEAR(value);
        Py_CLEAR(ident);
    }
    goto done;
error:
    failed = 1;
done:
    Py_XDECREF(r);
    Py_XDECREF(headers);
    Py_XDECREF(key);
    Py_XDECREF(value);
    Py_XDECREF(ident);
    if (s.held_msg != NULL) {  /* the stream holds it as an Output, as InlineStream.send does */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        s.held = output_of_msg(self, s.held_msg, s.held_off);
        clear_held_msg(&s);
        if (s.held == NULL) failed = 1;
        if (et != NULL) {
            PyErr_Clear();
            PyErr_Restore(et, ev, tb);
        }
    }
    if (scan_store(self, &s) < 0) failed = 1;
    scan_release(&s);
    if (failed) return NULL;
    return PyLong_FromSsize_t(i);
}

static int Run_init(RunObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"router", "store", "durability", "bound", "identity", "topic",
                             "partition", "output", "stream", "queue", "reads", NULL};
    PyObject *router, *store, *dur, *bound, *identity, *topic, *output, *stream, *queue;
    PyObject *reads = Py_None;
    long partition;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOUlUOO!|O", kwlist, &router, &store, &dur,
                                     &bound, &identity, &topic, &partition, &output, &stream,
                                     &PyList_Type, &queue, &reads))
        return -1;
    if (reads != Py_None && Py_TYPE(reads) != &TapType) {
        PyErr_SetString(PyExc_TypeError, "reads must be a Tap or None");
        return -1;
    }
    Py_ssize_t tlen;
    const char *tname = PyUnicode_AsUTF8AndSize(topic, &tlen);
    if (tname == NULL) return -1;
    int n = snprintf(self->src_prefix, sizeof self->src_prefix, "%s:%ld:", tname, partition);
    if (n < 0 || (size_t)n >= sizeof self->src_prefix || (Py_ssize_t)strlen(tname) != tlen) {
        PyErr_SetString(PyExc_ValueError, "topic name too long for the compiled path");
        return -1;
    }
    self->src_prefix_len = n;
    self->partition = partition;
#define SETREF(field, v) do { Py_INCREF(v); Py_XSETREF(self->field, v); } while (0)
    SETREF(router, router);
    SETREF(store, store);
    SETREF(dur, dur);
    SETREF(bound, bound);
    SETREF(identity, identity);
    SETREF(topic, topic);
    SETREF(output, output);
    SETREF(stream, stream);
    SETREF(queue, queue);
    SETREF(reads, reads);
#undef SETREF
    Py_XSETREF(self->partition_obj, PyLong_FromLong(partition));
    return self->partition_obj == NULL ? -1 : 0;
}

static int Run_traverse(RunObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->router);
    Py_VISIT(self->store);
    Py_VISIT(self->dur);
    Py_VISIT(self->bound);
    Py_VISIT(self->identity);
    Py_VISIT(self->stream);
    Py_VISIT(self->queue);
    Py_VISIT(self->reads);
    return 0;
}

static int Run_clear(RunObject *self) {
    Py_CLEAR(self->router);
    Py_CLEAR(self->store);
    Py_CLEAR(self->dur);
    Py_CLEAR(self->bound);
    Py_CLEAR(self->identity);
    Py_CLEAR(self->topic);
    Py_CLEAR(self->output);
    Py_CLEAR(self->stream);
    Py_CLEAR(self->queue);
    Py_CLEAR(self->reads);
    Py_CLEAR(self->partition_obj);
    return 0;
}

static void Run_dealloc(RunObject *self) {
    PyObject_GC_UnTrack(self);
    Run_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Run_methods[] = {
    {"scan", (PyCFunction)(void (*)(void))Run_scan, METH_FASTCALL,
     "scan(msgs, start) -> index of the first record not decided (left to the interpreted "
     "path)"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject RunType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "router.native._fastpath.Run",
    .tp_basicsize = sizeof(RunObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "One raw partition's records in one batch, decided compiled where they can be.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Run_init,
    .tp_traverse = (traverseproc)Run_traverse,
    .tp_clear = (inquiry)Run_clear,
    .tp_dealloc = (destructor)Run_dealloc,
    .tp_methods = Run_methods,
};

static PyObject *configure(PyObject *mod, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"known_versions", "masks", "mask_shift", "record_identity",
                             "kafka_exception", "message_type", "version", "event_time",
                             "watermark", "batch", "kind", "src", NULL};
    PyObject *known, *mlist, *rid, *kexc, *mtype, *v, *et, *wm, *b, *kind, *src;
    int shift;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!iOOO!UUUUUU", kwlist, &PyDict_Type, &known,
                                     &PyList_Type, &mlist, &shift, &rid, &kexc, &PyType_Type,
                                     &mtype, &v, &et, &wm, &b, &kind, &src))
        return NULL;
    for (int k = 0; k < M_N; k++) {
        PyObject *d = PyObject_GetAttr(mtype, *accessor_name[k]);
        if (d == NULL) return NULL;
        if (!PyObject_TypeCheck(d, &PyMethodDescr_Type)) Py_CLEAR(d);  /* looked up per call */
        Py_XSETREF(accessor[k], d);
    }
    Py_INCREF(mtype);
    Py_XSETREF(message_type, mtype);
    if (PyList_GET_SIZE(mlist) != MASK_COUNT || shift != 128 - 12) {
        PyErr_SetString(PyExc_ValueError, "the dedup filter's layout changed: rebuild");
        return NULL;
    }
    for (Py_ssize_t k = 0; k < MASK_COUNT; k++) {
        unsigned long long m = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(mlist, k));
        if (m == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
        masks[k] = m;
    }
    mask_hi_shift = shift - 64;
    Py_INCREF(known);
    Py_XSETREF(known_versions, known);
    Py_INCREF(rid);
    Py_XSETREF(record_identity, rid);
    Py_INCREF(kexc);
    Py_XSETREF(kafka_exception, kexc);
    PyObject *names = PyFrozenSet_New(NULL);
    if (names == NULL) return NULL;
    PyObject *all[5] = {v, et, wm, b, kind};
    for (int k = 0; k < 5; k++)
        if (PySet_Add(names, all[k]) < 0) {
            Py_DECREF(names);
            return NULL;
        }
    Py_XSETREF(envelope_names, names);
#define KEEP(g, x) do { Py_INCREF(x); PyUnicode_InternInPlace(&(x)); Py_XSETREF(g, x); } while (0)
    KEEP(h_version, v);
    KEEP(h_event_time, et);
    KEEP(h_watermark, wm);
    KEEP(h_batch, b);
    KEEP(h_kind, kind);
    KEEP(h_src, src);
#undef KEEP
    PyObject *cn[5] = {h_version, h_event_time, h_watermark, h_batch, h_kind};
    for (int k = 0; k < 5; k++)
        if ((c_names[k] = PyUnicode_AsUTF8(cn[k])) == NULL) return NULL;
    if ((c_src = PyUnicode_AsUTF8(h_src)) == NULL) return NULL;
    for (int k = 0; k < 5; k++) layout_names[k] = c_names[k];  /* kept alive: interned above */
    configured = 1;
    Py_RETURN_NONE;
}

/* Find librdkafka's functions in the library confluent-kafka's extension ``client`` loaded
 * (its version must be ``version``, confluent_kafka.libversion()'s) and check that it loads
 * ``plugin`` (this file): clients may then load it as their plugin (router/native/_plugin.h). Returns None, or why not (the
 * accessors and Producer.produce are used then). */
static PyObject *use_plugin(PyObject *mod, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"client", "version", "plugin", NULL};
    const char *client, *self;
    int version;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sis", kwlist, &client, &version, &self))
        return NULL;
    if (!configured) return PyUnicode_FromString("configure() was not called");
    return plugin_refusal(client, version, self);
}

static PyObject *py_produced_directly(PyObject *mod, PyObject *unused) {
    return PyLong_FromUnsignedLongLong(produced_directly);
}

/* envelope(tap, topic, partition, offset): what on_consume kept of that record, for tests */
static PyObject *py_envelope(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    long long offset;
    int partition;
    if (nargs != 4 || Py_TYPE(args[0]) != &TapType || !PyUnicode_Check(args[1])
        || (partition = PyLong_AsLong(args[2]), PyErr_Occurred())
        || (offset = PyLong_AsLongLong(args[3]), PyErr_Occurred())) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "envelope(tap, topic, partition, offset)");
        return NULL;
    }
    Tap *t = tap_entries_here(args[0]);
    const char *name = PyUnicode_AsUTF8(args[1]);
    if (name == NULL) return NULL;
    int topic = t == NULL ? -1 : tap_topic_named(t, name);
    const Entry *e = topic < 0 ? NULL : tap_find(t, topic, partition, offset);
    if (e == NULL) Py_RETURN_NONE;
    PyObject *version;
    PyObject *raw = PyBytes_FromStringAndSize(t->arena + e->ver_at, e->ver_len);
    if (raw == NULL) return NULL;
    version = PyDict_GetItemWithError(known_versions, raw);
    Py_DECREF(raw);
    if (version == NULL && PyErr_Occurred()) return NULL;
    PyObject *hdrs = PyList_New(0);
    if (hdrs == NULL) return NULL;
    for (const char *p = t->arena + e->hdr_at, *end = p + e->hdr_len; p < end;) {
        KeptHeader kh;
        kept_header_next(&p, &kh);
        PyObject *h = kh.value == NULL
            ? Py_BuildValue("(sO)", kh.name, Py_None)
            : Py_BuildValue("(sy#)", kh.name, kh.value, (Py_ssize_t)kh.size);
        if (h == NULL || PyList_Append(hdrs, h) < 0) {
            Py_XDECREF(h);
            Py_DECREF(hdrs);
            return NULL;
        }
        Py_DECREF(h);
    }
    return Py_BuildValue("(OLLN)", version ? version : Py_None, (long long)e->t,
                         (long long)e->timestamp, hdrs);
}

/* -- Tap: a client's slot in _plugin.h's table, seen from Python ------------------------- */

static PyObject *Tap_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"consumer", NULL};
    int consumer = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|p", kwlist, &consumer)) return NULL;
    if (!plugin_on) {
        PyErr_SetString(PyExc_RuntimeError, "the plugin is off (use_plugin)");
        return NULL;
    }
    int slot = -1;
    for (int k = 0; k < TAP_MAX && slot < 0; k++) {
        int idle = 0;
        if (__atomic_compare_exchange_n(&taps[k].busy, &idle, 1, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            slot = k;
    }
    if (slot < 0) {
        PyErr_SetString(PyExc_RuntimeError, "too many clients with a tap at once");
        return NULL;
    }
    Tap *t = &taps[slot];
    TapObject *self = (TapObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        __atomic_store_n(&t->busy, 0, __ATOMIC_RELEASE);
        return NULL;
    }
    t->gen++;
    t->rk = NULL;
    t->client = NULL;
    t->consumer = consumer;
    t->owned = 0;
    t->n = t->used = t->next = 0;
    t->recorded = t->dropped = t->read = 0;
    __atomic_store_n(&t->refs, 1, __ATOMIC_RELEASE);
    self->slot = slot;
    self->gen = t->gen;
    return (PyObject *)self;
}

static void Tap_dealloc(TapObject *self) {
    Tap *t = &taps[self->slot];
    t->owned = 0;  /* nothing recorded any more, in any thread */
    tap_release(t);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Tap_begin(TapObject *self, PyObject *unused) {
    Tap *t = &taps[self->slot];
    if (t->n) memset(t->table, 0, (t->tmask + 1) * sizeof(uint32_t));
    t->n = 0;
    t->next = 0;
    t->used = 0;
    t->owner = pthread_self();
    t->owned = 1;
    Py_RETURN_NONE;
}

static PyObject *Tap_bind(TapObject *self, PyObject *client) {
    Tap *t = &taps[self->slot];
    if (t->rk == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the tap's client was not created with it");
        return NULL;
    }
    t->client = client;  /* no reference: cleared by on_destroy, before the client is freed */
    Py_RETURN_NONE;
}

static PyObject *Tap_token(TapObject *self, void *unused) {
    return PyUnicode_FromFormat("%d.%u", self->slot, self->gen);
}

static PyObject *Tap_attached(TapObject *self, void *unused) {
    return PyBool_FromLong(taps[self->slot].rk != NULL);
}

static PyObject *Tap_counts(TapObject *self, void *unused) {
    Tap *t = &taps[self->slot];
    return Py_BuildValue("{sKsKsK}", "recorded", t->recorded, "dropped", t->dropped, "read",
                         t->read);
}

static PyMethodDef Tap_methods[] = {
    {"begin", (PyCFunction)Tap_begin, METH_NOARGS,
     "Before a consume(): forget the records kept so far; keep those consumed in this thread."},
    {"bind", (PyCFunction)Tap_bind, METH_O,
     "The client created with this tap (its records are then produced directly)."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Tap_getset[] = {
    {"token", (getter)Tap_token, NULL, "the value of the client's cutover.tap property", NULL},
    {"attached", (getter)Tap_attached, NULL, "a client was created with it and is alive", NULL},
    {"counts", (getter)Tap_counts, NULL,
     "records kept by on_consume, not kept (over the bounds), read by compiled runs", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject TapType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "router.native._fastpath.Tap",
    .tp_basicsize = sizeof(TapObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A client's view through librdkafka's interceptors (router/native/_plugin.h).",
    .tp_new = Tap_new,
    .tp_dealloc = (destructor)Tap_dealloc,
    .tp_methods = Tap_methods,
    .tp_getset = Tap_getset,
};

static PyObject *py_record_identity(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "record_identity(key, value, event_time)");
        return NULL;
    }
    long long t = PyLong_AsLongLong(args[2]);
    if (t == -1 && PyErr_Occurred()) return NULL;
    PyObject *out = identity_of_record(args[0], args[1], t);
    if (out == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "key and value must be bytes or None");
    return out;
}

static PyObject *py_key_bucket(PyObject *mod, PyObject *key) {
    (void)mod;
    if (!PyBytes_Check(key)) {
        PyErr_SetString(PyExc_TypeError, "key_bucket(key: bytes)");
        return NULL;
    }
    return PyLong_FromLongLong(key_bucket(PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key)));
}

static PyMethodDef module_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "Give the compiled path the header names, known versions, filter masks and identity."},
    {"record_identity", (PyCFunction)(void (*)(void))py_record_identity, METH_FASTCALL,
     "router.rule.identity.record_identity, in C"},
    {"key_bucket", py_key_bucket, METH_O, "cutover.key_bucket.key_bucket, in C"},
    {"use_plugin", (PyCFunction)(void (*)(void))use_plugin, METH_VARARGS | METH_KEYWORDS,
     "Find librdkafka's functions, so that clients may load this file as their plugin."},
    {"produced_directly", py_produced_directly, METH_NOARGS,
     "How many forwards this process produced directly (tests)."},
    {"envelope", (PyCFunction)(void (*)(void))py_envelope, METH_FASTCALL,
     "(version, event time, timestamp, headers) kept of a consumed record, or None (tests)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_fastpath",
                                       "The router's per-record path, compiled "
                                       "(router.native.compiled).", -1, module_methods};

PyMODINIT_FUNC PyInit__fastpath(void) {
    /* Every attribute and method this file reads, writes or calls on a Python object. The
     * contract is the Protocols in _fastpath.pyi (RouterView, StoreView, DurabilityView,
     * BoundView, StreamView, ...): only public names declared there, so that mypy checks the
     * objects router/native/compiled.py passes; tests/unit/test_native_boundary.py checks this
     * table against them. Message accessors and Producer methods are confluent-kafka's. */
    struct { PyObject **slot; const char *name; } names[] = {
        {&s_error, "error"}, {&s_topic, "topic"}, {&s_partition, "partition"},
        {&s_offset, "offset"}, {&s_headers, "headers"}, {&s_timestamp, "timestamp"},
        {&s_key, "key"}, {&s_value, "value"}, {&s_produce, "produce"}, {&s_poll, "poll"},
        {&s_failed, "failed"}, {&s_topics, "topics"}, {&s_primaries, "primaries"},
        {&s_bounds, "bounds"}, {&s_tolerance, "tolerance"}, {&s_horizon, "horizon"},
        {&s_retention, "retention_ms"}, {&s_ordered, "ordered"},
        {&s_closed_upto, "closed_upto"}, {&s_counters, "counters"},
        {&s_suppressed, "suppressed"}, {&s_forwarded, "forwarded"}, {&s_unflushed, "unflushed"},
        {&s_live_bits, "live_bits"}, {&s_skip, "skip"},
        {&s_next_offsets, "next_offsets"}, {&s_dirty, "dirty"},
        {&s_undelivered, "undelivered"}, {&s_out_pos, "out_pos"}, {&s_queued, "queued"},
        {&s_live_flag, "live"}, {&s_held, "held"}, {&s_producer, "producer"},
        {&s_key_rules, "key_rules"}, {&s_canary, "canary"}, {&s_buckets, "buckets"},
        {&s_watermarks, "watermarks"}};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        *names[k].slot = PyUnicode_InternFromString(names[k].name);
        if (*names[k].slot == NULL) return NULL;
    }
    int_zero = PyLong_FromLong(0);
    poll_timeout = PyFloat_FromDouble(0.05);
    if (int_zero == NULL || poll_timeout == NULL) return NULL;
    if (PyType_Ready(&RunType) < 0 || PyType_Ready(&TapType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    Py_INCREF(&RunType);
    if (PyModule_AddObject(m, "Run", (PyObject *)&RunType) < 0) {
        Py_DECREF(&RunType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&TapType);
    if (PyModule_AddObject(m, "Tap", (PyObject *)&TapType) < 0) {
        Py_DECREF(&TapType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
