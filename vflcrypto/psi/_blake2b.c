/*
 * BLAKE2b (RFC 7693) over many short messages in one call: KKRT's per-row OPRF hashes and
 * per-ID item hashes. hashlib computes the same digests one Python call at a time (~0.7 us
 * each, most of it the call); here one call hashes a whole batch with the GIL released.
 * With a digest length, a personalization string and an optional key, as hashlib.blake2b(
 * digest_size=..., person=..., key=...) computes; tests/test_kkrt_native.py checks the bytes against
 * hashlib on every message length from 0 to 300 and on generated batches.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

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
    for (int r = 0; r < 12; r++) {
        const uint8_t *s = SIGMA[r];
        G(v[0], v[4], v[8], v[12], m[s[0]], m[s[1]]);
        G(v[1], v[5], v[9], v[13], m[s[2]], m[s[3]]);
        G(v[2], v[6], v[10], v[14], m[s[4]], m[s[5]]);
        G(v[3], v[7], v[11], v[15], m[s[6]], m[s[7]]);
        G(v[0], v[5], v[10], v[15], m[s[8]], m[s[9]]);
        G(v[1], v[6], v[11], v[12], m[s[10]], m[s[11]]);
        G(v[2], v[7], v[8], v[13], m[s[12]], m[s[13]]);
        G(v[3], v[4], v[9], v[14], m[s[14]], m[s[15]]);
    }
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
    result = PyBytes_FromStringAndSize(NULL, n * outlen);
    if (!result)
        goto out;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(result);
    const uint8_t *d = data.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t len = (uint64_t)(off[i + 1] - off[i]);
        if (!key.len)
            hash_one(h0, 0, d + off[i], len, o + i * outlen, outlen);
        else if (len)
            hash_one(keyed, 128, d + off[i], len, o + i * outlen, outlen);
        else
            for (int j = 0; j < outlen; j++)
                o[i * outlen + j] = (uint8_t)(final_empty[j / 8] >> (8 * (j % 8)));
    }
    Py_END_ALLOW_THREADS
out:
    PyBuffer_Release(&data), PyBuffer_Release(&offsets), PyBuffer_Release(&person);
    if (key.obj)
        PyBuffer_Release(&key);
    return result;
}

static PyMethodDef methods[] = {
    {"blake2b_many", blake2b_many, METH_VARARGS,
     "blake2b_many(data, offsets_int64, digest_size, person, key=b'') -> bytes\n\n"
     "hashlib.blake2b(data[off[i]:off[i+1]], digest_size=..., person=..., key=...).digest() for each i,\n"
     "concatenated. Releases the GIL."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_blake2b", "Batched BLAKE2b (RFC 7693) for KKRT.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__blake2b(void) { return PyModule_Create(&module); }
