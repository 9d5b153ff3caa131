/* A decoder for OTLP/JSON trace exports as collectors and SDKs write them, straight into typed columns.
 *
 * It vouches only for what it can check, like the DuckDB fast path it sits in front of: a batch is decoded
 * whole, or not at all ("bailed") and left to the slower paths, which decide (and word the error when the
 * batch is bad). What bails: anything that is not valid JSON, a span whose ids, times, kind or status are not
 * in the plain form producers write (hex ids, integer times, enum numbers or names), a nested array or
 * key/value-list attribute, a double it cannot print exactly as the path it stands for does, a null where a
 * value should be, an escaped NUL, fields in an unexpected order, and a `"spanId"` key anywhere but in a span of
 * `resourceSpans[].scopeSpans[].spans[]` or an event (a link, or spans under a key it does not know).
 *
 * The columns are those of the `spans` table less `source`, and each value is byte for byte what the path the
 * batch takes without this decoder stores for the same span. For a batch without span events that is the
 * DuckDB path (jsonsql.py): attributes and resource as one JSON object, strings escaped as yyjson escapes
 * them, ints without leading zeros, doubles in yyjson's shortest plain form. A batch with span events is the
 * reference decoder's alone (otlp_json.py; the DuckDB path hands it on): its spans are written as that path
 * stores them ("reference form", see `orj`), the events of each under `budgetscope.events` in its attributes
 * ({"name", "time_unix_nano", "attributes"}, in the order sent); what that form adds to the bails: a key twice
 * in one attribute list, an event member twice, an event time that is not a plain integer orjson can write,
 * an attribute named `budgetscope.events` beside events.
 *
 * The GIL is released while decoding, so the ingest reader thread decodes the next chunk while DuckDB lands
 * this one.
 *
 * The same module decodes OTLP protobuf exports into the same columns (`decode_proto`, in _otlpproto.c,
 * included below), to what the reference path stores for them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <math.h>
#include <sys/mman.h> /* mremap: _GNU_SOURCE comes with Python.h */

/* ---------------------------------------------------------------------------------------------------------- */
/* growable buffers */

/* Buffers of a megabyte or more are mapped from the system and unmapped when freed, not taken from malloc:
 * a chunk's columns and read blocks come and go by the hundred megabytes, from two threads, and in malloc's
 * arenas they fragmented (peak RSS 2.3 GB instead of 1.6 GB for a 3M-span file here). */
#define MAP_MIN ((size_t)1 << 20)

typedef struct {
    char *p;
    size_t len, cap;
    int mapped;
} Buf;

static int oom = 0; /* set when an allocation fails; checked after each batch (under `lock`) */

static char *map_bytes(size_t *cap) {
#ifdef MAP_ANONYMOUS
    size_t len = (*cap + 4095) & ~(size_t)4095;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    *cap = len;
    return p;
#else
    (void)cap;
    return NULL;
#endif
}

static int buf_grow(Buf *b, size_t need) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + need) cap *= 2;
    char *p = NULL;
    int mapped = 0;
    if (cap >= MAP_MIN) {
#if defined(MREMAP_MAYMOVE)
        if (b->mapped) { /* the kernel moves the pages; nothing is copied */
            size_t len = (cap + 4095) & ~(size_t)4095;
            void *q = mremap(b->p, b->cap, len, MREMAP_MAYMOVE);
            if (q != MAP_FAILED) {
                b->p = q;
                b->cap = len;
                return 0;
            }
        }
#endif
        if ((p = map_bytes(&cap))) {
            mapped = 1;
            if (b->len) memcpy(p, b->p, b->len);
#ifdef MAP_ANONYMOUS
            if (b->mapped) munmap(b->p, b->cap);
            else
#endif
                free(b->p);
        }
    }
    if (!p && !b->mapped && !(p = realloc(b->p, cap))) {
        oom = 1;
        return -1;
    }
    if (!p) { /* a mapped buffer that could not grow */
        oom = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    b->mapped = mapped;
    return 0;
}

static void buf_free(Buf *b) {
#ifdef MAP_ANONYMOUS
    if (b->mapped) munmap(b->p, b->cap);
    else
#endif
        free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    b->mapped = 0;
}

static inline int buf_put(Buf *b, const void *s, size_t n) {
    if (!n) return 0; /* memcpy to a buffer not yet allocated (NULL), even of 0 bytes, is undefined */
    if (b->len + n > b->cap && buf_grow(b, n)) return -1;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    return 0;
}

static inline int buf_putc(Buf *b, char c) {
    if (b->len + 1 > b->cap && buf_grow(b, 1)) return -1;
    b->p[b->len++] = c;
    return 0;
}

static inline int buf_i64(Buf *b, int64_t v) { return buf_put(b, &v, sizeof v); }

/* A string column: int64 offsets (one more than rows), data, one validity byte per row. */
typedef struct {
    Buf off, data, valid;
} StrCol;

static int col_init(StrCol *c) { return buf_i64(&c->off, 0); }

/* Ends the current row: its bytes are data[last offset .. data.len). */
static inline int col_end(StrCol *c, int valid) {
    if (buf_i64(&c->off, (int64_t)c->data.len)) return -1;
    return buf_putc(&c->valid, (char)valid);
}

enum { C_TRACE, C_SPAN, C_PARENT, C_NAME, C_KIND, C_SERVICE, C_SCOPE, C_STATUS, C_ATTRS, C_RESOURCE, N_STR };
enum { I_BATCH, I_START, I_END, N_INT };

typedef struct {
    StrCol s[N_STR];
    Buf i[N_INT];
    int64_t rows;
} Out;

typedef struct {
    size_t s_off[N_STR], s_data[N_STR], s_valid[N_STR], i[N_INT];
    int64_t rows;
} Mark;

static void out_mark(Out *o, Mark *m) {
    for (int k = 0; k < N_STR; k++) {
        m->s_off[k] = o->s[k].off.len;
        m->s_data[k] = o->s[k].data.len;
        m->s_valid[k] = o->s[k].valid.len;
    }
    for (int k = 0; k < N_INT; k++) m->i[k] = o->i[k].len;
    m->rows = o->rows;
}

static void out_reset(Out *o, const Mark *m) {
    for (int k = 0; k < N_STR; k++) {
        o->s[k].off.len = m->s_off[k];
        o->s[k].data.len = m->s_data[k];
        o->s[k].valid.len = m->s_valid[k];
    }
    for (int k = 0; k < N_INT; k++) o->i[k].len = m->i[k];
    o->rows = m->rows;
}

static void out_free(Out *o) {
    for (int k = 0; k < N_STR; k++) {
        buf_free(&o->s[k].off);
        buf_free(&o->s[k].data);
        buf_free(&o->s[k].valid);
    }
    for (int k = 0; k < N_INT; k++) buf_free(&o->i[k]);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* the keys of one attribute list */

#define EVENTS_KEY "budgetscope.events" /* the attribute the reference decoders keep span events under (schema.py) */

static inline uint64_t fmix64(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

/* The keys of one attribute list. The reference decoders keep attributes in a dict, which holds a repeated key at
 * its first place with its last value: not reproduced here, so a repeat bails. A few keys are compared in turn,
 * many through a hash table. The set keeps its own copy of each key's text (a JSON key's decoded text lives in
 * a scratch buffer). Two sets: a span's attributes and, beside them, those of one of its events. */

typedef struct {
    size_t off, n; /* the text, in the set's `text` */
    uint64_t h;
} Key;

typedef struct {
    Key *keys;
    size_t n, cap;
    Buf text;
    uint32_t *tab; /* indexes into keys, + 1; 0 = empty */
    size_t size, alloc; /* slots in use (a power of two), slots allocated */
} KeySet;

static KeySet span_keys, event_keys;
#define KS_LINEAR 16

static inline void ks_reset(KeySet *ks) { ks->n = ks->text.len = 0; }

static inline uint64_t key_hash(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL ^ n;
    for (size_t k = 0; k < n; k++) h = (h ^ p[k]) * 0x100000001b3ULL;
    return fmix64(h);
}

static inline int key_is(const KeySet *ks, const Key *k, const void *p, size_t n) {
    return k->n == n && (n == 0 || memcmp(ks->text.p + k->off, p, n) == 0);
}

/* A table of `size` slots over the keys held. */
static int ks_table(KeySet *ks, size_t size) {
    if (size > ks->alloc) {
        uint32_t *t = realloc(ks->tab, size * sizeof *t);
        if (!t) {
            oom = 1;
            return -1;
        }
        ks->tab = t;
        ks->alloc = size;
    }
    ks->size = size;
    memset(ks->tab, 0, size * sizeof *ks->tab);
    for (size_t k = 0; k < ks->n; k++) {
        size_t i = (size_t)ks->keys[k].h & (size - 1);
        while (ks->tab[i]) i = (i + 1) & (size - 1);
        ks->tab[i] = (uint32_t)(k + 1);
    }
    return 0;
}

/* Add a key of the current list; -1 when it is there already (or memory ran out). */
static int ks_add(KeySet *ks, const unsigned char *p, size_t n) {
    if (ks->n == ks->cap) {
        size_t cap = ks->cap ? 2 * ks->cap : 64;
        Key *k = cap < UINT32_MAX / 4 ? realloc(ks->keys, cap * sizeof *k) : NULL;
        if (!k) {
            oom = 1;
            return -1;
        }
        ks->keys = k;
        ks->cap = cap;
    }
    uint64_t h = 0;
    if (ks->n < KS_LINEAR) {
        for (size_t k = 0; k < ks->n; k++)
            if (key_is(ks, &ks->keys[k], p, n)) return -1;
    } else {
        if (ks->n == KS_LINEAR) { /* from here on, through a hash table */
            for (size_t k = 0; k < ks->n; k++)
                ks->keys[k].h = key_hash((const unsigned char *)ks->text.p + ks->keys[k].off, ks->keys[k].n);
            if (ks_table(ks, 4 * KS_LINEAR)) return -1;
        } else if (2 * (ks->n + 1) > ks->size && ks_table(ks, 2 * ks->size))
            return -1;
        h = key_hash(p, n);
        size_t i = (size_t)h & (ks->size - 1);
        while (ks->tab[i]) {
            const Key *o = &ks->keys[ks->tab[i] - 1];
            if (o->h == h && key_is(ks, o, p, n)) return -1;
            i = (i + 1) & (ks->size - 1);
        }
        ks->tab[i] = (uint32_t)(ks->n + 1);
    }
    ks->keys[ks->n++] = (Key){ks->text.len, n, h};
    return buf_put(&ks->text, p, n);
}

/* 1 when the list holds the key. */
static int ks_has(const KeySet *ks, const char *p, size_t n) {
    for (size_t k = 0; k < ks->n; k++)
        if (key_is(ks, &ks->keys[k], p, n)) return 1;
    return 0;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* the scanner: every function returns 0, or -1 to bail out of the batch */

#define BAIL (-1)
#define TRY(x)                         \
    do {                               \
        if ((x) < 0) return BAIL;      \
    } while (0)

typedef struct {
    const unsigned char *p, *end;
    int depth;
} P;

static inline void ws(P *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t')) s->p++;
}

static inline int expect(P *s, char c) {
    ws(s);
    if (s->p >= s->end || *s->p != (unsigned char)c) return BAIL;
    s->p++;
    return 0;
}

/* 1 when the next non-blank byte is c (consumed), else 0. */
static inline int accept(P *s, char c) {
    ws(s);
    if (s->p < s->end && *s->p == (unsigned char)c) {
        s->p++;
        return 1;
    }
    return 0;
}

static inline int peek(P *s) {
    ws(s);
    return s->p < s->end ? *s->p : -1;
}

/* A JSON string as it lies in the payload, between its quotes. */
typedef struct {
    const unsigned char *raw;
    size_t len;
    int escaped; /* holds a backslash escape */
} Str;

/* Length of the valid UTF-8 sequence starting at p (first byte >= 0x80), or 0. */
static inline int utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0];
    if (c >= 0xC2 && c <= 0xDF) {
        if (end - p >= 2 && (p[1] & 0xC0) == 0x80) return 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        if (end - p >= 3 && (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80) {
            if (c == 0xE0 && p[1] < 0xA0) return 0; /* overlong */
            if (c == 0xED && p[1] >= 0xA0) return 0; /* surrogate */
            return 3;
        }
    } else if (c >= 0xF0 && c <= 0xF4) {
        if (end - p >= 4 && (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80 && (p[3] & 0xC0) == 0x80) {
            if (c == 0xF0 && p[1] < 0x90) return 0;
            if (c == 0xF4 && p[1] >= 0x90) return 0;
            return 4;
        }
    }
    return 0;
}

static inline int hexval(unsigned c) {
    if (c >= '0' && c <= '9') return (int)(c - '0');
    if (c >= 'a' && c <= 'f') return (int)(c - 'a' + 10);
    if (c >= 'A' && c <= 'F') return (int)(c - 'A' + 10);
    return -1;
}

static int hex4(const unsigned char *p, const unsigned char *end, unsigned *v) {
    if (end - p < 4) return BAIL;
    unsigned x = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(p[k]);
        if (h < 0) return BAIL;
        x = x * 16 + (unsigned)h;
    }
    *v = x;
    return 0;
}

/* Past the bytes that need no escaping, 16 at a time: stops at (or up to 15 bytes before) the first quote,
 * backslash, control byte or byte >= 0x80 (a signed compare: those are negative, so below 0x20 too). Shared
 * by the JSON reader and the protobuf decoder's JSON writer; each finishes byte by byte. */
static inline const unsigned char *skip_plain16(const unsigned char *p, const unsigned char *end) {
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    while (end - p >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)p);
        __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, bslash)),
                                   _mm_cmplt_epi8(x, space));
        int mask = _mm_movemask_epi8(hit);
        if (mask) return p + __builtin_ctz((unsigned)mask);
        p += 16;
    }
#else
    (void)end;
#endif
    return p;
}

static int string(P *s, Str *out) {
    TRY(expect(s, '"'));
    const unsigned char *p = s->p, *end = s->end;
    int escaped = 0;
    for (;;) {
        /* the common bytes first: printable ASCII that is neither quote nor backslash */
        p = skip_plain16(p, end);
        while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\') p++;
        if (p >= end) return BAIL;
        unsigned c = *p;
        if (c == '"') break;
        if (c == '\\') {
            escaped = 1;
            if (end - p < 2) return BAIL;
            unsigned e = p[1];
            if (e == 'u') {
                unsigned cp;
                TRY(hex4(p + 2, end, &cp));
                p += 6;
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't')
                p += 2;
            else
                return BAIL;
            continue;
        }
        if (c < 0x20) return BAIL;
        int n = utf8_len(p, end);
        if (!n) return BAIL;
        p += n;
    }
    out->raw = s->p;
    out->len = (size_t)(p - s->p);
    out->escaped = escaped;
    s->p = p + 1;
    return 0;
}

/* Append the decoded (UTF-8) text of a string. An escaped NUL, a lone surrogate or a bad escape bails. */
static int decode(const Str *str, Buf *b) {
    if (!str->escaped) return buf_put(b, str->raw, str->len);
    const unsigned char *p = str->raw, *end = str->raw + str->len;
    while (p < end) {
        const unsigned char *q = p;
        while (q < end && *q != '\\') q++;
        TRY(buf_put(b, p, (size_t)(q - p)));
        if (q >= end) break;
        unsigned e = q[1];
        p = q + 2;
        char c;
        switch (e) {
        case '"': c = '"'; break;
        case '\\': c = '\\'; break;
        case '/': c = '/'; break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'n': c = '\n'; break;
        case 'r': c = '\r'; break;
        case 't': c = '\t'; break;
        case 'u': {
            unsigned cp;
            TRY(hex4(p, end, &cp));
            p += 4;
            if (cp == 0) return BAIL;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return BAIL;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u') return BAIL;
                TRY(hex4(p + 2, end, &lo));
                if (lo < 0xDC00 || lo > 0xDFFF) return BAIL;
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            unsigned char u[4];
            size_t n;
            if (cp < 0x80) {
                u[0] = (unsigned char)cp;
                n = 1;
            } else if (cp < 0x800) {
                u[0] = (unsigned char)(0xC0 | (cp >> 6));
                u[1] = (unsigned char)(0x80 | (cp & 0x3F));
                n = 2;
            } else if (cp < 0x10000) {
                u[0] = (unsigned char)(0xE0 | (cp >> 12));
                u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                u[2] = (unsigned char)(0x80 | (cp & 0x3F));
                n = 3;
            } else {
                u[0] = (unsigned char)(0xF0 | (cp >> 18));
                u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
                u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                u[3] = (unsigned char)(0x80 | (cp & 0x3F));
                n = 4;
            }
            TRY(buf_put(b, u, n));
            continue;
        }
        default: return BAIL;
        }
        TRY(buf_putc(b, c));
    }
    return 0;
}

/* The batch being decoded is written as the reference decoder writes it (1), or as the DuckDB path does (0).
 * A batch with span events goes, without this decoder, through the reference decoder alone (the DuckDB path
 * hands it on), which writes attributes and resource with orjson: control bytes escaped in lowercase hex,
 * doubles in Python's shortest digits and orjson's layout, a repeated key once. So such a batch is decoded as
 * that path would store it, every span of it. Set per batch by `json_batch`; one decode runs at a time. */
static int orj;
static int want_orj; /* a pass in DuckDB form met a span with events: the batch is the reference's */
static int saw_events; /* a pass in reference form met a span with events */

/* Append a string as a JSON string literal, escaped as DuckDB's to_json (yyjson) escapes it (orjson, in
 * reference form: the same but for lowercase hex): quote, backslash and \b \f \n \r \t by name, other control
 * bytes as \u00XX, everything else (DEL and non-ASCII included) as is. */
static Buf scratch; /* decoded text of an escaped string; one decode runs at a time (see `lock`) */

static int json_string(const Str *str, Buf *b) {
    TRY(buf_putc(b, '"'));
    if (!str->escaped) {
        TRY(buf_put(b, str->raw, str->len));
        return buf_putc(b, '"');
    }
    scratch.len = 0;
    TRY(decode(str, &scratch));
    const char *hx = orj ? "0123456789abcdef" : "0123456789ABCDEF";
    const unsigned char *p = (const unsigned char *)scratch.p, *end = p + scratch.len;
    while (p < end) {
        const unsigned char *q = p;
        while (q < end && *q >= 0x20 && *q != '"' && *q != '\\') q++;
        TRY(buf_put(b, p, (size_t)(q - p)));
        if (q >= end) break;
        unsigned c = *q;
        char esc[6] = {'\\', 0, 0, 0, 0, 0};
        size_t n = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default:
            esc[1] = 'u';
            esc[2] = '0';
            esc[3] = '0';
            esc[4] = hx[c >> 4];
            esc[5] = hx[c & 15];
            n = 6;
        }
        TRY(buf_put(b, esc, n));
        p = q + 1;
    }
    return buf_putc(b, '"');
}

/* An object key. An escaped one bails: "trace\u0049d" is traceId to other readers, and matching it here
 * is not worth the code. */
static int object_key(P *s, Str *out) {
    TRY(string(s, out));
    return out->escaped ? BAIL : 0;
}

static inline int str_is(const Str *str, const char *lit, size_t n) {
    return !str->escaped && str->len == n && memcmp(str->raw, lit, n) == 0;
}
#define IS(str, lit) str_is((str), lit, sizeof(lit) - 1)

/* The members of a JSON object: the body runs once a member, with `key` (a Str) its name and its value next
 * in `s`; the body consumes the value (`TRY(skip(s))` for one it ignores). */
#define EACH_MEMBER(s, key, ...)          \
    do {                                  \
        TRY(expect(s, '{'));              \
        if (!accept(s, '}')) {            \
            do {                          \
                Str key;                  \
                TRY(object_key(s, &key)); \
                TRY(expect(s, ':'));      \
                __VA_ARGS__               \
            } while (accept(s, ','));     \
            TRY(expect(s, '}'));          \
        }                                 \
    } while (0)

/* The elements of a JSON array: the body runs once an element, and consumes it. */
#define EACH_ELEMENT(s, ...)          \
    do {                              \
        TRY(expect(s, '['));          \
        if (!accept(s, ']')) {        \
            do {                      \
                __VA_ARGS__           \
            } while (accept(s, ',')); \
            TRY(expect(s, ']'));      \
        }                             \
    } while (0)

/* Skip any JSON value, checking its syntax. */
static int number_text(P *s, Str *out);

static int skip(P *s) {
    int c = peek(s);
    if (c == '"') {
        Str t;
        return string(s, &t);
    }
    if (c == '{' || c == '[') {
        if (++s->depth > 64) return BAIL;
        if (c == '{')
            EACH_MEMBER(s, k,
                /* a span where this decoder does not look (a link, a field it does not know): the slower
                 * paths count every "spanId" key, and decide */
                if (IS(&k, "spanId")) return BAIL;
                TRY(skip(s));
            );
        else
            EACH_ELEMENT(s, TRY(skip(s)););
        s->depth--;
        return 0;
    }
    if (c == 't' && s->end - s->p >= 4 && memcmp(s->p, "true", 4) == 0) { s->p += 4; return 0; }
    if (c == 'f' && s->end - s->p >= 5 && memcmp(s->p, "false", 5) == 0) { s->p += 5; return 0; }
    if (c == 'n' && s->end - s->p >= 4 && memcmp(s->p, "null", 4) == 0) { s->p += 4; return 0; }
    Str t;
    return number_text(s, &t);
}

/* A JSON number, syntax-checked; its text. */
static int number_text(P *s, Str *out) {
    ws(s);
    const unsigned char *p = s->p, *end = s->end, *start = p;
    if (p < end && *p == '-') p++;
    if (p >= end) return BAIL;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (p < end && *p >= '0' && *p <= '9') p++;
    else return BAIL;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9') return BAIL;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return BAIL;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    out->raw = start;
    out->len = (size_t)(p - start);
    out->escaped = 0;
    s->p = p;
    return 0;
}

/* A string or a number: its text (the int64 fields come either way). */
static int scalar_text(P *s, Str *out) {
    int c = peek(s);
    if (c == '"') return string(s, out);
    return number_text(s, out);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* fields */

/* Hex digit → its lowercase form; 0 for any other byte. */
static unsigned char HEX_LOWER[256];

static void init_tables(void) {
    for (int c = '0'; c <= '9'; c++) HEX_LOWER[c] = (unsigned char)c;
    for (int c = 'a'; c <= 'f'; c++) HEX_LOWER[c] = (unsigned char)c;
    for (int c = 'A'; c <= 'F'; c++) HEX_LOWER[c] = (unsigned char)(c + 32);
}

/* A hex id of `n` bytes: 2n hex digits, lowercased. Base64 ids and anything else bail. */
static int hex_id(const Str *t, size_t n, StrCol *col) {
    if (t->escaped || t->len != 2 * n) return BAIL;
    Buf *b = &col->data;
    if (b->len + t->len > b->cap && buf_grow(b, t->len)) return BAIL;
    unsigned char *o = (unsigned char *)b->p + b->len, bad = 0;
    for (size_t k = 0; k < t->len; k++) {
        unsigned char h = HEX_LOWER[t->raw[k]];
        o[k] = h;
        bad |= (unsigned char)(h == 0);
    }
    if (bad) return BAIL;
    b->len += t->len;
    return 0;
}

/* Unix nanoseconds: a positive integer, as a string or a number. "0" means missing: bail. */
static int unix_ns(const Str *t, int64_t *v) {
    if (t->escaped || t->len == 0 || t->len > 19) return BAIL;
    uint64_t x = 0;
    for (size_t k = 0; k < t->len; k++) {
        unsigned c = t->raw[k];
        if (c < '0' || c > '9') return BAIL;
        x = x * 10 + (c - '0');
    }
    if (x == 0 || x > (uint64_t)INT64_MAX) return BAIL;
    *v = (int64_t)x;
    return 0;
}

static const char *const KINDS[] = {"UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER"};
static const char *const STATUSES[] = {"UNSET", "OK", "ERROR"};

/* An enum as a number ("2", 2) or a name with or without its prefix, any case: its index, or -1. */
static int enum_index(const Str *t, const char *prefix, const char *const *names, int n) {
    if (t->escaped || t->len == 0 || t->len > 40) return -1;
    if (t->len == 1 && t->raw[0] >= '0' && t->raw[0] < '0' + n) return t->raw[0] - '0';
    char up[41];
    for (size_t k = 0; k < t->len; k++) {
        unsigned c = t->raw[k];
        up[k] = (char)(c >= 'a' && c <= 'z' ? c - 32 : c);
    }
    up[t->len] = 0;
    const char *u = up;
    size_t pl = strlen(prefix);
    if (strncmp(u, prefix, pl) == 0) u += pl;
    for (int k = 0; k < n; k++)
        if (strcmp(u, names[k]) == 0) return k;
    return -1;
}

/* An int AnyValue: optional minus, digits; printed without leading zeros (as CAST(... AS HUGEINT) prints).
 * More than 19 significant digits (beyond int64) bail; in reference form, so does a negative one below
 * -2^63 (orjson cannot write it: the reference rejects the batch). */
static int int_value(const Str *t, Buf *b) {
    if (t->escaped || t->len == 0) return BAIL;
    const unsigned char *p = t->raw, *end = p + t->len;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    if (p >= end) return BAIL;
    for (const unsigned char *q = p; q < end; q++)
        if (*q < '0' || *q > '9') return BAIL;
    while (p < end - 1 && *p == '0') p++;
    if (end - p > 19) return BAIL;
    if (orj && neg && end - p == 19 && memcmp(p, "9223372036854775808", 19) > 0) return BAIL;
    if (neg && !(end - p == 1 && *p == '0')) TRY(buf_putc(b, '-'));
    return buf_put(b, p, (size_t)(end - p));
}

/* A double AnyValue given as a JSON number, printed as yyjson prints it: the shortest digits that round-trip,
 * plain (not exponent) form from 1e-6 up to 1e21, ".0" on integers. Only numbers of at most 15 significant
 * digits are taken (their shortest round-trip digits are their own digits); the rest bail. */
static int double_value(const Str *t, Buf *b) {
    const unsigned char *p = t->raw, *end = p + t->len;
    int neg = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    char dig[32];
    int nd = 0, point = 0; /* value = 0.dig × 10^point */
    int seen_point = 0, leading = 1;
    for (; p < end; p++) {
        unsigned c = *p;
        if (c == '.') {
            seen_point = 1;
            continue;
        }
        if (c == 'e' || c == 'E') break;
        if (c < '0' || c > '9') return BAIL;
        if (leading && c == '0') {
            if (seen_point) point--;
            continue;
        }
        leading = 0;
        if (nd >= 30) return BAIL;
        dig[nd++] = (char)c;
        if (!seen_point) point++;
    }
    if (p < end) { /* exponent */
        p++;
        int eneg = 0;
        if (p < end && (*p == '+' || *p == '-')) eneg = *p++ == '-';
        int e = 0;
        for (; p < end; p++) {
            if (e > 1000) return BAIL;
            e = e * 10 + (*p - '0');
        }
        point += eneg ? -e : e;
    }
    while (nd > 0 && dig[nd - 1] == '0') nd--;
    if (nd == 0) { /* zero; an integer literal is read as an integer first, so -0 is 0 */
        int real = memchr(t->raw, '.', t->len) || memchr(t->raw, 'e', t->len) || memchr(t->raw, 'E', t->len);
        return neg && real ? buf_put(b, "-0.0", 4) : buf_put(b, "0.0", 3);
    }
    if (nd > 15 || point < -5 || point > 21) return BAIL;
    if (neg) TRY(buf_putc(b, '-'));
    if (point <= 0) {
        TRY(buf_put(b, "0.", 2));
        for (int k = 0; k < -point; k++) TRY(buf_putc(b, '0'));
        return buf_put(b, dig, (size_t)nd);
    }
    if (point >= nd) {
        TRY(buf_put(b, dig, (size_t)nd));
        for (int k = nd; k < point; k++) TRY(buf_putc(b, '0'));
        return buf_put(b, ".0", 2);
    }
    TRY(buf_put(b, dig, (size_t)point));
    TRY(buf_putc(b, '.'));
    return buf_put(b, dig + point, (size_t)(nd - point));
}

static int put_double(Buf *b, double v); /* orjson's form (_otlpproto.c) */

/* A double AnyValue given as a JSON number, in reference form: the value orjson reads (an integer literal is
 * read as an int, then made a float: -0 is 0.0), written as orjson writes it. Integer literals past 19 digits
 * (orjson reads them as floats, by its own rounding) and numbers past the doubles (orjson refuses them) bail. */
static int double_value_orjson(const Str *t, Buf *b) {
    char text[352];
    if (t->len >= sizeof text) return BAIL;
    int integer = !memchr(t->raw, '.', t->len) && !memchr(t->raw, 'e', t->len) && !memchr(t->raw, 'E', t->len);
    if (integer && t->len > 19 + (t->raw[0] == '-')) return BAIL;
    memcpy(text, t->raw, t->len);
    text[t->len] = 0;
    double v = strtod(text, NULL); /* correctly rounded, as orjson reads (tests/test_otlp_fast.py) */
    if (v == HUGE_VAL || v == -HUGE_VAL) return BAIL;
    if (integer && v == 0) v = 0; /* the int -0 is 0 */
    return put_double(b, v);
}

/* One AnyValue object, written as JSON. `in_array`: a nested array/kvlist bails (the DuckDB path's rule).
 * `text`, when given, receives a stringValue as it lies in the payload (raw stays NULL for any other kind). */
static int any_value(P *s, Buf *b, int in_array, Str *text) {
    TRY(expect(s, '{'));
    if (accept(s, '}')) return buf_put(b, "null", 4);
    Str k;
    TRY(object_key(s, &k));
    TRY(expect(s, ':'));
    Str t;
    if (IS(&k, "stringValue") || IS(&k, "bytesValue")) {
        TRY(string(s, &t));
        if (text && IS(&k, "stringValue")) *text = t;
        TRY(json_string(&t, b));
    } else if (IS(&k, "intValue")) {
        TRY(scalar_text(s, &t));
        TRY(int_value(&t, b));
    } else if (IS(&k, "doubleValue")) {
        if (peek(s) == '"') return BAIL; /* "NaN", "Infinity", or a number in a string: the DuckDB path */
        TRY(number_text(s, &t));
        TRY(orj ? double_value_orjson(&t, b) : double_value(&t, b));
    } else if (IS(&k, "boolValue")) {
        ws(s);
        if (s->end - s->p >= 4 && memcmp(s->p, "true", 4) == 0) {
            s->p += 4;
            TRY(buf_put(b, "true", 4));
        } else if (s->end - s->p >= 5 && memcmp(s->p, "false", 5) == 0) {
            s->p += 5;
            TRY(buf_put(b, "false", 5));
        } else
            return BAIL;
    } else if (IS(&k, "arrayValue") && !in_array) {
        int seen = 0;
        TRY(buf_putc(b, '['));
        EACH_MEMBER(s, f,
            int first = 1;
            if (!IS(&f, "values") || seen++) return BAIL;
            EACH_ELEMENT(s,
                if (!first) TRY(buf_putc(b, ','));
                first = 0;
                TRY(any_value(s, b, 1, NULL));
            );
        );
        if (!seen) return BAIL;
        TRY(buf_putc(b, ']'));
    } else
        return BAIL; /* kvlistValue, a nested array, null, an unknown kind */
    return expect(s, '}'); /* a second kind in the same value bails here */
}

/* A KeyValue list written as one JSON object into b. If `service` is given, it receives the string value of
 * the first `service.name` key (NULL when that key is absent or not a string). In reference form `ks` (emptied
 * here) receives the keys: a key twice bails (a dict keeps one). */
static int attributes(P *s, Buf *b, Buf *service, int *has_service, KeySet *ks) {
    int first = 1;
    ks_reset(ks);
    TRY(buf_putc(b, '{'));
    EACH_ELEMENT(s,
        Str key;
        int have_key = 0, have_value = 0;
        if (!first) TRY(buf_putc(b, ','));
        first = 0;
        /* key first, then value: the order every producer writes; anything else bails */
        EACH_MEMBER(s, f,
            if (IS(&f, "key") && !have_key) {
                TRY(string(s, &key));
                /* escaped, a resource key could spell service.name ("\u0073ervice.name"): the others decide */
                if (service && key.escaped) return BAIL;
                if (orj) { /* the text a dict would hold, once */
                    if (key.escaped) {
                        scratch.len = 0;
                        TRY(decode(&key, &scratch));
                        TRY(ks_add(ks, (const unsigned char *)scratch.p, scratch.len));
                    } else
                        TRY(ks_add(ks, key.raw, key.len));
                }
                TRY(json_string(&key, b));
                TRY(buf_putc(b, ':'));
                have_key = 1;
            } else if (IS(&f, "value") && have_key && !have_value) {
                int is_service = service && !*has_service && IS(&key, "service.name");
                Str text = {0};
                TRY(any_value(s, b, 0, &text));
                have_value = 1;
                if (is_service) { /* the first service.name decides; not a string: NULL */
                    *has_service = 1;
                    if (text.raw) {
                        TRY(decode(&text, service));
                        TRY(buf_putc(service, 0)); /* marks "present"; not copied into the column */
                    }
                }
            } else
                return BAIL;
        );
        if (!have_key) return BAIL;
        if (!have_value) TRY(buf_put(b, "null", 4));
    );
    return buf_putc(b, '}');
}

/* The resource of a ResourceSpans: its attributes as JSON, and service.name. */
typedef struct {
    Buf json, service; /* service: decoded text + NUL when present, empty when absent */
} Resource;

static int resource(P *s, Resource *r) {
    int seen = 0;
    EACH_MEMBER(s, f,
        if (IS(&f, "attributes")) {
            int has = 0;
            if (seen++) return BAIL; /* a field twice: readers disagree on which counts */
            r->json.len = 0;
            TRY(attributes(s, &r->json, &r->service, &has, &span_keys));
        } else
            TRY(skip(s));
    );
    return 0;
}

enum {
    F_TRACE = 1, F_SPAN = 2, F_PARENT = 4, F_NAME = 8, F_KIND = 16, F_START = 32, F_END = 64, F_ATTRS = 128,
    F_STATUS = 256, F_EVENTS = 512
}; /* the span fields seen: each at most once */

/* An int64 as the reference decoder's int() reads it from a string or a number of digits (optional minus);
 * anything else (a fraction, an exponent, blanks, "+", a value orjson cannot write) bails. */
static int event_time(P *s, Buf *b) {
    Str t;
    TRY(scalar_text(s, &t));
    if (t.escaped || t.len == 0) return BAIL;
    for (size_t k = t.raw[0] == '-'; k < t.len; k++)
        if (t.raw[k] < '0' || t.raw[k] > '9') return BAIL;
    return int_value(&t, b);
}

/* One span event, appended to `ev` as the reference decoder keeps it: {"name": a string or null,
 * "time_unix_nano": an int or null, "attributes": {…}} (the reference form: called only in it). Its members may
 * come in any order: the attributes are gathered in `ev_attrs` first. A member twice bails (orjson keeps the
 * last); so does an attribute list the reference would read otherwise than the span attributes' rules. */
static Buf ev_attrs;

static int event(P *s, Buf *ev) {
    Str name;
    int seen_name = 0, seen_time = 0, seen_attrs = 0, has_name = 0;
    size_t time_at = 0, time_len = 0, attrs_at = 0, attrs_len = 0;
    ev_attrs.len = 0;
    EACH_MEMBER(s, f,
        if (IS(&f, "name")) {
            if (seen_name++) return BAIL;
            if (peek(s) == '"') {
                TRY(string(s, &name));
                has_name = 1;
            } else
                TRY(skip(s)); /* not a string: null */
        } else if (IS(&f, "timeUnixNano")) {
            if (seen_time++) return BAIL;
            if (peek(s) == 'n') TRY(skip(s)); /* null: null */
            else {
                time_at = ev_attrs.len; /* the digits wait in ev_attrs too */
                TRY(event_time(s, &ev_attrs));
                time_len = ev_attrs.len - time_at;
            }
        } else if (IS(&f, "attributes")) {
            if (seen_attrs++) return BAIL;
            int c = peek(s);
            if (c == '[') {
                attrs_at = ev_attrs.len;
                TRY(attributes(s, &ev_attrs, NULL, NULL, &event_keys));
                attrs_len = ev_attrs.len - attrs_at;
            } else
                TRY(skip(s)); /* not a list: {} */
        } else
            TRY(skip(s));
    );
    TRY(buf_put(ev, "{\"name\":", 8));
    TRY(has_name ? json_string(&name, ev) : buf_put(ev, "null", 4));
    TRY(buf_put(ev, ",\"time_unix_nano\":", 18));
    TRY(time_len ? buf_put(ev, ev_attrs.p + time_at, time_len) : buf_put(ev, "null", 4));
    TRY(buf_put(ev, ",\"attributes\":", 14));
    TRY(attrs_len ? buf_put(ev, ev_attrs.p + attrs_at, attrs_len) : buf_put(ev, "{}", 2));
    return buf_putc(ev, '}');
}

static Buf span_events; /* the kept events of the span being decoded, as JSON, comma-separated */

/* A span's `events`. In DuckDB form a non-empty array ends the pass: the batch is the reference decoder's. In
 * reference form the array's objects are kept (other elements are left out, as the reference leaves them);
 * `*kept` counts them. Anything but an array is no events. */
static int events(P *s, int *kept) {
    ws(s);
    if (s->p >= s->end || *s->p != '[') return skip(s);
    P look = *s;
    look.p++;
    ws(&look);
    if (look.p < look.end && *look.p == ']') return skip(s);
    if (!orj) {
        want_orj = 1;
        return BAIL;
    }
    saw_events = 1;
    EACH_ELEMENT(s,
        if (peek(s) == '{') {
            if ((*kept)++) TRY(buf_putc(&span_events, ','));
            TRY(event(s, &span_events));
        } else
            TRY(skip(s));
    );
    return 0;
}

static int status(P *s, int *code) {
    int seen = 0;
    *code = 0;
    EACH_MEMBER(s, f,
        if (IS(&f, "code")) {
            Str t;
            if (seen++) return BAIL;
            TRY(scalar_text(s, &t));
            if ((*code = enum_index(&t, "STATUS_CODE_", STATUSES, 3)) < 0) return BAIL;
        } else
            TRY(skip(s));
    );
    return 0;
}

static int span(P *s, Out *o, int64_t batch_id, const Resource *r, const Str *scope, int has_scope) {
    unsigned seen = 0;
    int kind = 0, code = 0, has_parent = 0, kept = 0;
    span_events.len = 0;
    ks_reset(&span_keys);
    int64_t start = 0, end = 0;
    EACH_MEMBER(s, f,
        Str t;
        unsigned bit = 0;
        if (IS(&f, "traceId")) {
            bit = F_TRACE;
            TRY(string(s, &t));
            TRY(hex_id(&t, 16, &o->s[C_TRACE]));
        } else if (IS(&f, "spanId")) {
            bit = F_SPAN;
            TRY(string(s, &t));
            TRY(hex_id(&t, 8, &o->s[C_SPAN]));
        } else if (IS(&f, "parentSpanId")) {
            bit = F_PARENT;
            TRY(string(s, &t));
            if (t.len) { /* "" is a root span: NULL, as if absent */
                TRY(hex_id(&t, 8, &o->s[C_PARENT]));
                has_parent = 1;
            }
        } else if (IS(&f, "name")) {
            bit = F_NAME;
            TRY(string(s, &t));
            TRY(decode(&t, &o->s[C_NAME].data));
        } else if (IS(&f, "kind")) {
            bit = F_KIND;
            TRY(scalar_text(s, &t));
            kind = enum_index(&t, "SPAN_KIND_", KINDS, 6);
            if (kind < 0) return BAIL;
        } else if (IS(&f, "startTimeUnixNano")) {
            bit = F_START;
            TRY(scalar_text(s, &t));
            TRY(unix_ns(&t, &start));
        } else if (IS(&f, "endTimeUnixNano")) {
            bit = F_END;
            TRY(scalar_text(s, &t));
            TRY(unix_ns(&t, &end));
        } else if (IS(&f, "attributes")) {
            bit = F_ATTRS;
            TRY(attributes(s, &o->s[C_ATTRS].data, NULL, NULL, &span_keys));
        } else if (IS(&f, "status")) {
            bit = F_STATUS;
            TRY(status(s, &code));
        } else if (IS(&f, "events")) {
            bit = F_EVENTS;
            TRY(events(s, &kept));
        } else
            TRY(skip(s));
        if (bit) {
            if (seen & bit) return BAIL; /* a field twice */
            seen |= bit;
        }
    );
    /* what the reference decoder words as an error, or takes in another form, is its to decide */
    if (!(seen & F_TRACE) || !(seen & F_SPAN) || !(seen & F_START) || !(seen & F_END) || end < start) return BAIL;
    StrCol *c = o->s;
    TRY(col_end(&c[C_TRACE], 1));
    TRY(col_end(&c[C_SPAN], 1));
    TRY(col_end(&c[C_PARENT], has_parent));
    TRY(col_end(&c[C_NAME], 1));
    TRY(buf_put(&c[C_KIND].data, KINDS[kind], strlen(KINDS[kind])));
    TRY(col_end(&c[C_KIND], 1));
    if (r->service.len) TRY(buf_put(&c[C_SERVICE].data, r->service.p, r->service.len - 1));
    TRY(col_end(&c[C_SERVICE], r->service.len > 0));
    if (has_scope) TRY(decode(scope, &c[C_SCOPE].data));
    TRY(col_end(&c[C_SCOPE], has_scope));
    TRY(buf_put(&c[C_STATUS].data, STATUSES[code], strlen(STATUSES[code])));
    TRY(col_end(&c[C_STATUS], 1));
    if (!(seen & F_ATTRS)) TRY(buf_put(&c[C_ATTRS].data, "{}", 2));
    if (kept) { /* after the attributes, as the reference adds them to its dict; an attribute of that name bails */
        Buf *a = &c[C_ATTRS].data;
        int64_t row_start;
        memcpy(&row_start, c[C_ATTRS].off.p + c[C_ATTRS].off.len - 8, 8);
        if (ks_has(&span_keys, EVENTS_KEY, sizeof EVENTS_KEY - 1)) return BAIL;
        a->len--; /* the closing brace */
        if (a->len - (size_t)row_start > 1) TRY(buf_putc(a, ','));
        TRY(buf_put(a, "\"" EVENTS_KEY "\":[", sizeof EVENTS_KEY + 3));
        TRY(buf_put(a, span_events.p, span_events.len));
        TRY(buf_put(a, "]}", 2));
    }
    TRY(col_end(&c[C_ATTRS], 1));
    TRY(buf_put(&c[C_RESOURCE].data, r->json.p, r->json.len));
    TRY(col_end(&c[C_RESOURCE], 1));
    TRY(buf_i64(&o->i[I_BATCH], batch_id));
    TRY(buf_i64(&o->i[I_START], start));
    TRY(buf_i64(&o->i[I_END], end));
    o->rows++;
    return 0;
}

static int scope_spans(P *s, Out *o, int64_t batch_id, const Resource *r) {
    Str scope = {0};
    int has_scope = 0, seen_scope = 0, seen_spans = 0;
    EACH_MEMBER(s, f,
        if (IS(&f, "scope")) {
            if (seen_scope++ || seen_spans) return BAIL; /* twice, or after the spans */
            EACH_MEMBER(s, g,
                if (IS(&g, "name")) {
                    if (has_scope++) return BAIL;
                    TRY(string(s, &scope));
                } else
                    TRY(skip(s));
            );
        } else if (IS(&f, "spans")) {
            if (seen_spans++) return BAIL;
            EACH_ELEMENT(s, TRY(span(s, o, batch_id, r, &scope, has_scope)););
        } else
            TRY(skip(s));
    );
    return 0;
}

static int resource_spans(P *s, Out *o, int64_t batch_id, Resource *r) {
    int seen_res = 0, seen_scopes = 0;
    r->json.len = 0;
    r->service.len = 0;
    TRY(buf_put(&r->json, "{}", 2));
    EACH_MEMBER(s, f,
        if (IS(&f, "resource")) {
            if (seen_res++ || seen_scopes) return BAIL; /* twice, or after the spans */
            TRY(resource(s, r));
        } else if (IS(&f, "scopeSpans")) {
            if (seen_scopes++) return BAIL;
            EACH_ELEMENT(s, TRY(scope_spans(s, o, batch_id, r)););
        } else
            TRY(skip(s));
    );
    return 0;
}

static int batch(P *s, Out *o, int64_t batch_id, Resource *r) {
    int seen = 0;
    EACH_MEMBER(s, f,
        if (IS(&f, "resourceSpans")) {
            if (seen++) return BAIL;
            EACH_ELEMENT(s, TRY(resource_spans(s, o, batch_id, r)););
        } else
            TRY(skip(s));
    );
    ws(s);
    return seen && s->p == s->end ? 0 : BAIL;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* The (trace_id, span_id) pairs one ingest call has decoded, as 64-bit hashes: while no pair comes twice, the
 * archive need not look for copies among the spans this call landed. A hash that comes twice may be a copy or
 * a collision; either way the caller then looks, exactly. Past `limit` pairs it stops (memory stays bounded)
 * and says so. */

typedef struct {
    PyObject_HEAD
    uint64_t *slots; /* 0 = empty */
    size_t cap, count, limit;
    int full;
} SpanSet;

static inline uint64_t word(const char *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

/* One word into the running hash: multiplied, rotated and multiplied again before it joins, so a change in a
 * word's high bytes (the last hex digits of an id: words are read little-endian) reaches every bit. A plain
 * product would carry it only upwards: sequential ids, which differ in their last digits, collided in about
 * one pair of ingest calls in fifty. */
static inline uint64_t mix_word(uint64_t h, uint64_t w) {
    w = rotl64(w * 0xC2B2AE3D27D4EB4FULL, 31) * 0x9E3779B97F4A7C15ULL;
    return rotl64(h ^ w, 27) * 0x9E3779B97F4A7C15ULL + 0x85EBCA77C2B2AE63ULL;
}

/* The hash of row r's (trace_id, span_id), from their hex text; never 0 (the empty slot). */
static inline uint64_t pair_hash(const char *trace, const char *span) {
    uint64_t h = 0x27D4EB2F165667C5ULL;
    for (int k = 0; k < 32; k += 8) h = mix_word(h, word(trace + k));
    h = mix_word(mix_word(h, word(span)), word(span + 8));
    h = fmix64(h);
    return h ? h : 1;
}

/* Room for `more` pairs at a load of at most one half; 0, or -1 when memory ran out. */
static int spanset_reserve(SpanSet *ss, size_t more) {
    if (2 * (ss->count + more) <= ss->cap) return 0;
    size_t cap = ss->cap ? ss->cap : 1 << 18, most = 1 << 18;
    while (most < 2 * ss->limit) most *= 2; /* the table a full set needs: 16 bytes a pair at most */
    while (2 * (ss->count + more) > cap && cap < most) cap = cap * 4 < most ? cap * 4 : most;
    if (2 * (ss->count + more) > cap) return -1;
    uint64_t *slots = calloc(cap, sizeof *slots);
    if (!slots) return -1;
    for (size_t k = 0; k < ss->cap; k++) {
        uint64_t v = ss->slots[k];
        if (!v) continue;
        size_t i = (size_t)v & (cap - 1);
        while (slots[i]) i = (i + 1) & (cap - 1);
        slots[i] = v;
    }
    free(ss->slots);
    ss->slots = slots;
    ss->cap = cap;
    return 0;
}

/* Add the pairs of rows [from, o->rows); 1 when any was there before (or the set just filled up). The
 * slots are random places in a table of megabytes: each is prefetched a few pairs ahead of its insert. */
static int spanset_add_rows(SpanSet *ss, const Out *o, int64_t from) {
    size_t n = (size_t)(o->rows - from);
    if (!n) return 0;
    if (ss->count + n > ss->limit || spanset_reserve(ss, n) < 0) {
        ss->full = 1;
        return 1;
    }
    enum { AHEAD = 8 };
    uint64_t ring[AHEAD];
    const char *t = o->s[C_TRACE].data.p + 32 * from, *sp = o->s[C_SPAN].data.p + 16 * from;
    size_t mask = ss->cap - 1;
    int seen = 0;
    for (size_t k = 0; k < n + AHEAD; k++) {
        if (k >= AHEAD) { /* pair k - AHEAD, prefetched AHEAD pairs ago; its ring slot is k's next */
            uint64_t h = ring[k % AHEAD];
            size_t i = (size_t)h & mask;
            while (ss->slots[i] && ss->slots[i] != h) i = (i + 1) & mask;
            if (ss->slots[i]) {
                seen = 1;
            } else {
                ss->slots[i] = h;
                ss->count++;
            }
        }
        if (k < n) {
            uint64_t h = pair_hash(t + 32 * k, sp + 16 * k);
            ring[k % AHEAD] = h;
            __builtin_prefetch(&ss->slots[h & mask], 1);
        }
    }
    return seen;
}

static void spanset_dealloc(PyObject *self) {
    SpanSet *ss = (SpanSet *)self;
    free(ss->slots);
    Py_TYPE(self)->tp_free(self);
}

static int spanset_init(PyObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"limit", NULL};
    Py_ssize_t limit = 8 << 20;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|n", names, &limit)) return -1;
    SpanSet *ss = (SpanSet *)self;
    free(ss->slots);
    ss->slots = NULL;
    ss->cap = ss->count = 0;
    ss->limit = limit > 0 ? (size_t)limit : 0;
    ss->full = 0;
    return 0;
}

static PyObject *spanset_full(PyObject *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(((SpanSet *)self)->full);
}

static PyObject *spanset_len(PyObject *self, void *closure) {
    (void)closure;
    return PyLong_FromSize_t(((SpanSet *)self)->count);
}

static PyGetSetDef spanset_getset[] = {
    {"full", spanset_full, NULL, "past its limit: it no longer tracks new pairs", NULL},
    {"count", spanset_len, NULL, "pairs held", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SpanSetType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "budgetscope.ingest._otlpjson.SpanSet",
    .tp_basicsize = sizeof(SpanSet),
    .tp_dealloc = spanset_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "SpanSet(limit=8388608): the (trace_id, span_id) hashes one ingest call decoded.",
    .tp_init = spanset_init,
    .tp_new = PyType_GenericNew,
    .tp_getset = spanset_getset,
};

/* ---------------------------------------------------------------------------------------------------------- */
/* the OTLP protobuf decoder: same columns, buffers and span set */

#include "_otlpproto.c"

/* ---------------------------------------------------------------------------------------------------------- */
/* Python */

typedef struct {
    Py_buffer view;
    int64_t id, spans; /* spans decoded, or -1: left to the next path */
} Item;

static void release(Item *items, Py_ssize_t n) {
    for (Py_ssize_t k = 0; k < n; k++)
        if (items[k].view.obj) PyBuffer_Release(&items[k].view);
    PyMem_Free(items);
}
/* A buffer the decoder filled, handed to Python (and Arrow) without a copy; freed with its last reference.
 * `block(n)` makes a writable one for the file reader. */
typedef struct {
    PyObject_HEAD
    Buf b;
    int writable;
} Owned;

static int owned_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    Owned *o = (Owned *)self;
    return PyBuffer_FillInfo(view, self, o->b.p, (Py_ssize_t)o->b.len, !o->writable, flags);
}

static void owned_dealloc(PyObject *self) {
    buf_free(&((Owned *)self)->b);
    Py_TYPE(self)->tp_free(self);
}

/* find(byte, start, end): the first index of `byte` (an int) in [start, end), or -1; bytearray.find's
 * answer for a one-byte needle, which the file reader needs. */
static PyObject *owned_find(PyObject *self, PyObject *args) {
    Owned *o = (Owned *)self;
    int c;
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "inn", &c, &start, &end)) return NULL;
    if (start < 0) start = 0;
    if (end > (Py_ssize_t)o->b.len) end = (Py_ssize_t)o->b.len;
    if (start >= end) return PyLong_FromLong(-1);
    const char *hit = memchr(o->b.p + start, c, (size_t)(end - start));
    return PyLong_FromSsize_t(hit ? hit - o->b.p : -1);
}

static PyMethodDef owned_methods[] = {
    {"find", owned_find, METH_VARARGS, "find(byte, start, end): index of the first `byte` in [start, end), or -1"},
    {NULL, NULL, 0, NULL},
};

static PyBufferProcs owned_as_buffer = {owned_getbuffer, NULL};

static Py_ssize_t owned_len(PyObject *self) { return (Py_ssize_t)((Owned *)self)->b.len; }

static PySequenceMethods owned_as_sequence = {.sq_length = owned_len};

static PyTypeObject OwnedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "budgetscope.ingest._otlpjson.Buffer",
    .tp_basicsize = sizeof(Owned),
    .tp_dealloc = owned_dealloc,
    .tp_as_buffer = &owned_as_buffer,
    .tp_as_sequence = &owned_as_sequence,
    .tp_methods = owned_methods,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Bytes the decoder wrote (or a block for the file reader), exposed through the buffer protocol.",
};

/* Move a Buf's bytes into a Python object (the Buf is left empty). */
static PyObject *owned_of(Buf *b) {
    if (!b->p && buf_grow(b, 1)) return PyErr_NoMemory();
    Owned *o = PyObject_New(Owned, &OwnedType);
    if (!o) return NULL;
    o->b = *b;
    o->writable = 0;
    memset(b, 0, sizeof *b);
    return (PyObject *)o;
}

PyDoc_STRVAR(block_doc, "block(n) -> a writable buffer of n bytes, uninitialised (bytearray(n) zeroes its n bytes first)");

static PyObject *py_block(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "n", &n)) return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "negative size");
        return NULL;
    }
    Buf b = {0};
    oom = 0;
    if (buf_grow(&b, (size_t)n + 1)) return PyErr_NoMemory();
    b.len = (size_t)n;
    PyObject *o = owned_of(&b);
    if (o) ((Owned *)o)->writable = 1;
    return o;
}

/* Validity bytes → an Arrow bitmap (None when every row is valid). */
static PyObject *bitmap_of(const Buf *v, int64_t rows) {
    int64_t nulls = 0;
    for (int64_t k = 0; k < rows; k++) nulls += !v->p[k];
    if (!nulls) Py_RETURN_NONE;
    PyObject *bm = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((rows + 7) / 8));
    if (!bm) return NULL;
    unsigned char *m = (unsigned char *)PyBytes_AS_STRING(bm);
    memset(m, 0, (size_t)((rows + 7) / 8));
    for (int64_t k = 0; k < rows; k++)
        if (v->p[k]) m[k >> 3] |= (unsigned char)(1u << (k & 7));
    return bm;
}

static PyThread_type_lock lock; /* the scanner's scratch buffer is shared: one decode at a time */

PyDoc_STRVAR(decode_doc,
"decode(payloads, batch_ids, seen=None) -> (rows, ints, strings, spans, repeated)\n\n"
"Decode OTLP/JSON trace exports (a list of bytes-like objects) into columns. A batch the decoder cannot vouch\n"
"for is left out whole: `spans[k]` is the number of spans batch k gave, or -1 when it was left. `ints`: int64\n"
"buffers for batch_id, start_ns, end_ns. `strings`: (int64 offsets, data, validity bitmap or None) for\n"
"trace_id, span_id, parent_span_id, name, kind, service_name, scope_name, status_code, attributes, resource.\n"
"`seen`: a SpanSet the decoded pairs are added to; `repeated` is true when a pair may have come before\n"
"(in this call or an earlier one with the same set), or when the set is full.");

/* One batch, decoded into `o`: 0, or BAIL (`o` then holds part of it: the caller resets it). */
typedef int (*BatchDecoder)(const unsigned char *p, size_t n, Out *o, int64_t batch_id, Resource *r);

/* 1 when the bytes may hold a span with events: a key "events" whose value is an array with something in it.
 * Only a hint (the key may belong to some other object): the pass it picks says whether it was right. */
static int events_hint(const unsigned char *p, size_t n) {
    const unsigned char *end = p + n, *q = p;
    while ((q = memmem(q, (size_t)(end - q), "\"events\"", 8))) {
        q += 8;
        while (q < end && (*q == ' ' || *q == '\n' || *q == '\r' || *q == '\t')) q++;
        if (q >= end || *q != ':') continue;
        q++;
        while (q < end && (*q == ' ' || *q == '\n' || *q == '\r' || *q == '\t')) q++;
        if (q >= end || *q != '[') continue;
        q++;
        while (q < end && (*q == ' ' || *q == '\n' || *q == '\r' || *q == '\t')) q++;
        if (q < end && *q != ']') return 1;
    }
    return 0;
}

/* A batch in the form its path would store it (see `orj`): first in the form the bytes hint at (a scan for a
 * non-empty "events" array), then in the other when the pass shows, or cannot rule out, that it is the other's. */
static int json_batch(const unsigned char *p, size_t n, Out *o, int64_t batch_id, Resource *r) {
    Mark m;
    out_mark(o, &m);
    int mode = events_hint(p, n);
    for (int pass = 0; pass < 2; pass++, mode = !mode) {
        P s = {p, p + n, 0};
        orj = mode;
        want_orj = saw_events = 0;
        int rc = batch(&s, o, batch_id, r);
        orj = 0;
        if (mode ? rc == 0 && saw_events : rc == 0) return 0;
        if (mode && saw_events) return BAIL; /* the reference's, in a form this decoder does not take */
        /* a pass in DuckDB form that stopped before any event: the scan found none either */
        if (!mode && !want_orj) return BAIL;
        out_reset(o, &m);
    }
    return BAIL;
}

/* decode / decode_proto: `per_span_bytes`, a guess at the payload bytes a span takes, sizes the columns. */
static PyObject *decode_batches(PyObject *args, BatchDecoder decode_one, size_t per_span_bytes) {
    PyObject *payloads, *ids, *seen = Py_None;
    if (!PyArg_ParseTuple(args, "O!O!|O", &PyList_Type, &payloads, &PyList_Type, &ids, &seen)) return NULL;
    if (seen != Py_None && !PyObject_TypeCheck(seen, &SpanSetType)) {
        PyErr_SetString(PyExc_TypeError, "seen must be a SpanSet or None");
        return NULL;
    }
    SpanSet *ss = seen == Py_None ? NULL : (SpanSet *)seen;
    int repeated = 0;
    Py_ssize_t n = PyList_GET_SIZE(payloads);
    if (PyList_GET_SIZE(ids) != n) {
        PyErr_SetString(PyExc_ValueError, "payloads and batch_ids differ in length");
        return NULL;
    }
    Item *items = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Item));
    if (!items) return PyErr_NoMemory();
    size_t total = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(payloads, k), &items[k].view, PyBUF_SIMPLE) < 0) {
            release(items, n);
            return NULL;
        }
        items[k].id = PyLong_AsLongLong(PyList_GET_ITEM(ids, k));
        if (items[k].id == -1 && PyErr_Occurred()) {
            release(items, n);
            return NULL;
        }
        total += (size_t)items[k].view.len;
    }
    size_t spans = total / per_span_bytes + 1;
    Out o;
    memset(&o, 0, sizeof o);
    Resource r;
    memset(&r, 0, sizeof r);
    int failed = 0;

    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(lock, WAIT_LOCK);
    oom = 0;
    /* Sized up front from a guess at the spans, so that little is copied as it grows (pages never written
     * cost nothing). Attributes take about half of a payload; a column that outgrows its guess grows. */
    static const size_t per_span[N_STR] = {32, 16, 16, 24, 12, 24, 16, 8, 0, 64};
    for (int k = 0; k < N_STR; k++) {
        failed |= buf_grow(&o.s[k].off, 8 * (spans + 1)) | buf_grow(&o.s[k].valid, spans + 1);
        failed |= buf_grow(&o.s[k].data, k == C_ATTRS ? total : per_span[k] * spans + 1);
        failed |= col_init(&o.s[k]);
    }
    for (int k = 0; k < N_INT; k++) failed |= buf_grow(&o.i[k], 8 * spans + 1);
    for (Py_ssize_t k = 0; k < n && !failed; k++) {
        Mark m;
        out_mark(&o, &m);
        if (decode_one(items[k].view.buf, (size_t)items[k].view.len, &o, items[k].id, &r) < 0) {
            out_reset(&o, &m);
            items[k].spans = -1;
        } else {
            items[k].spans = o.rows - m.rows;
            if (ss && !ss->full) repeated |= spanset_add_rows(ss, &o, m.rows);
        }
        failed |= oom;
    }
    PyThread_release_lock(lock);
    Py_END_ALLOW_THREADS

    PyObject *result = NULL;
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *ints = PyTuple_New(N_INT), *strs = PyTuple_New(N_STR), *counts = PyList_New(n);
    if (!ints || !strs || !counts) goto fail;
    for (int k = 0; k < N_INT; k++) {
        PyObject *b = owned_of(&o.i[k]);
        if (!b) goto fail;
        PyTuple_SET_ITEM(ints, k, b);
    }
    for (int k = 0; k < N_STR; k++) {
        PyObject *off = owned_of(&o.s[k].off), *data = owned_of(&o.s[k].data),
                 *bm = bitmap_of(&o.s[k].valid, o.rows);
        if (!off || !data || !bm) {
            Py_XDECREF(off);
            Py_XDECREF(data);
            Py_XDECREF(bm);
            goto fail;
        }
        PyTuple_SET_ITEM(strs, k, Py_BuildValue("(NNN)", off, data, bm));
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *c = PyLong_FromLongLong(items[k].spans);
        if (!c) goto fail;
        PyList_SET_ITEM(counts, k, c);
    }
    result = Py_BuildValue("(LNNNO)", (long long)o.rows, ints, strs, counts,
                           repeated || (ss && ss->full) ? Py_True : Py_False);
    goto done;
fail:
    Py_XDECREF(ints);
    Py_XDECREF(strs);
    Py_XDECREF(counts);
done:
    out_free(&o);
    buf_free(&r.json);
    buf_free(&r.service);
    release(items, n);
    return result;
}

static PyObject *py_decode(PyObject *self, PyObject *args) {
    (void)self;
    return decode_batches(args, json_batch, 256); /* OTLP/JSON spans run 250-1,000 bytes */
}

PyDoc_STRVAR(decode_proto_doc,
"decode_proto(payloads, batch_ids, seen=None) -> (rows, ints, strings, spans, repeated)\n\n"
"As decode, for serialized OTLP protobuf ExportTraceServiceRequest messages.");

static PyObject *py_decode_proto(PyObject *self, PyObject *args) {
    (void)self;
    return decode_batches(args, proto_batch, 128); /* protobuf spans run 100-500 bytes */
}

static PyMethodDef methods[] = {
    {"decode", py_decode, METH_VARARGS, decode_doc},
    {"decode_proto", py_decode_proto, METH_VARARGS, decode_proto_doc},
    {"proto_schema", py_proto_schema, METH_NOARGS, "the protobuf schema the decoder checks messages against"},
    {"block", py_block, METH_VARARGS, block_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_otlpjson",
    "OTLP/JSON and protobuf trace exports decoded in C into typed span columns (see budgetscope.ingest.otlp_fast).",
    -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__otlpjson(void) {
    init_tables();
    init_proto_tables();
    if (PyType_Ready(&OwnedType) < 0 || PyType_Ready(&SpanSetType) < 0) return NULL;
    lock = PyThread_allocate_lock();
    if (!lock) return PyErr_NoMemory();
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&SpanSetType);
    if (PyModule_AddObject(m, "SpanSet", (PyObject *)&SpanSetType) < 0) {
        Py_DECREF(&SpanSetType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddStringConstant(m, "EVENTS_KEY", EVENTS_KEY) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
