/*
 * Random-band OKVS (RB-OKVS) over 16-byte values: encode by banded Gaussian elimination over
 * GF(2), decode as an XOR of a row's band of the encoding.
 *
 * After A. Bienstock, S. Patel, J. Y. Seo, K. Yeo, "Near-Optimal Oblivious Key-Value Stores for
 * Efficient PSI, PSU and Volume-Hiding Multi-Maps", USENIX Security 2023 (eprint 2023/903).
 * Row i has a start column s_i in [0, m - w] and a w-bit band b_i; it stands for the equation
 *     XOR over the set bits k of b_i of P[s_i + k]  =  v_i
 * over the vector P of m elements of GF(2)^128 (16 bytes; addition is XOR). Encoding solves the
 * n equations for P; decoding evaluates the left-hand side. vflcrypto.psi.okvs derives the rows
 * from keys and wraps both calls; tests/test_okvs.py checks them against a dense numpy solver.
 *
 * Why C: decoding 10^7 rows is the hot loop of the VOLE-based PSI (about 128 16-byte XORs a
 * row), and encoding is a sequential elimination with no vectorised numpy form. Both calls
 * release the GIL and never write to the caller's buffers (encoding works on copies).
 *
 * Layouts (native-endian machine words, i.e. numpy's int64 / uint64 arrays on the host):
 * starts: n int64; bands: n * W uint64 with W = w / 64, bit k of a band = bit k % 64 of its word
 * k / 64; values: n * 16 bytes; P: m * 16 bytes. w is a multiple of 64 from 64 to 512.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_simd.h"

#if defined(__SSE2__) || defined(_M_X64)
#include <emmintrin.h>
#define OKVS_SSE2 1
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_X86_SIMD 1
#include <immintrin.h>
#else
#define HAVE_X86_SIMD 0
#endif

#include "_aesni.h"

#if defined(__GNUC__) || defined(__clang__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

#define MAX_WORDS 8 /* w <= 512 */

static PyObject *SingularError;

static inline uint64_t ld64(const void *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline int ctz64(uint64_t x) { /* x != 0 */
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_ctzll(x);
#else
    int r = 0;
    while (!(x & 1)) x >>= 1, r++;
    return r;
#endif
}

/* 16-byte elements: SSE2 where the compiler targets it (always on x86-64), else two words */
#ifdef OKVS_SSE2
typedef __m128i elem_t;
static inline elem_t el_zero(void) { return _mm_setzero_si128(); }
static inline elem_t el_load(const uint8_t *p) { return _mm_loadu_si128((const __m128i *)p); }
static inline void el_store(uint8_t *p, elem_t x) { _mm_storeu_si128((__m128i *)p, x); }
static inline elem_t el_xor(elem_t a, elem_t b) { return _mm_xor_si128(a, b); }
#else
typedef struct {
    uint64_t lo, hi;
} elem_t;
static inline elem_t el_zero(void) { elem_t z = {0, 0}; return z; }
static inline elem_t el_load(const uint8_t *p) { elem_t x; memcpy(&x.lo, p, 8), memcpy(&x.hi, p + 8, 8); return x; }
static inline void el_store(uint8_t *p, elem_t x) { memcpy(p, &x.lo, 8), memcpy(p + 8, &x.hi, 8); }
static inline elem_t el_xor(elem_t a, elem_t b) { a.lo ^= b.lo, a.hi ^= b.hi; return a; }
#endif

/* The first row whose start is outside [0, max_start], or -1. */
static Py_ssize_t bad_start(const uint8_t *starts, Py_ssize_t n, int64_t max_start) {
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t s = (int64_t)ld64(starts + 8 * i);
        if (s < 0 || s > max_start)
            return i;
    }
    return -1;
}

/* The checks both calls share; sets ValueError and returns -1 on a mismatch, else n. */
static Py_ssize_t check_common(Py_ssize_t w, Py_ssize_t m, const Py_buffer *starts, const Py_buffer *bands) {
    if (w < 64 || w > 64 * MAX_WORDS || w % 64) {
        PyErr_Format(PyExc_ValueError, "band width w must be a multiple of 64 from 64 to 512, not %zd", w);
        return -1;
    }
    if (starts->len % 8) {
        PyErr_Format(PyExc_ValueError, "starts must be int64s (a multiple of 8 bytes), got %zd bytes", starts->len);
        return -1;
    }
    Py_ssize_t n = starts->len / 8, W = w / 64;
    if (bands->len / (8 * W) != n || bands->len % (8 * W)) {
        PyErr_Format(PyExc_ValueError, "bands must be n * w / 64 = %zd * %zd uint64 words (%zd bytes), got %zd bytes",
                     n, W, n * 8 * W, bands->len);
        return -1;
    }
    if (m < 0 || m > PY_SSIZE_T_MAX / 16 || (n > 0 && m < w)) {
        PyErr_Format(PyExc_ValueError, "m = %zd columns cannot hold rows of band width w = %zd (need m >= w)", m, w);
        return -1;
    }
    return n;
}

/*
 * Decoding: each row is the XOR of the P elements at the set bits of its band (about w/2 16-byte
 * XORs a row).
 *
 * Kernels. The scalar one visits the set bits with count-trailing-zeros word by word. On x86-64
 * the SIMD ones read the row's whole window of P (w consecutive elements, 16w bytes, in bounds as
 * s + w <= m) and XOR every element under a mask made from its band bit, with no branch on the
 * bits: AVX-512 loads 4 elements (64 bytes) at a time and XORs them under an 8-bit lane mask (each
 * band bit doubled, one per 64-bit half of its element: pdep spreads 32 band bits over the even
 * bits of a word, times 3 doubles them; the mask register is then shifted 8 bits a group: 20%
 * faster here than an 8-bit mask from a 16-entry table per group; pdep is slow on AMD before Zen 3,
 * which has no AVX-512), AVX2 loads 2 elements at a time and ANDs them with one of 4 masks (each
 * 128-bit half all ones or zero) from a table. Four accumulators break the XOR chain; their 128-bit lanes are XORed
 * together at the end. All three give the same bytes (XOR is associative and commutative). The
 * kernel is chosen once at import from what the CPU (and OS) support, with GCC/Clang function
 * attributes, so the file builds with plain -O3 (no -march) and elsewhere decodes scalar;
 * VFLCRYPTO_SIMD=0 (or "scalar") in the environment at import forces the scalar kernel, "avx2" at
 * most AVX2, as in _blake2b.c (the tests compare them).
 *
 * Order. In input order every row reads its own 16w-byte window of P at a random place, and once
 * P outgrows the caches (176 MB at 10^7 rows) every window comes from memory. So rows are visited
 * in the order of their starts' buckets of 2^BUCKET_SHIFT columns (a stable counting sort):
 * consecutive rows share windows that stay in cache and P is read about once; each order entry
 * packs the row's index with its start's offset in the bucket, so the starts are not read again.
 * What stays random is each row's band and output. The bands of GATHER rows at a time are first
 * copied to a local buffer, a loop of independent loads that the CPU overlaps, instead of one
 * row's band at a time ahead of its XORs. Results are written at the rows' input positions.
 *
 * At 10^7 rows, w = 256, one thread on the development machine (2 cores, AVX-512): AVX-512 0.85 s,
 * AVX2 1.4 s, scalar 1.8 s (2.3 s with one prefetched band at a time and the starts read again),
 * AVX-512 in input order 3.2 s. About 0.5 s of AVX-512's time is the sort and the random band and
 * output accesses, so vflcrypto.psi.okvs.decode's two threads take 0.6 s, not half.
 */
#define BUCKET_SHIFT 10
#define SORT_ABOVE (1 << 20) /* P bytes; below, P stays in cache anyway */
#define GATHER 128           /* rows whose bands are copied together */

/* one row: base = &P[s], band = its W words, out = its 16 bytes */
typedef void (*row_fn)(const uint8_t *base, const uint8_t *band, Py_ssize_t W, uint8_t *out);

static ALWAYS_INLINE void decode_one(const uint8_t *base, const uint8_t *band, Py_ssize_t W, uint8_t *out) {
    elem_t acc = el_zero();
    for (Py_ssize_t k = 0; k < W; k++, base += 64 * 16) /* set bits of each word, lowest first */
        for (uint64_t word = ld64(band + 8 * k); word; word &= word - 1)
            acc = el_xor(acc, el_load(base + 16 * ctz64(word)));
    el_store(out, acc);
}

#if HAVE_X86_SIMD
#define EVEN_BITS 0x5555555555555555ULL

/* AVX-512: group g of a word (band bits 4g..4g+3, elements 4g..4g+3 of its 64) is the 64-byte
 * load at base + 64g under mask bits 8g..8g+7 of the doubled band (bits 2j, 2j+1 for element j) */
__attribute__((target("avx512f,avx512bw,bmi2"))) static ALWAYS_INLINE void
decode_one_avx512(const uint8_t *base, const uint8_t *band, Py_ssize_t W, uint8_t *out) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (Py_ssize_t k = 0; k < W; k++, base += 64 * 16) {
        uint64_t word = ld64(band + 8 * k);
        __mmask64 lo = _cvtu64_mask64(_pdep_u64(word, EVEN_BITS) * 3),       /* groups 0..7 */
            hi = _cvtu64_mask64(_pdep_u64(word >> 32, EVEN_BITS) * 3);        /* groups 8..15 */
#define MASK(k64, g) ((__mmask8)((g) ? _kshiftri_mask64(k64, 8 * (g)) : (k64)))
#define XOR4(k64, g, at)                                                                                              \
    a0 = _mm512_mask_xor_epi64(a0, MASK(k64, g), a0, _mm512_loadu_si512((const void *)(at + 64 * (g))));               \
    a1 = _mm512_mask_xor_epi64(a1, MASK(k64, g + 1), a1, _mm512_loadu_si512((const void *)(at + 64 * (g + 1))));       \
    a2 = _mm512_mask_xor_epi64(a2, MASK(k64, g + 2), a2, _mm512_loadu_si512((const void *)(at + 64 * (g + 2))));       \
    a3 = _mm512_mask_xor_epi64(a3, MASK(k64, g + 3), a3, _mm512_loadu_si512((const void *)(at + 64 * (g + 3))));
        XOR4(lo, 0, base) XOR4(lo, 4, base) XOR4(hi, 0, base + 512) XOR4(hi, 4, base + 512)
#undef XOR4
#undef MASK
    }
    a0 = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
    __m256i h = _mm256_xor_si256(_mm512_castsi512_si256(a0), _mm512_extracti64x4_epi64(a0, 1));
    _mm_storeu_si128((__m128i *)out, _mm_xor_si128(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
}

/* AVX2: the mask for 2 elements from their 2 band bits (bit 0: the low 128 bits, bit 1: the high) */
static const uint64_t HALVES[4][4] __attribute__((aligned(32))) = {
    {0, 0, 0, 0}, {~0ULL, ~0ULL, 0, 0}, {0, 0, ~0ULL, ~0ULL}, {~0ULL, ~0ULL, ~0ULL, ~0ULL}};

__attribute__((target("avx2"))) static ALWAYS_INLINE void decode_one_avx2(const uint8_t *base, const uint8_t *band,
                                                                           Py_ssize_t W, uint8_t *out) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (Py_ssize_t k = 0; k < W; k++, base += 64 * 16) {
        uint64_t word = ld64(band + 8 * k);
#define XOR2(a, g)                                                                                                    \
    a = _mm256_xor_si256(a, _mm256_and_si256(_mm256_load_si256((const __m256i *)HALVES[(word >> (2 * (g))) & 3]),     \
                                             _mm256_loadu_si256((const __m256i *)(base + 32 * (g)))));
#define XOR8(g) XOR2(a0, g) XOR2(a1, g + 1) XOR2(a2, g + 2) XOR2(a3, g + 3)
        XOR8(0) XOR8(4) XOR8(8) XOR8(12) XOR8(16) XOR8(20) XOR8(24) XOR8(28)
#undef XOR8
#undef XOR2
    }
    a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    _mm_storeu_si128((__m128i *)out, _mm_xor_si128(_mm256_castsi256_si128(a0), _mm256_extracti128_si256(a0, 1)));
}
#endif /* HAVE_X86_SIMD */

/* All rows with kernel one (inlined into each caller below, compiled for its instruction set):
 * in input order when order is NULL, else in bucket order with order (n entries) and count
 * (buckets + 1, zeroed) as scratch. */
static ALWAYS_INLINE void decode_rows_with(row_fn one, const uint8_t *p, const uint8_t *st, const uint8_t *bd,
                                           Py_ssize_t n, Py_ssize_t W, uint8_t *o, uint64_t *order,
                                           Py_ssize_t *count, Py_ssize_t buckets) {
    if (!order) {
        for (Py_ssize_t i = 0; i < n; i++)
            one(p + 16 * (Py_ssize_t)ld64(st + 8 * i), bd + 8 * W * i, W, o + 16 * i);
        return;
    }
    const uint64_t low = ((uint64_t)1 << BUCKET_SHIFT) - 1;
    for (Py_ssize_t i = 0; i < n; i++) /* counting sort by bucket: count[b + 1] rows, then first slots */
        count[(ld64(st + 8 * i) >> BUCKET_SHIFT) + 1]++;
    for (Py_ssize_t b = 0; b < buckets; b++)
        count[b + 1] += count[b];
    for (Py_ssize_t i = 0; i < n; i++) { /* entry: the row's index, then its start's offset in the bucket */
        uint64_t s = ld64(st + 8 * i);
        order[count[s >> BUCKET_SHIFT]++] = (uint64_t)i << BUCKET_SHIFT | (s & low);
    }
    /* count[b] is now the end of bucket b's entries */
    uint64_t buf[GATHER * MAX_WORDS];
    Py_ssize_t b = 0;
    for (Py_ssize_t r0 = 0; r0 < n; r0 += GATHER) {
        Py_ssize_t g = n - r0 < GATHER ? n - r0 : GATHER;
        for (Py_ssize_t j = 0; j < g; j++) { /* the bands of the next rows: random lines, fetched together */
            const uint8_t *band = bd + 8 * W * (Py_ssize_t)(order[r0 + j] >> BUCKET_SHIFT);
            for (Py_ssize_t k = 0; k < W; k++)
                buf[W * j + k] = ld64(band + 8 * k);
        }
        for (Py_ssize_t j = 0; j < g; j++) {
            uint64_t e = order[r0 + j];
            while (count[b] <= r0 + j)
                b++;
            one(p + 16 * ((b << BUCKET_SHIFT) + (Py_ssize_t)(e & low)), (const uint8_t *)(buf + W * j), W,
                o + 16 * (Py_ssize_t)(e >> BUCKET_SHIFT));
        }
    }
}

typedef void (*rows_fn)(const uint8_t *p, const uint8_t *st, const uint8_t *bd, Py_ssize_t n, Py_ssize_t W,
                        uint8_t *o, uint64_t *order, Py_ssize_t *count, Py_ssize_t buckets);

static void decode_rows_scalar(const uint8_t *p, const uint8_t *st, const uint8_t *bd, Py_ssize_t n, Py_ssize_t W,
                               uint8_t *o, uint64_t *order, Py_ssize_t *count, Py_ssize_t buckets) {
    decode_rows_with(decode_one, p, st, bd, n, W, o, order, count, buckets);
}

#if HAVE_X86_SIMD
__attribute__((target("avx512f,avx512bw,bmi2"))) static void
decode_rows_avx512(const uint8_t *p, const uint8_t *st, const uint8_t *bd, Py_ssize_t n, Py_ssize_t W, uint8_t *o,
                   uint64_t *order, Py_ssize_t *count, Py_ssize_t buckets) {
    decode_rows_with(decode_one_avx512, p, st, bd, n, W, o, order, count, buckets);
}

__attribute__((target("avx2"))) static void decode_rows_avx2(const uint8_t *p, const uint8_t *st, const uint8_t *bd,
                                                             Py_ssize_t n, Py_ssize_t W, uint8_t *o, uint64_t *order,
                                                             Py_ssize_t *count, Py_ssize_t buckets) {
    decode_rows_with(decode_one_avx2, p, st, bd, n, W, o, order, count, buckets);
}
#endif

/* chosen once in PyInit */
static rows_fn decode_rows = decode_rows_scalar;
static const char *simd_name = "scalar";

static PyObject *okvs_decode(PyObject *self, PyObject *args) {
    Py_buffer P, starts, bands;
    Py_ssize_t w;
    if (!PyArg_ParseTuple(args, "y*y*y*n", &P, &starts, &bands, &w))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n, bad;
    if (P.len % 16) {
        PyErr_Format(PyExc_ValueError, "P must be m 16-byte values, got %zd bytes", P.len);
        goto out;
    }
    Py_ssize_t m = P.len / 16, W = w / 64;
    if ((n = check_common(w, m, &starts, &bands)) < 0)
        goto out;
    Py_BEGIN_ALLOW_THREADS
    bad = bad_start(starts.buf, n, (int64_t)(m - w));
    Py_END_ALLOW_THREADS
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "start %lld of row %zd is outside 0..m-w = 0..%zd",
                     (long long)(int64_t)ld64((const uint8_t *)starts.buf + 8 * bad), bad, m - w);
        goto out;
    }
    if (!(result = PyBytes_FromStringAndSize(NULL, n * 16)))
        goto out;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(result);
    /* the bucket order only pays when P outgrows the caches; without memory for it, input order */
    Py_ssize_t buckets = n ? ((m - w) >> BUCKET_SHIFT) + 1 : 0;
    int sort = 16 * m > SORT_ABOVE && n > 1 && (uint64_t)n <= UINT64_MAX >> BUCKET_SHIFT; /* entries fit */
    uint64_t *order = sort ? malloc(sizeof(uint64_t) * (size_t)n) : NULL;
    Py_ssize_t *count = order ? calloc((size_t)buckets + 1, sizeof(Py_ssize_t)) : NULL;
    Py_BEGIN_ALLOW_THREADS
    decode_rows(P.buf, starts.buf, bands.buf, n, W, o, count ? order : NULL, count, buckets);
    Py_END_ALLOW_THREADS
    free(order), free(count);
out:
    PyBuffer_Release(&P), PyBuffer_Release(&starts), PyBuffer_Release(&bands);
    return result;
}

/*
 * Encoding. The working copy keeps each row at word-aligned absolute columns: row r occupies
 * words (s_r / 64) .. (s_r / 64) + W of the conceptual m-column row (W + 1 words, the band shifted
 * left by s_r % 64), so adding one row into another is a plain word XOR at a word offset, with no
 * bit shifting. Rows are kept sorted by start (a radix sort: stable, O(n), see sort_by_start).
 *
 * Elimination, for each row i in that order:
 *   p = the first set column of row i. None: the row eliminated to zero, so it is a combination
 *     of earlier rows and the system is singular. We fail on every such row, even one whose value
 *     would happen to be consistent: the caller gives distinct keys, and for those a zero row is
 *     the rare dependence event the failure probability bounds (the caller reruns with a new key).
 *   For each later row j with s_j <= p (contiguous after i, since rows are sorted by start) whose
 *     column p is set: row j ^= row i, v_j ^= v_i. Row i's set columns lie in [p, s_i + w), inside
 *     row j's window [s_j, s_j + w) because s_i <= s_j <= p, so nothing falls off the band (in the
 *     paper's terms: shifting row i right by s_j - s_i drops only zero bits, those left of p).
 *   Afterwards no later row has column p set: p is row i's pivot, and pivots are distinct.
 * Back-substitution, in reverse order: P[p_i] = v_i ^ XOR of P[c] over the other set columns c of
 *   row i. Each such c > p_i is either no row's pivot (a free column: P[c] keeps its initial value,
 *   zero, or the caller's fill, which randomises the free columns for an oblivious encoding) or the
 *   pivot of a row processed after i (already assigned): a row h before i with pivot c cleared
 *   column c from row i (s_i <= p_i < c), and no row added to row i afterwards had column c set.
 * The reduced rows are the original ones times an invertible (unit lower-triangular) matrix, the
 * values alike, so P, which solves every reduced row, solves every original one.
 */
enum { ENC_OK = 0, ENC_BAD_START = 1, ENC_SINGULAR = 2 };

typedef struct {
    Py_ssize_t n, m, W;
    const uint8_t *starts, *bands, *values;
    uint8_t *P;           /* m * 16 bytes, zeroed or filled by the caller */
    uint64_t *keys, *tmp; /* n each: the radix sort's keys (start << 32 | row) and its other buffer */
    int64_t *rs;          /* sorted starts */
    uint64_t *rows;       /* n * (W + 1) words */
    uint8_t *vals;        /* n * 16 bytes */
    Py_ssize_t bad;       /* the row with a bad start, for the message */
} enc_t;

static int first_set(const uint64_t *row, Py_ssize_t words) { /* word index, or -1 for a zero row */
    for (Py_ssize_t k = 0; k < words; k++)
        if (row[k])
            return (int)k;
    return -1;
}

/* The rows' order by start, as keys (start << 32 | row) sorted by an LSD radix sort on the start's
 * bits, RADIX_BITS a pass: each pass reads the keys in order and appends each to one of 2^RADIX_BITS
 * runs whose ends stay in cache, so no pass writes at random. (A counting sort straight on the start,
 * with its ~m counters, scatters every row to a random place: at 10^7 rows that scatter was most of
 * the encoding's time.) keys and tmp hold n words; returns the one that ends sorted. */
#define RADIX_BITS 11
static uint64_t *sort_by_start(const uint8_t *starts, Py_ssize_t n, int64_t max_start, uint64_t *keys,
                               uint64_t *tmp) {
    static const Py_ssize_t R = (Py_ssize_t)1 << RADIX_BITS;
    Py_ssize_t count[((Py_ssize_t)1 << RADIX_BITS) + 1];
    for (Py_ssize_t i = 0; i < n; i++)
        keys[i] = (ld64(starts + 8 * i) << 32) | (uint64_t)i;
    int bits = 0;
    while (bits < 32 && (max_start >> bits))
        bits++;
    for (int shift = 32; shift < 32 + bits; shift += RADIX_BITS) {
        memset(count, 0, sizeof count);
        for (Py_ssize_t i = 0; i < n; i++)
            count[((keys[i] >> shift) & (uint64_t)(R - 1)) + 1]++;
        for (Py_ssize_t b = 0; b < R; b++)
            count[b + 1] += count[b];
        for (Py_ssize_t i = 0; i < n; i++)
            tmp[count[(keys[i] >> shift) & (uint64_t)(R - 1)]++] = keys[i];
        uint64_t *swap = keys;
        keys = tmp, tmp = swap;
    }
    return keys;
}

static int encode_rows(enc_t *e) {
    const Py_ssize_t n = e->n, W = e->W, Wp = W + 1, w = 64 * W;
    if ((e->bad = bad_start(e->starts, n, (int64_t)(e->m - w))) >= 0)
        return ENC_BAD_START;
    /* the rows in the order of their starts (stable: rows with one start keep their input order), each
     * placed at its absolute word offset; the reads of bands and values are random, prefetched ahead */
    const uint64_t *sorted = sort_by_start(e->starts, n, (int64_t)(e->m - w), e->keys, e->tmp);
    for (Py_ssize_t r = 0; r < n; r++) {
#if defined(__GNUC__) || defined(__clang__)
        if (r + 16 < n) {
            Py_ssize_t ahead = (Py_ssize_t)(sorted[r + 16] & 0xffffffffu);
            __builtin_prefetch(e->bands + 8 * W * ahead);
            __builtin_prefetch(e->values + 16 * ahead);
        }
#endif
        Py_ssize_t i = (Py_ssize_t)(sorted[r] & 0xffffffffu);
        int64_t s = (int64_t)(sorted[r] >> 32);
        unsigned sh = (unsigned)(s & 63);
        const uint8_t *band = e->bands + 8 * W * i;
        uint64_t *row = e->rows + Wp * r, prev = 0;
        for (Py_ssize_t k = 0; k < W; k++) {
            uint64_t word = ld64(band + 8 * k);
            row[k] = (word << sh) | (sh ? prev >> (64 - sh) : 0);
            prev = word;
        }
        row[W] = sh ? prev >> (64 - sh) : 0;
        e->rs[r] = s;
        memcpy(e->vals + 16 * r, e->values + 16 * i, 16);
    }
    /* forward elimination */
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint64_t *ri = e->rows + Wp * i;
        int k = first_set(ri, Wp);
        if (k < 0)
            return ENC_SINGULAR;
        int64_t pw = (e->rs[i] >> 6) + k; /* absolute word of the pivot */
        int64_t p = 64 * pw + ctz64(ri[k]);
        uint64_t pbit = ri[k] & (~ri[k] + 1);
        const uint64_t *src = ri + k;
        Py_ssize_t len = Wp - k; /* row i's words from the pivot's on */
        elem_t vi = el_load(e->vals + 16 * i);
        for (Py_ssize_t j = i + 1; j < n && e->rs[j] <= p; j++) {
            uint64_t *rj = e->rows + Wp * j + (pw - (e->rs[j] >> 6)); /* row j's word holding column p */
            if (!(rj[0] & pbit))
                continue;
            for (Py_ssize_t t = 0; t < len; t++) /* fits: offset + len = Wp - (s_j/64 - s_i/64) <= Wp */
                rj[t] ^= src[t];
            el_store(e->vals + 16 * j, el_xor(el_load(e->vals + 16 * j), vi));
        }
    }
    /* back-substitution */
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        const uint64_t *ri = e->rows + Wp * i;
        int k = first_set(ri, Wp);
        int64_t bw = e->rs[i] >> 6;
        uint64_t first = ri[k];
        int64_t p = 64 * (bw + k) + ctz64(first);
        elem_t acc = el_load(e->vals + 16 * i);
        for (Py_ssize_t t = k; t < Wp; t++) {
            uint64_t word = t == k ? first & (first - 1) : ri[t]; /* the pivot itself excluded */
            const uint8_t *base = e->P + 16 * 64 * (bw + t);
            for (; word; word &= word - 1)
                acc = el_xor(acc, el_load(base + 16 * ctz64(word)));
        }
        el_store(e->P + 16 * p, acc);
    }
    return ENC_OK;
}

static PyObject *okvs_encode(PyObject *self, PyObject *args) {
    Py_buffer starts, bands, values, fill = {0};
    Py_ssize_t m, w;
    if (!PyArg_ParseTuple(args, "y*y*y*nn|y*", &starts, &bands, &values, &m, &w, &fill))
        return NULL;
    PyObject *result = NULL;
    enc_t e = {0};
    int status;
    Py_ssize_t n = check_common(w, m, &starts, &bands);
    if (n < 0)
        goto out;
    if (values.len != 16 * n) {
        PyErr_Format(PyExc_ValueError, "values must be n = %zd 16-byte values (%zd bytes), got %zd bytes", n, 16 * n,
                     values.len);
        goto out;
    }
    if (fill.obj && fill.len != 16 * m) {
        PyErr_Format(PyExc_ValueError, "fill must be m = %zd 16-byte values (%zd bytes), got %zd bytes", m, 16 * m,
                     fill.len);
        goto out;
    }
    if (!(result = PyBytes_FromStringAndSize(NULL, 16 * m)))
        goto out;
    e.n = n, e.m = m, e.W = w / 64;
    e.starts = starts.buf, e.bands = bands.buf, e.values = values.buf;
    e.P = (uint8_t *)PyBytes_AS_STRING(result);
    if (fill.obj) /* the free columns keep these; every pivot column is overwritten */
        memcpy(e.P, fill.buf, (size_t)(16 * m));
    else
        memset(e.P, 0, (size_t)(16 * m));
    if (n == 0)
        goto out;
    if ((uint64_t)n > 0xffffffffu || (uint64_t)(m - w) > 0xffffffffu) { /* the sort keys' two 32-bit halves */
        PyErr_Format(PyExc_ValueError, "encoding takes at most 2^32 rows and starts below 2^32, got %zd rows and "
                     "m - w = %zd", n, m - w);
        Py_CLEAR(result);
        goto out;
    }
    e.keys = malloc(sizeof(uint64_t) * (size_t)n);
    e.tmp = malloc(sizeof(uint64_t) * (size_t)n);
    e.rs = malloc(sizeof(int64_t) * (size_t)n);
    e.rows = malloc(sizeof(uint64_t) * (size_t)(e.W + 1) * (size_t)n);
    e.vals = malloc(16 * (size_t)n);
    if (!e.keys || !e.tmp || !e.rs || !e.rows || !e.vals) {
        PyErr_NoMemory();
        Py_CLEAR(result);
        goto out;
    }
    Py_BEGIN_ALLOW_THREADS
    status = encode_rows(&e);
    Py_END_ALLOW_THREADS
    if (status == ENC_BAD_START)
        PyErr_Format(PyExc_ValueError, "start %lld of row %zd is outside 0..m-w = 0..%zd",
                     (long long)(int64_t)ld64(e.starts + 8 * e.bad), e.bad, m - w);
    else if (status == ENC_SINGULAR)
        PyErr_SetString(SingularError, "the band system is singular (a row is a combination of others)");
    if (status != ENC_OK)
        Py_CLEAR(result);
out:
    free(e.keys), free(e.tmp), free(e.rs), free(e.rows), free(e.vals);
    PyBuffer_Release(&starts), PyBuffer_Release(&bands), PyBuffer_Release(&values);
    if (fill.obj)
        PyBuffer_Release(&fill);
    return result;
}

static PyObject *simd(PyObject *self, PyObject *unused) { return PyUnicode_FromString(simd_name); }


/*
 * Rows: each key's start, band and value from its 16-byte hash h0, as vflcrypto.psi.okvs.rows
 * computes them in numpy over OpenSSL's AES (that function's docstring is the definition):
 * B_c = AES_key(h0 XOR c in byte 0) for c = 0 .. 1 + w/128; the start is B_0's low 64 bits mod
 * (m - w + 1), the band is B_1 .. B_{w/128} with bit 0 set, the value the last block. Here with
 * AES-NI, all of a key's blocks in flight at once and two keys interleaved, writing each output
 * once: the numpy version makes about ten passes over arrays of 56 bytes a key.
 */
#if HAVE_AESNI
#define ROW_BLOCKS_MAX (2 + 512 / 128)
__attribute__((target("aes,sse2"))) static void rows_aes(const aes_key *ks, const uint8_t *h0, Py_ssize_t n,
                                                         int W, uint64_t range, int64_t *starts, uint64_t *bands,
                                                         uint8_t *values) {
    const int blocks = 2 + W / 2; /* B_0, the band's W/2 blocks, the value */
    for (Py_ssize_t i = 0; i < n; i++) {
        __m128i x = _mm_loadu_si128((const __m128i *)(h0 + 16 * i)), b[ROW_BLOCKS_MAX];
        for (int c = 0; c < blocks; c++)
            b[c] = _mm_xor_si128(_mm_xor_si128(x, _mm_cvtsi32_si128(c)), ks->k[0]);
        for (int r = 1; r < 10; r++)
            for (int c = 0; c < blocks; c++)
                b[c] = _mm_aesenc_si128(b[c], ks->k[r]);
        for (int c = 0; c < blocks; c++)
            b[c] = _mm_aesenclast_si128(b[c], ks->k[10]);
        starts[i] = (int64_t)((uint64_t)_mm_cvtsi128_si64(b[0]) % range);
        uint64_t *band = bands + (size_t)W * (size_t)i;
        for (int c = 1; c < blocks - 1; c++)
            _mm_storeu_si128((__m128i *)(band + 2 * (c - 1)), b[c]);
        band[0] |= 1;
        _mm_storeu_si128((__m128i *)(values + 16 * i), b[blocks - 1]);
    }
}
#endif

static PyObject *okvs_rows(PyObject *self, PyObject *args) {
    Py_buffer h0, key;
    Py_ssize_t m, w;
    if (!PyArg_ParseTuple(args, "y*y*nn", &h0, &key, &m, &w))
        return NULL;
    PyObject *starts = NULL, *bands = NULL, *values = NULL, *result = NULL;
    Py_ssize_t n = h0.len / 16;
    if (h0.len % 16 || key.len != 16 || w < 128 || w > 512 || w % 128 || m < w) {
        PyErr_SetString(PyExc_ValueError, "rows: n 16-byte hashes, a 16-byte key, w a multiple of 128 up to 512, "
                                          "m >= w");
        goto out;
    }
#if HAVE_AESNI
    __builtin_cpu_init();
    if (__builtin_cpu_supports("aes")) {
        if (!(starts = PyByteArray_FromStringAndSize(NULL, 8 * n)) ||
            !(bands = PyByteArray_FromStringAndSize(NULL, (w / 8) * n)) ||
            !(values = PyByteArray_FromStringAndSize(NULL, 16 * n)))
            goto out;
        aes_key ks;
        aes_schedule(key.buf, &ks);
        Py_BEGIN_ALLOW_THREADS
        rows_aes(&ks, h0.buf, n, (int)(w / 64), (uint64_t)(m - w + 1), (int64_t *)PyByteArray_AS_STRING(starts),
                 (uint64_t *)PyByteArray_AS_STRING(bands), (uint8_t *)PyByteArray_AS_STRING(values));
        Py_END_ALLOW_THREADS
        result = PyTuple_Pack(3, starts, bands, values);
        goto out;
    }
#endif
    result = Py_NewRef(Py_None); /* no AES instructions here: the caller's numpy path */
out:
    Py_XDECREF(starts), Py_XDECREF(bands), Py_XDECREF(values);
    PyBuffer_Release(&h0), PyBuffer_Release(&key);
    return result;
}

static PyMethodDef methods[] = {
    {"encode", okvs_encode, METH_VARARGS,
     "encode(starts, bands, values, m, w[, fill]) -> bytes\n\n"
     "P (m * 16 bytes) with decode(P, starts, bands, w) == values: banded Gaussian elimination over GF(2).\n"
     "starts: n int64 in 0..m-w; bands: n * w/64 uint64 (bit k of a band = bit k%64 of word k//64);\n"
     "values: n * 16 bytes; w a multiple of 64 from 64 to 512. Columns that are no row's pivot are zero,\n"
     "or the same columns of fill (m * 16 bytes) when given.\n"
     "Raises SingularError when a row eliminates to zero (linearly dependent rows), ValueError on bad\n"
     "lengths or starts. Works on copies; releases the GIL."},
    {"decode", okvs_decode, METH_VARARGS,
     "decode(P, starts, bands, w) -> bytes\n\n"
     "For each row, the XOR of P[s + k] (16 bytes each) over the set bits k of its band; n * 16 bytes.\n"
     "Raises ValueError on bad lengths or starts. Releases the GIL."},
    {"rows", okvs_rows, METH_VARARGS,
     "rows(h0, key, m, w) -> (starts, bands, values) | None\n\n"
     "vflcrypto.psi.okvs.rows with the CPU's AES instructions (int64 starts, n * w/64 uint64 band words and\n"
     "n * 16 value bytes, as bytearrays), or None where the CPU has none. w a multiple of 128 up to 512.\n"
     "Releases the GIL."},
    {"simd", simd, METH_NOARGS,
     "simd() -> 'avx512', 'avx2' or 'scalar': how decode XORs a row's band here\n"
     "(chosen at import from the CPU; VFLCRYPTO_SIMD=0 at import forces 'scalar', =avx2 at most AVX2)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_okvs",
                                    "Random-band OKVS (Bienstock-Patel-Seo-Yeo 2023) over 16-byte values.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__okvs(void) {
    int cap = simd_cap(); /* _simd.h: VFLCRYPTO_SIMD */
#if HAVE_X86_SIMD
    __builtin_cpu_init();
    /* __builtin_cpu_supports also checks that the OS saves the vector registers (XCR0) */
    if (cap >= SIMD_AVX512 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("bmi2"))
        decode_rows = decode_rows_avx512, simd_name = "avx512";
    else if (cap >= SIMD_AVX2 && __builtin_cpu_supports("avx2"))
        decode_rows = decode_rows_avx2, simd_name = "avx2";
#endif
    (void)cap;
    PyObject *mod = PyModule_Create(&module);
    if (!mod)
        return NULL;
    if (!SingularError &&
        !(SingularError = PyErr_NewExceptionWithDoc(
              "vflcrypto.psi._okvs.SingularError",
              "The band system has linearly dependent rows: no encoding exists for these rows.", NULL, NULL))) {
        Py_DECREF(mod);
        return NULL;
    }
    Py_INCREF(SingularError);
    if (PyModule_AddObject(mod, "SingularError", SingularError) < 0) {
        Py_DECREF(SingularError);
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
