/* BLAKE2b (RFC 7693), unkeyed, with a chosen digest length: the record identity of
 * router/rule/identity.py (hashlib.blake2b(..., digest_size=16)) computed without building the
 * joined bytes, and a key's canary bucket (cutover.key_bucket). Both run per record, so the
 * message words are loaded whole and the rounds are written out with their schedule as
 * constants (a third faster than a loop over b2b_sigma with bytewise loads). Checked against
 * hashlib by tests/unit/test_compiled_path.py. */

#ifndef CUTOVER_BLAKE2B_H
#define CUTOVER_BLAKE2B_H

#include <stdint.h>
#include <string.h>

typedef struct {
    uint64_t h[8];
    uint64_t t0, t1;
    uint8_t buf[128];
    size_t buflen;
    size_t outlen;
} b2b_state;

static const uint64_t b2b_iv[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL,
    0xa54ff53a5f1d36f1ULL, 0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL,
    0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL};

static const uint8_t b2b_sigma[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

static inline uint64_t b2b_rotr(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

static inline uint64_t b2b_load64(const uint8_t *p) {  /* little-endian, as RFC 7693 reads */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
#else
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
#endif
}

#define B2B_G(a, b, c, d, x, y)            \
    do {                                   \
        v[a] = v[a] + v[b] + (x);          \
        v[d] = b2b_rotr(v[d] ^ v[a], 32);  \
        v[c] = v[c] + v[d];                \
        v[b] = b2b_rotr(v[b] ^ v[c], 24);  \
        v[a] = v[a] + v[b] + (y);          \
        v[d] = b2b_rotr(v[d] ^ v[a], 16);  \
        v[c] = v[c] + v[d];                \
        v[b] = b2b_rotr(v[b] ^ v[c], 63);  \
    } while (0)

#define B2B_SIGMA(r, i) b2b_sigma[(r)][(i)]
#define B2B_ROUND(r)                                                              \
    do {                                                                          \
        B2B_G(0, 4, 8, 12, m[B2B_SIGMA(r, 0)], m[B2B_SIGMA(r, 1)]);               \
        B2B_G(1, 5, 9, 13, m[B2B_SIGMA(r, 2)], m[B2B_SIGMA(r, 3)]);               \
        B2B_G(2, 6, 10, 14, m[B2B_SIGMA(r, 4)], m[B2B_SIGMA(r, 5)]);              \
        B2B_G(3, 7, 11, 15, m[B2B_SIGMA(r, 6)], m[B2B_SIGMA(r, 7)]);              \
        B2B_G(0, 5, 10, 15, m[B2B_SIGMA(r, 8)], m[B2B_SIGMA(r, 9)]);              \
        B2B_G(1, 6, 11, 12, m[B2B_SIGMA(r, 10)], m[B2B_SIGMA(r, 11)]);            \
        B2B_G(2, 7, 8, 13, m[B2B_SIGMA(r, 12)], m[B2B_SIGMA(r, 13)]);             \
        B2B_G(3, 4, 9, 14, m[B2B_SIGMA(r, 14)], m[B2B_SIGMA(r, 15)]);             \
    } while (0)

static void b2b_compress(b2b_state *s, int last) {
    uint64_t v[16], m[16];
    for (int i = 0; i < 8; i++) {
        v[i] = s->h[i];
        v[i + 8] = b2b_iv[i];
    }
    v[12] ^= s->t0;
    v[13] ^= s->t1;
    if (last) v[14] = ~v[14];
    for (int i = 0; i < 16; i++) m[i] = b2b_load64(s->buf + 8 * i);
    /* the twelve rounds written out, each with its message schedule (b2b_sigma) as
     * constants, so that the state and the message words stay in registers */
    B2B_ROUND(0); B2B_ROUND(1); B2B_ROUND(2); B2B_ROUND(3); B2B_ROUND(4); B2B_ROUND(5);
    B2B_ROUND(6); B2B_ROUND(7); B2B_ROUND(8); B2B_ROUND(9); B2B_ROUND(10); B2B_ROUND(11);
    for (int i = 0; i < 8; i++) s->h[i] ^= v[i] ^ v[i + 8];
}

static void b2b_init(b2b_state *s, size_t outlen) {
    for (int i = 0; i < 8; i++) s->h[i] = b2b_iv[i];
    s->h[0] ^= 0x01010000ULL ^ (uint64_t)outlen;  /* fanout 1, depth 1, no key */
    s->t0 = s->t1 = 0;
    s->buflen = 0;
    s->outlen = outlen;
}

static void b2b_update(b2b_state *s, const uint8_t *in, size_t inlen) {
    while (inlen > 0) {
        if (s->buflen == 128) {  /* a full block that is not the last: compress it */
            s->t0 += 128;
            if (s->t0 < 128) s->t1++;
            b2b_compress(s, 0);
            s->buflen = 0;
        }
        size_t take = 128 - s->buflen;
        if (take > inlen) take = inlen;
        memcpy(s->buf + s->buflen, in, take);
        s->buflen += take;
        in += take;
        inlen -= take;
    }
}

static void b2b_final(b2b_state *s, uint8_t *out) {
    s->t0 += s->buflen;
    if (s->t0 < s->buflen) s->t1++;
    memset(s->buf + s->buflen, 0, 128 - s->buflen);
    b2b_compress(s, 1);
    for (size_t i = 0; i < s->outlen; i++) out[i] = (uint8_t)(s->h[i / 8] >> (8 * (i % 8)));
}

#endif
