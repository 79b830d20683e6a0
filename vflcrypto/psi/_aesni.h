/*
 * AES-128 with the CPU's AES instructions, for the C extensions that evaluate AES as a PRF on many
 * independent blocks (_vole.c's GGM trees, _okvs.c's rows): the key schedule, here; the rounds are
 * inlined by each caller, which interleaves several blocks to fill the AES unit's pipeline.
 *
 * Only on x86 with GCC or Clang (function attributes: the build needs no -march); callers check
 * __builtin_cpu_supports("aes") at run time and keep another path (numpy over OpenSSL's AES) for
 * CPUs without it. The blocks' bytes are AES's: the tests compare them with OpenSSL's.
 */
#ifndef VFLCRYPTO_AESNI_H
#define VFLCRYPTO_AESNI_H

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AESNI 1
#include <immintrin.h>
#include <stdint.h>

typedef struct {
    __m128i k[11];
} aes_key;

__attribute__((target("aes,sse2"))) static inline __m128i aes_expand_step(__m128i key, __m128i gen) {
    gen = _mm_shuffle_epi32(gen, 0xff);
    key = _mm_xor_si128(key, _mm_slli_si128(key, 4));
    key = _mm_xor_si128(key, _mm_slli_si128(key, 4));
    key = _mm_xor_si128(key, _mm_slli_si128(key, 4));
    return _mm_xor_si128(key, gen);
}

/* the 11 round keys of the 16-byte key `raw` */
__attribute__((target("aes,sse2"))) static inline void aes_schedule(const uint8_t *raw, aes_key *ks) {
    __m128i k = _mm_loadu_si128((const __m128i *)raw);
    ks->k[0] = k;
#define AES_STEP(i, rcon) k = aes_expand_step(k, _mm_aeskeygenassist_si128(k, rcon)); ks->k[i] = k;
    AES_STEP(1, 0x01) AES_STEP(2, 0x02) AES_STEP(3, 0x04) AES_STEP(4, 0x08) AES_STEP(5, 0x10)
    AES_STEP(6, 0x20) AES_STEP(7, 0x40) AES_STEP(8, 0x80) AES_STEP(9, 0x1b) AES_STEP(10, 0x36)
#undef AES_STEP
}
#else
#define HAVE_AESNI 0
#endif

#endif /* VFLCRYPTO_AESNI_H */
