/* What generated C (switch/compile_c.py) calls per packet besides its own code.
 *
 * The native twin of switch/runtime.py, switch/hashes.py and the lookup half of
 * switch/tables.py: bit extraction and packing (MSB first, as BMv2 and pack_bits do),
 * BMv2's hash algorithms bit for bit, first-match table scans over entries the Python
 * side orders (switch/native.py), and the random source. Values live in a field vector
 * of uint64 slots laid out as switch/layout.py lays out the Python one; expressions are
 * evaluated in 128 bits, so an intermediate result that Python keeps exact and p4c masks
 * afterwards (a 64-bit field shifted left) is exact here too.
 */
#define _GNU_SOURCE  /* recvmmsg, sendmmsg, epoll_pwait2 (native_loop.c) */
#include <stdint.h>
#include <string.h>

typedef unsigned __int128 u128;
typedef uint64_t u64;

/* Per-packet state besides the field vector: runtime.Pkt, one u64 per attribute. */
typedef struct {
    const uint8_t *data;
    u64 len;           /* bytes in data */
    u64 pos;           /* the parser's position in data */
    u64 length;        /* packet_length as the program changes it (add/remove header) */
    u64 error;         /* parser error code, 0: none */
    u64 cksum_error;
    u64 learn_id;      /* generate_digest's learn list, 0: none */
    u64 clone_session;
    u64 clone_fl;
    u64 resubmit;
    u64 recirculate;
    u64 truncate;
    u64 exit;
    u64 fault;         /* an assert/assume failed: the packet is dropped (AssertionFailure) */
} ect_pkt;

/* One key field of one entry matches when (value & mask) lies in [lo, hi]: exact, lpm,
 * ternary, optional and valid have lo == hi; range has mask all ones. */
typedef struct {
    u64 lo, hi, mask;
} ect_match;

/* A table's entries in the order the first match wins (tables.Table's order), and what
 * each runs: `count` calls from `first` (a selector group picks one by hash; count 0 runs
 * nothing). A call is an action id and `data_stride` action-data values. */
typedef struct {
    int64_t n_entries;
    int64_t n_keys;
    const ect_match *match;
    const int64_t *first;
    const int64_t *count;
    const int64_t *group;
    const int64_t *action;
    const u64 *data;
    int64_t data_stride;
    int64_t default_first;
    int64_t default_count;
} ect_table;

static const u128 ECT_ONE = 1;

static inline u128 ect_mask(unsigned width) {
    return width >= 128 ? ~(u128)0 : (ECT_ONE << width) - 1;
}

static inline u128 ect_shl(u128 x, u128 n) { return n >= 128 ? 0 : x << (unsigned)n; }
static inline u128 ect_shr(u128 x, u128 n) { return n >= 128 ? 0 : x >> (unsigned)n; }

/* `width` (<= 64) bits of p starting `bitoff` bits in, most significant first. */
static inline u64 ect_get_bits(const uint8_t *p, unsigned bitoff, unsigned width) {
    unsigned first = bitoff >> 3, last = (bitoff + width - 1) >> 3;
    u128 acc = 0;
    for (unsigned i = first; i <= last; i++) acc = (acc << 8) | p[i];
    unsigned trail = (last + 1) * 8 - (bitoff + width);
    return (u64)((acc >> trail) & ect_mask(width));
}

/* OR `width` (<= 64) bits of v into p at `bitoff` (p zeroed beforehand). */
static inline void ect_put_bits(uint8_t *p, unsigned bitoff, unsigned width, u128 v) {
    unsigned first = bitoff >> 3, last = (bitoff + width - 1) >> 3;
    u128 acc = (v & ect_mask(width)) << ((last + 1) * 8 - (bitoff + width));
    for (int i = (int)last; i >= (int)first; i--) {
        p[i] |= (uint8_t)acc;
        acc >>= 8;
    }
}

/* hashes.pack_bits: fields concatenated MSB first, zero-padded to a byte boundary. */
typedef struct {
    uint8_t *buf;
    unsigned nbits;
} ect_packer;

static inline void ect_pack(ect_packer *pk, u128 v, unsigned width) {
    for (unsigned done = 0; done < width;) {  /* 64 bits at a time, most significant first */
        unsigned n = width - done > 64 ? 64 : width - done;
        ect_put_bits(pk->buf, pk->nbits, n, v >> (width - done - n));
        pk->nbits += n;
        done += n;
    }
}

/* -- BMv2's hash algorithms (src/bm_sim/calculations.cpp), as switch/hashes.py ------------ */

static u64 ect_crc_reflected(const uint8_t *d, unsigned n, unsigned width, u64 poly_reflected,
                             u64 init, u64 xor_out) {
    u64 rem = init;
    for (unsigned i = 0; i < n; i++) {
        rem ^= d[i];
        for (int b = 0; b < 8; b++) rem = (rem & 1) ? (rem >> 1) ^ poly_reflected : rem >> 1;
    }
    return (rem ^ xor_out) & (u64)ect_mask(width);
}

static u64 ect_crc_plain(const uint8_t *d, unsigned n, unsigned width, u64 poly, u64 init,
                         u64 xor_out) {
    u64 top = (u64)1 << (width - 1), m = (u64)ect_mask(width), rem = init;
    for (unsigned i = 0; i < n; i++) {
        rem ^= (u64)d[i] << (width - 8);
        for (int b = 0; b < 8; b++) rem = (rem & top) ? ((rem << 1) ^ poly) & m : (rem << 1) & m;
    }
    return (rem ^ xor_out) & m;
}

static u64 ect_crc16(const uint8_t *d, unsigned n) { return ect_crc_reflected(d, n, 16, 0xA001, 0, 0); }
static u64 ect_crc32(const uint8_t *d, unsigned n) {
    return ect_crc_reflected(d, n, 32, 0xEDB88320, 0xFFFFFFFF, 0xFFFFFFFF);
}
static u64 ect_crc_ccitt(const uint8_t *d, unsigned n) { return ect_crc_plain(d, n, 16, 0x1021, 0xFFFF, 0); }
static u64 ect_crc8(const uint8_t *d, unsigned n) { return ect_crc_plain(d, n, 8, 0x07, 0, 0); }

static u64 ect_csum16(const uint8_t *d, unsigned n) {
    u64 total = 0;
    for (unsigned i = 0; i < n; i += 2) total += ((u64)d[i] << 8) | (i + 1 < n ? d[i + 1] : 0);
    while (total >> 16) total = (total & 0xFFFF) + (total >> 16);
    return ~total & 0xFFFF;
}

static u64 ect_xor16(const uint8_t *d, unsigned n) {
    u64 out = 0;
    for (unsigned i = 0; i < n; i += 2) out ^= ((u64)d[i] << 8) | (i + 1 < n ? d[i + 1] : 0);
    return out;
}

static u64 ect_identity(const uint8_t *d, unsigned n) {
    u64 out = 0;
    for (unsigned i = 0; i < n && i < 8; i++) out = (out << 8) | d[i];
    return out;
}

/* -- tables ------------------------------------------------------------------------------- */

/* The index of the first entry matching `key`, or -1. */
static inline int64_t ect_lookup(const ect_table *t, const u64 *key) {
    const ect_match *m = t->match;
    for (int64_t e = 0; e < t->n_entries; e++, m += t->n_keys) {
        int64_t k = 0;
        for (; k < t->n_keys; k++) {
            u64 v = key[k] & m[k].mask;
            if (v < m[k].lo || v > m[k].hi) break;
        }
        if (k == t->n_keys) return e;
    }
    return -1;
}

/* The call an entry (or the default, e < 0) runs, -1 for none; `hash` picks a group's member
 * (BMv2: hash % size). `has_hash` is 0 where the table has no selector. */
static inline int64_t ect_call(const ect_table *t, int64_t e, u64 hash) {
    int64_t first = e >= 0 ? t->first[e] : t->default_first;
    int64_t count = e >= 0 ? t->count[e] : t->default_count;
    if (count <= 0) return -1;
    if (e >= 0 && t->group[e]) return first + (int64_t)(hash % (u64)count);
    return first;
}

/* -- the random source of modify_field_rng_uniform: xorshift64*, seedable for tests ------- */

static u64 ect_rng_state = 0x9E3779B97F4A7C15ULL;

void ect_seed(u64 seed) { ect_rng_state = seed ? seed : 0x9E3779B97F4A7C15ULL; }

static inline u64 ect_rand(void) {
    u64 x = ect_rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    ect_rng_state = x;
    return x * 0x2545F4914F6CDD1DULL;
}
