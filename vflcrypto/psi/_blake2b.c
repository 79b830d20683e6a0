/*
 * BLAKE2b (RFC 7693) over many short messages in one call: KKRT's per-row OPRF hashes and
 * per-ID item hashes. hashlib computes the same digests one Python call at a time (~0.7 us
 * each, most of it the call); here one call hashes a whole batch with the GIL released.
 * With a digest length, a personalization string and an optional key, as hashlib.blake2b(
 * digest_size=..., person=..., key=...) computes; tests/test_kkrt_native.py checks the bytes against
 * hashlib on every message length from 0 to 300 and on generated batches, with and without SIMD.
 *
 * Lanes. BLAKE2b works on 64-bit words and one message's 12 rounds are a chain of dependent
 * adds, xors and rotations: little to do in parallel within one hash. The IDs are short (8-20
 * bytes), so each is a single final block, and those are independent: on x86-64 a batch is
 * hashed 4 messages at a time with AVX2 (or 8 with AVX-512F) where SIMD lane k of every vector
 * holds message k's copy of the same state word (v[i] of 4/8 messages in one __m256i/__m512i,
 * and the message words m[j] transposed the same way). Then the scalar G below runs unchanged
 * on vectors: no shuffling of words between lanes, only per-lane adds, xors and rotations.
 * A lane group may mix lengths 0..128: each lane has its own counter t (= bytes before it +
 * its length) on a zero-padded block, and all are last blocks. Keyed messages use the lanes
 * too, from the state after the key block (counted as 128 bytes). Longer messages (several
 * blocks) and the last <4/8 one-block messages of a batch take the scalar path; the empty
 * keyed message's digest is computed once per call. The path is chosen once at import from
 * what the CPU (and OS) support, with GCC/Clang function attributes, so the file builds with
 * plain -O3 (no -march) and elsewhere it is scalar. VFLCRYPTO_SIMD=0 in the environment at
 * import forces the scalar path, VFLCRYPTO_SIMD=avx2 at most AVX2 (the tests compare them).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_simd.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_X86_SIMD 1
#include <immintrin.h>
#else
#define HAVE_X86_SIMD 0
#endif

static const uint64_t IV[8] = {0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL,
                               0xa54ff53a5f1d36f1ULL, 0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL,
                               0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL};

static const uint8_t SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

/* One round, for any word type: G is the scalar macro or a vector one over v[16] and m[16]. With
 * a literal r the SIGMA[r][i] are compile-time constants, so the 12 rounds unroll into straight-line
 * code with every message word indexed statically (v and m can live in registers). */
#define ROUND(G, r)                                                    \
    do {                                                               \
        G(v[0], v[4], v[8], v[12], m[SIGMA[r][0]], m[SIGMA[r][1]]);    \
        G(v[1], v[5], v[9], v[13], m[SIGMA[r][2]], m[SIGMA[r][3]]);    \
        G(v[2], v[6], v[10], v[14], m[SIGMA[r][4]], m[SIGMA[r][5]]);   \
        G(v[3], v[7], v[11], v[15], m[SIGMA[r][6]], m[SIGMA[r][7]]);   \
        G(v[0], v[5], v[10], v[15], m[SIGMA[r][8]], m[SIGMA[r][9]]);   \
        G(v[1], v[6], v[11], v[12], m[SIGMA[r][10]], m[SIGMA[r][11]]); \
        G(v[2], v[7], v[8], v[13], m[SIGMA[r][12]], m[SIGMA[r][13]]);  \
        G(v[3], v[4], v[9], v[14], m[SIGMA[r][14]], m[SIGMA[r][15]]);  \
    } while (0)

#define ROUNDS(G)                                                                       \
    do {                                                                                \
        ROUND(G, 0); ROUND(G, 1); ROUND(G, 2); ROUND(G, 3); ROUND(G, 4); ROUND(G, 5);   \
        ROUND(G, 6); ROUND(G, 7); ROUND(G, 8); ROUND(G, 9); ROUND(G, 10); ROUND(G, 11); \
    } while (0)

static inline uint64_t rotr(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

static inline uint64_t load64(const uint8_t *p) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
#else
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
#endif
}

#define G(a, b, c, d, x, y)          \
    do {                             \
        a = a + b + (x);             \
        d = rotr(d ^ a, 32);         \
        c = c + d;                   \
        b = rotr(b ^ c, 24);         \
        a = a + b + (y);             \
        d = rotr(d ^ a, 16);         \
        c = c + d;                   \
        b = rotr(b ^ c, 63);         \
    } while (0)

/* one 128-byte block; t = bytes hashed so far including this block (messages here are < 2^64) */
static void compress(uint64_t h[8], const uint8_t block[128], uint64_t t, int last) {
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; i++)
        m[i] = load64(block + 8 * i);
    for (int i = 0; i < 8; i++)
        v[i] = h[i], v[i + 8] = IV[i];
    v[12] ^= t;
    if (last)
        v[14] = ~v[14];
    ROUNDS(G);
    for (int i = 0; i < 8; i++)
        h[i] ^= v[i] ^ v[i + 8];
}

/* h0: the state before the message (after the key block when keyed: `base` = 128 bytes counted) */
static void hash_one(const uint64_t h0[8], uint64_t base, const uint8_t *msg, uint64_t len, uint8_t *out,
                     int outlen) {
    uint64_t h[8];
    uint8_t block[128];
    memcpy(h, h0, sizeof h);
    uint64_t done = 0;
    while (len - done > 128) { /* every full block but the last */
        compress(h, msg + done, base + done + 128, 0);
        done += 128;
    }
    memset(block, 0, sizeof block);
    memcpy(block, msg + done, (size_t)(len - done));
    compress(h, block, base + len, 1);
    for (int i = 0; i < outlen; i++)
        out[i] = (uint8_t)(h[i / 8] >> (8 * (i % 8)));
}

/* ---- lanes: W messages of at most 128 bytes each, one final block apiece, hashed together ---- */

#define MAX_LANES 8

/* Hashes W one-block messages msg[k] (len[k] <= 128) from the state h0 with `base` bytes already
 * counted (0, or 128 after a key block) into out[k]. */
typedef void (*lanes_fn)(const uint64_t h0[8], uint64_t base, const uint8_t *const msg[], const uint64_t len[],
                         uint8_t *const out[], int outlen);

#if HAVE_X86_SIMD

/* The messages' blocks transposed: M[j * W + k] = word j of message k's zero-padded block, so that
 * row j is the vector m[j]. Little-endian (x86) words. */
static inline void transpose_blocks(uint64_t *M, int W, const uint8_t *const msg[], const uint64_t len[]) {
    memset(M, 0, 16 * (size_t)W * sizeof(uint64_t));
    for (int k = 0; k < W; k++) {
        const uint8_t *p = msg[k];
        size_t n = (size_t)len[k], j = 0;
        for (; 8 * j + 8 <= n; j++)
            M[j * W + k] = load64(p + 8 * j);
        size_t r = n - 8 * j; /* 0..7 bytes left: the last word, zero-padded */
        if (r && n >= 8)      /* the 8 bytes ending the message, shifted down past the 8-r already taken */
            M[j * W + k] = load64(p + n - 8) >> (8 * (8 - r));
        else if (r) { /* a message shorter than a word */
            uint64_t w = 0;
            for (size_t i = 0; i < r; i++)
                w |= (uint64_t)p[i] << (8 * i);
            M[k] = w;
        }
    }
}

/* H[i * W + k] = word i of message k's final state: its first outlen bytes are the digest */
static inline void store_digests(const uint64_t *H, int W, uint8_t *const out[], int outlen) {
    for (int k = 0; k < W; k++) {
        int i = 0;
        for (; 8 * i + 8 <= outlen; i++) /* whole words: fixed-size copies, no call to memcpy */
            memcpy(out[k] + 8 * i, &H[i * W + k], 8);
        for (int b = 8 * i; b < outlen; b++)
            out[k][b] = (uint8_t)(H[i * W + k] >> (8 * (b - 8 * i)));
    }
}

/* AVX2: 4 lanes of 64 bits. AVX2 has no 64-bit rotate; rotations by whole bytes are byte shuffles
 * within each 64-bit lane, by 32 a swap of the 32-bit halves, and by 63 a left shift by 1 (x + x)
 * or'ed with the top bit shifted down. */
#define ADD4(a, b) _mm256_add_epi64(a, b)
#define XOR4(a, b) _mm256_xor_si256(a, b)
#define ROR32_4(x) _mm256_shuffle_epi32(x, _MM_SHUFFLE(2, 3, 0, 1)) /* swap the dwords of each qword */
#define ROR24_4(x) _mm256_shuffle_epi8(x, r24)                         /* byte i of each qword <- byte i+3 */
#define ROR16_4(x) _mm256_shuffle_epi8(x, r16)                         /* byte i of each qword <- byte i+2 */
#define ROR63_4(x) _mm256_or_si256(_mm256_srli_epi64(x, 63), _mm256_add_epi64(x, x))

#define G4(a, b, c, d, x, y)                  \
    do {                                      \
        a = ADD4(ADD4(a, b), x);              \
        d = ROR32_4(XOR4(d, a));              \
        c = ADD4(c, d);                       \
        b = ROR24_4(XOR4(b, c));              \
        a = ADD4(ADD4(a, b), y);              \
        d = ROR16_4(XOR4(d, a));              \
        c = ADD4(c, d);                       \
        b = ROR63_4(XOR4(b, c));              \
    } while (0)

__attribute__((target("avx2"))) static void lanes_avx2(const uint64_t h0[8], uint64_t base,
                                                       const uint8_t *const msg[], const uint64_t len[],
                                                       uint8_t *const out[], int outlen) {
    enum { W = 4 };
    uint64_t M[16 * W] __attribute__((aligned(32))), H[8 * W] __attribute__((aligned(32)));
    transpose_blocks(M, W, msg, len);
    /* _mm256_shuffle_epi8 shuffles within each 128-bit half, so the pattern is given for both halves */
    const __m256i r24 = _mm256_setr_epi8(3, 4, 5, 6, 7, 0, 1, 2, 11, 12, 13, 14, 15, 8, 9, 10, 3, 4, 5, 6, 7, 0,
                                         1, 2, 11, 12, 13, 14, 15, 8, 9, 10);
    const __m256i r16 = _mm256_setr_epi8(2, 3, 4, 5, 6, 7, 0, 1, 10, 11, 12, 13, 14, 15, 8, 9, 2, 3, 4, 5, 6, 7,
                                         0, 1, 10, 11, 12, 13, 14, 15, 8, 9);
    __m256i m[16], v[16], h[8];
    for (int j = 0; j < 16; j++)
        m[j] = _mm256_load_si256((const __m256i *)&M[j * W]);
    for (int i = 0; i < 8; i++) {
        h[i] = _mm256_set1_epi64x((long long)h0[i]); /* every message starts from the same state */
        v[i] = h[i];
        v[i + 8] = _mm256_set1_epi64x((long long)IV[i]);
    }
    /* per-lane counter t = base + len[k]; setr: lane 0 first */
    v[12] = XOR4(v[12], _mm256_setr_epi64x((long long)(base + len[0]), (long long)(base + len[1]),
                                           (long long)(base + len[2]), (long long)(base + len[3])));
    v[14] = XOR4(v[14], _mm256_set1_epi64x(-1)); /* every lane's block is its last: v14 = ~v14 */
    ROUNDS(G4);
    for (int i = 0; i < 8; i++)
        _mm256_store_si256((__m256i *)&H[i * W], XOR4(h[i], XOR4(v[i], v[i + 8])));
    store_digests(H, W, out, outlen);
}

/* AVX-512F: 8 lanes of 64 bits, with a native 64-bit rotate (vprorq) for every rotation. */
#define ADD8(a, b) _mm512_add_epi64(a, b)
#define XOR8(a, b) _mm512_xor_si512(a, b)

#define G8(a, b, c, d, x, y)                         \
    do {                                             \
        a = ADD8(ADD8(a, b), x);                     \
        d = _mm512_ror_epi64(XOR8(d, a), 32);        \
        c = ADD8(c, d);                              \
        b = _mm512_ror_epi64(XOR8(b, c), 24);        \
        a = ADD8(ADD8(a, b), y);                     \
        d = _mm512_ror_epi64(XOR8(d, a), 16);        \
        c = ADD8(c, d);                              \
        b = _mm512_ror_epi64(XOR8(b, c), 63);        \
    } while (0)

__attribute__((target("avx512f"))) static void lanes_avx512(const uint64_t h0[8], uint64_t base,
                                                           const uint8_t *const msg[], const uint64_t len[],
                                                           uint8_t *const out[], int outlen) {
    enum { W = 8 };
    uint64_t M[16 * W] __attribute__((aligned(64))), H[8 * W] __attribute__((aligned(64)));
    transpose_blocks(M, W, msg, len);
    __m512i m[16], v[16], h[8];
    for (int j = 0; j < 16; j++)
        m[j] = _mm512_load_si512((const void *)&M[j * W]);
    for (int i = 0; i < 8; i++) {
        h[i] = _mm512_set1_epi64((long long)h0[i]);
        v[i] = h[i];
        v[i + 8] = _mm512_set1_epi64((long long)IV[i]);
    }
    __m512i t = _mm512_loadu_si512((const void *)len); /* the 8 lengths, lane k = len[k] */
    v[12] = XOR8(v[12], ADD8(t, _mm512_set1_epi64((long long)base)));
    v[14] = XOR8(v[14], _mm512_set1_epi64(-1));
    ROUNDS(G8);
    for (int i = 0; i < 8; i++)
        _mm512_store_si512((void *)&H[i * W], XOR8(h[i], XOR8(v[i], v[i + 8])));
    store_digests(H, W, out, outlen);
}

#endif /* HAVE_X86_SIMD */

/* chosen once in PyInit: the lane function and its width, or none (the scalar path) */
static lanes_fn lanes = NULL;
static int lane_width = 1;
static const char *simd_name = "scalar";

static PyObject *blake2b_many(PyObject *self, PyObject *args) {
    Py_buffer data, offsets, person, key = {0};
    int outlen;
    if (!PyArg_ParseTuple(args, "y*y*iy*|y*", &data, &offsets, &outlen, &person, &key))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = offsets.len / (Py_ssize_t)sizeof(int64_t) - 1;
    const int64_t *off = offsets.buf;
    if (outlen < 1 || outlen > 64 || person.len > 16 || key.len > 64 || n < 0 ||
        offsets.len % (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError,
                        "digest size 1..64, person up to 16 bytes, key up to 64, n + 1 int64 offsets");
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (off[i] < 0 || off[i] > off[i + 1] || off[i + 1] > data.len) {
            PyErr_SetString(PyExc_ValueError, "offsets must rise within the data");
            goto out;
        }
    uint8_t p[16] = {0};
    memcpy(p, person.buf, (size_t)person.len);
    uint64_t h0[8];
    memcpy(h0, IV, sizeof h0);
    h0[0] ^= 0x01010000ULL | ((uint64_t)key.len << 8) | (uint64_t)outlen; /* fanout 1, depth 1 */
    h0[6] ^= load64(p);
    h0[7] ^= load64(p + 8);
    uint8_t keyblock[128] = {0};
    uint64_t keyed[8], final_empty[8];
    if (key.len) { /* the key is a first block of its own: compressed once, as hashlib's copy() of a keyed state */
        memcpy(keyblock, key.buf, (size_t)key.len);
        memcpy(keyed, h0, sizeof keyed);
        compress(keyed, keyblock, 128, 0);
        memcpy(final_empty, h0, sizeof final_empty); /* an empty message: the key block is the last */
        compress(final_empty, keyblock, 128, 1);
    }
    /* a message's starting state and the bytes counted before it: after the key block when keyed */
    const uint64_t *start = key.len ? keyed : h0;
    const uint64_t base = key.len ? 128 : 0;
    result = PyBytes_FromStringAndSize(NULL, n * outlen);
    if (!result)
        goto out;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(result);
    const uint8_t *d = data.buf;
    Py_BEGIN_ALLOW_THREADS
    /* one-block messages wait here until a lane group is full; any left at the end go one by one */
    const uint8_t *lane_msg[MAX_LANES];
    uint64_t lane_len[MAX_LANES];
    uint8_t *lane_out[MAX_LANES];
    int filled = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t len = (uint64_t)(off[i + 1] - off[i]);
        if (key.len && !len) {
            for (int j = 0; j < outlen; j++)
                o[i * outlen + j] = (uint8_t)(final_empty[j / 8] >> (8 * (j % 8)));
        } else if (lanes && len <= 128) {
            lane_msg[filled] = d + off[i], lane_len[filled] = len, lane_out[filled] = o + i * outlen;
            if (++filled == lane_width) {
                lanes(start, base, lane_msg, lane_len, lane_out, outlen);
                filled = 0;
            }
        } else
            hash_one(start, base, d + off[i], len, o + i * outlen, outlen);
    }
    for (int k = 0; k < filled; k++)
        hash_one(start, base, lane_msg[k], lane_len[k], lane_out[k], outlen);
    Py_END_ALLOW_THREADS
out:
    PyBuffer_Release(&data), PyBuffer_Release(&offsets), PyBuffer_Release(&person);
    if (key.obj)
        PyBuffer_Release(&key);
    return result;
}

static PyObject *simd(PyObject *self, PyObject *unused) { return PyUnicode_FromString(simd_name); }

static PyMethodDef methods[] = {
    {"blake2b_many", blake2b_many, METH_VARARGS,
     "blake2b_many(data, offsets_int64, digest_size, person, key=b'') -> bytes\n\n"
     "hashlib.blake2b(data[off[i]:off[i+1]], digest_size=..., person=..., key=...).digest() for each i,\n"
     "concatenated. Releases the GIL."},
    {"simd", simd, METH_NOARGS,
     "simd() -> 'avx512', 'avx2' or 'scalar': how blake2b_many hashes one-block messages here\n"
     "(chosen at import from the CPU; VFLCRYPTO_SIMD=0 at import forces 'scalar')."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_blake2b", "Batched BLAKE2b (RFC 7693) for KKRT.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__blake2b(void) {
    int cap = simd_cap(); /* _simd.h: VFLCRYPTO_SIMD */
#if HAVE_X86_SIMD
    __builtin_cpu_init();
    /* __builtin_cpu_supports also checks that the OS saves the vector registers (XCR0) */
    if (cap >= SIMD_AVX512 && __builtin_cpu_supports("avx512f"))
        lanes = lanes_avx512, lane_width = 8, simd_name = "avx512";
    else if (cap >= SIMD_AVX2 && __builtin_cpu_supports("avx2"))
        lanes = lanes_avx2, lane_width = 4, simd_name = "avx2";
#endif
    (void)cap;
    return PyModule_Create(&module);
}
