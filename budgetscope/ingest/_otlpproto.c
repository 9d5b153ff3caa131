/* A decoder for OTLP protobuf trace exports (`ExportTraceServiceRequest`, what the OTLP/gRPC and OTLP/HTTP
 * exporters send), straight into the same typed columns as the OTLP/JSON decoder.
 *
 * Not compiled on its own: `_otlpjson.c` includes it, so that both decoders share its buffers, column
 * builders, span set and lock (one translation unit, one module).
 *
 * Each value is byte for byte what the reference path stores for the same span: `otlp_proto.decode` (the
 * protobuf runtime, then `orjson.dumps` of the attributes as a dict) and the staging SQL. So attributes and
 * resource are written as orjson writes them: keys in wire order, strings escaped as orjson escapes them,
 * ints in decimal, doubles in Python's shortest round-trip digits (orjson's layout: plain from 1e-5 up to
 * 1e16, else `1.5e+16`), NaN and infinities as the strings "NaN", "Infinity", "-Infinity", bytes as base64.
 *
 * Like the JSON decoder, it takes a batch whole or leaves it ("bails") to the reference decoder, which decides
 * and words the error. What bails: malformed wire data (a truncated or overlong varint, a length past the end,
 * a group, wire types 6 and 7, field number 0), a known field with an unexpected wire type, a field that may
 * occur once occurring twice (protobuf merges or keeps the last; not reproduced), an empty message or one with
 * no resource spans, a string that is not UTF-8 anywhere in the message (the runtime rejects those), a NUL in
 * a string the decoder stores, a span without 16-byte trace id or 8-byte span id, a parent id of another
 * length than 0 or 8, a missing/zero/too large time or an end before the start, a kind or status code out of
 * range, a nested array or key/value-list attribute, a string-table reference (`*_strindex`), a bool that is
 * not 0 or 1, a subnormal double or an exact power of two it cannot print with certainty, an attribute key
 * twice in one list (a dict keeps the first place and the last value), a `service.name` that is not a
 * string, an event time or name twice, and an attribute named `budgetscope.events` on a span with events.
 * Span events are kept as the reference keeps them: under `budgetscope.events`, after the span's attributes,
 * a list of {"name": null when empty, "time_unix_nano", "attributes"} in wire order. Fields the reference
 * ignores (links, trace state, flags, scope version and attributes, schema urls, dropped counts, unknown
 * fields) are checked as the protobuf runtime checks them, and otherwise skipped.
 */

#include <float.h>
#include <math.h>

/* ---------------------------------------------------------------------------------------------------------- */
/* wire format */

typedef struct {
    const unsigned char *p, *end;
} W;

static inline int pb_varint(W *w, uint64_t *out) {
    const unsigned char *p = w->p, *end = w->end;
    if (p < end && *p < 0x80) {
        *out = *p;
        w->p = p + 1;
        return 0;
    }
    uint64_t v = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
        if (p >= end) return BAIL;
        unsigned c = *p++;
        if (shift == 63 && c > 1) return BAIL; /* past 64 bits, or an 11th byte */
        v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) {
            *out = v;
            w->p = p;
            return 0;
        }
    }
    return BAIL;
}

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

static inline int pb_tag(W *w, uint32_t *field, unsigned *wt) {
    uint64_t t;
    TRY(pb_varint(w, &t));
    if (t > 0xFFFFFFFFu || (t >> 3) == 0) return BAIL;
    *field = (uint32_t)(t >> 3);
    *wt = (unsigned)(t & 7);
    return 0;
}

/* A length-delimited field's bytes. */
static inline int pb_len(W *w, W *out) {
    uint64_t n;
    TRY(pb_varint(w, &n));
    if (n > (uint64_t)(w->end - w->p)) return BAIL;
    out->p = w->p;
    out->end = w->p + n;
    w->p += n;
    return 0;
}

static inline int pb_fixed64(W *w, uint64_t *v) {
    if (w->end - w->p < 8) return BAIL;
    uint64_t x = 0;
    for (int k = 7; k >= 0; k--) x = x << 8 | w->p[k]; /* little-endian on the wire: one load on x86/arm64 */
    *v = x;
    w->p += 8;
    return 0;
}

/* Skip a field the schema does not know (protobuf keeps it as an unknown field): any well-formed value but
 * a group. */
static int pb_skip(W *w, unsigned wt) {
    uint64_t v;
    W s;
    switch (wt) {
    case WT_VARINT: return pb_varint(w, &v);
    case WT_I64: return pb_fixed64(w, &v);
    case WT_LEN: return pb_len(w, &s);
    case WT_I32:
        if (w->end - w->p < 4) return BAIL;
        w->p += 4;
        return 0;
    default: return BAIL; /* groups (3, 4); 6 and 7 are no wire type */
    }
}

/* Valid UTF-8, as the protobuf runtime wants every string field: no overlong forms, no surrogates. */
static int utf8_ok(const unsigned char *p, const unsigned char *end) {
    while (p < end) {
        while (end - p >= 8) {
            uint64_t x;
            memcpy(&x, p, 8);
            if (x & 0x8080808080808080ULL) break;
            p += 8;
        }
        while (p < end && *p < 0x80) p++;
        if (p >= end) break;
        int n = utf8_len(p, end);
        if (!n) return BAIL;
        p += n;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* the schema: every field of every message an export can hold, by number, with what it holds. Fields the
 * decoder does not read are checked against it (wire type; UTF-8 of strings; sub-messages, recursively). The
 * table mirrors opentelemetry-proto's descriptors; tests/test_otlp_proto_fast.py compares the two. */

enum { T_NONE, T_VARINT, T_I64, T_I32, T_BYTES, T_STRING, T_MSG };
enum {
    M_REQUEST, M_RESOURCE_SPANS, M_RESOURCE, M_SCOPE_SPANS, M_SCOPE, M_SPAN, M_EVENT, M_LINK, M_STATUS, M_KEYVALUE,
    M_ANYVALUE, M_ARRAY, M_KVLIST, M_ENTITYREF, N_MSG
};
#define MAX_FIELD 16
#define MSG(m) (T_MSG + (m))

static const char *const MSG_NAMES[N_MSG] = {
    "opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest",
    "opentelemetry.proto.trace.v1.ResourceSpans",
    "opentelemetry.proto.resource.v1.Resource",
    "opentelemetry.proto.trace.v1.ScopeSpans",
    "opentelemetry.proto.common.v1.InstrumentationScope",
    "opentelemetry.proto.trace.v1.Span",
    "opentelemetry.proto.trace.v1.Span.Event",
    "opentelemetry.proto.trace.v1.Span.Link",
    "opentelemetry.proto.trace.v1.Status",
    "opentelemetry.proto.common.v1.KeyValue",
    "opentelemetry.proto.common.v1.AnyValue",
    "opentelemetry.proto.common.v1.ArrayValue",
    "opentelemetry.proto.common.v1.KeyValueList",
    "opentelemetry.proto.common.v1.EntityRef",
};

static const unsigned char SCHEMA[N_MSG][MAX_FIELD + 1] = {
    [M_REQUEST] = {[1] = MSG(M_RESOURCE_SPANS)},
    [M_RESOURCE_SPANS] = {[1] = MSG(M_RESOURCE), [2] = MSG(M_SCOPE_SPANS), [3] = T_STRING},
    [M_RESOURCE] = {[1] = MSG(M_KEYVALUE), [2] = T_VARINT, [3] = MSG(M_ENTITYREF)},
    [M_SCOPE_SPANS] = {[1] = MSG(M_SCOPE), [2] = MSG(M_SPAN), [3] = T_STRING},
    [M_SCOPE] = {[1] = T_STRING, [2] = T_STRING, [3] = MSG(M_KEYVALUE), [4] = T_VARINT},
    [M_SPAN] = {[1] = T_BYTES, [2] = T_BYTES, [3] = T_STRING, [4] = T_BYTES, [5] = T_STRING, [6] = T_VARINT,
                [7] = T_I64, [8] = T_I64, [9] = MSG(M_KEYVALUE), [10] = T_VARINT, [11] = MSG(M_EVENT),
                [12] = T_VARINT, [13] = MSG(M_LINK), [14] = T_VARINT, [15] = MSG(M_STATUS), [16] = T_I32},
    [M_EVENT] = {[1] = T_I64, [2] = T_STRING, [3] = MSG(M_KEYVALUE), [4] = T_VARINT},
    [M_LINK] = {[1] = T_BYTES, [2] = T_BYTES, [3] = T_STRING, [4] = MSG(M_KEYVALUE), [5] = T_VARINT, [6] = T_I32},
    [M_STATUS] = {[2] = T_STRING, [3] = T_VARINT},
    [M_KEYVALUE] = {[1] = T_STRING, [2] = MSG(M_ANYVALUE), [3] = T_VARINT},
    [M_ANYVALUE] = {[1] = T_STRING, [2] = T_VARINT, [3] = T_VARINT, [4] = T_I64, [5] = MSG(M_ARRAY),
                    [6] = MSG(M_KVLIST), [7] = T_BYTES, [8] = T_VARINT},
    [M_ARRAY] = {[1] = MSG(M_ANYVALUE)},
    [M_KVLIST] = {[1] = MSG(M_KEYVALUE)},
    [M_ENTITYREF] = {[1] = T_STRING, [2] = T_STRING, [3] = T_STRING, [4] = T_STRING},
};

static const unsigned char WIRE_OF[T_MSG] = {
    [T_VARINT] = WT_VARINT, [T_I64] = WT_I64, [T_I32] = WT_I32, [T_BYTES] = WT_LEN, [T_STRING] = WT_LEN};

#define MAX_DEPTH 32 /* the protobuf runtime allows 100; deeper than this bails */

static int pb_validate(W w, int m, int depth);

/* A field of message `m` the decoder does not read: checked as the runtime checks it, then skipped. */
static int pb_field(W *w, int m, uint32_t field, unsigned wt, int depth) {
    int t = field <= MAX_FIELD ? SCHEMA[m][field] : T_NONE;
    if (t == T_NONE) return pb_skip(w, wt);
    if (wt != (t >= T_MSG ? WT_LEN : WIRE_OF[t])) return BAIL; /* the runtime keeps it as unknown: not here */
    if (t >= T_MSG) {
        W s;
        TRY(pb_len(w, &s));
        return pb_validate(s, t - T_MSG, depth + 1);
    }
    if (t == T_STRING) {
        W s;
        TRY(pb_len(w, &s));
        return utf8_ok(s.p, s.end);
    }
    return pb_skip(w, wt);
}

static int pb_validate(W w, int m, int depth) {
    if (depth > MAX_DEPTH) return BAIL;
    while (w.p < w.end) {
        uint32_t field;
        unsigned wt;
        TRY(pb_tag(&w, &field, &wt));
        TRY(pb_field(&w, m, field, wt, depth));
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* values, as orjson writes them */

/* Bytes orjson escapes or that need a UTF-8 check: controls, quote, backslash, and everything from 0x80. */
static unsigned char JSON_SPECIAL[256];

static void init_proto_tables(void) {
    for (int c = 0; c < 0x20; c++) JSON_SPECIAL[c] = 1;
    JSON_SPECIAL['"'] = JSON_SPECIAL['\\'] = 1;
    for (int c = 0x80; c < 256; c++) JSON_SPECIAL[c] = 1;
}

/* A protobuf string as a JSON string literal: quote, backslash, \b \t \n \f \r by name, other controls as
 * \u00xx (lowercase), the rest as is. Not UTF-8, or a NUL: bail. */
static int pb_json_string(Buf *b, const unsigned char *p, const unsigned char *end) {
    if (b->len + (size_t)(end - p) + 2 > b->cap && buf_grow(b, (size_t)(end - p) + 2)) return BAIL;
    b->p[b->len++] = '"';
    while (p < end) {
        const unsigned char *q = skip_plain16(p, end);
        while (q < end && !JSON_SPECIAL[*q]) q++;
        TRY(buf_put(b, p, (size_t)(q - p)));
        if (q >= end) break;
        unsigned c = *q;
        if (c >= 0x80) {
            int n = utf8_len(q, end);
            if (!n) return BAIL;
            TRY(buf_put(b, q, (size_t)n));
            p = q + n;
            continue;
        }
        if (c == 0) return BAIL;
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
            esc[4] = "0123456789abcdef"[c >> 4];
            esc[5] = "0123456789abcdef"[c & 15];
            n = 6;
        }
        TRY(buf_put(b, esc, n));
        p = q + 1;
    }
    return buf_putc(b, '"');
}

/* A string stored as it is (name, scope, service): UTF-8 without NUL. */
static int pb_plain_string(Buf *b, const unsigned char *p, const unsigned char *end) {
    if (memchr(p, 0, (size_t)(end - p))) return BAIL;
    TRY(utf8_ok(p, end));
    return buf_put(b, p, (size_t)(end - p));
}

static int put_i64(Buf *b, int64_t v) {
    char t[24];
    int n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        t[sizeof t - 1 - n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) t[sizeof t - 1 - n++] = '-';
    return buf_put(b, t + sizeof t - n, (size_t)n);
}

static int put_base64(Buf *b, const unsigned char *p, const unsigned char *end) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = (size_t)(end - p), out = 4 * ((n + 2) / 3) + 2;
    if (b->len + out > b->cap && buf_grow(b, out)) return BAIL;
    char *o = b->p + b->len;
    *o++ = '"';
    for (; end - p >= 3; p += 3) {
        uint32_t x = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
        *o++ = A[x >> 18];
        *o++ = A[(x >> 12) & 63];
        *o++ = A[(x >> 6) & 63];
        *o++ = A[x & 63];
    }
    if (end - p == 1) {
        *o++ = A[p[0] >> 2];
        *o++ = A[(p[0] & 3) << 4];
        *o++ = '=';
        *o++ = '=';
    } else if (end - p == 2) {
        *o++ = A[p[0] >> 2];
        *o++ = A[((p[0] & 3) << 4) | (p[1] >> 4)];
        *o++ = A[(p[1] & 15) << 2];
        *o++ = '=';
    }
    *o++ = '"';
    b->len = (size_t)(o - b->p);
    return 0;
}

/* The digits of a positive double when a decimal of at most 15 significant digits reads back as it (most
 * doubles a program writes: timestamps in seconds to the microsecond, rates, ratios), without printf: 0 when
 * none does (the caller asks printf). With k digits after the point, the only candidate is M = a * 10^k
 * rounded to an integer (M < 10^15, so the product's rounding error is far below 0.5); M / 10^k is one
 * correctly rounded division of two exact doubles, so it equals `a` exactly when the decimal M·10^-k reads
 * back as `a` (strtod rounds correctly too). The smallest such k gives the fewest digits, and at 15 digits or
 * fewer no other decimal of that length reads back as `a`: the same digits printf's 15-digit rounding gives.
 * `dig`: the digits of M (trailing zeros included), `e`: the decimal exponent of the first. */
static int short_digits(double a, char *dig, int *nd, int *e) {
    static const double P10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    for (int k = 0; k <= 22; k++) {
        double m = nearbyint(a * P10[k]);
        if (m >= 1e15) return 0;
        if (m < 1 || m / P10[k] != a) continue;
        char t[20];
        int n = 0;
        for (uint64_t u = (uint64_t)m; u; u /= 10) t[n++] = (char)('0' + u % 10);
        for (int i = 0; i < n; i++) dig[i] = t[n - 1 - i];
        *nd = n;
        *e = n - 1 - k;
        return 1;
    }
    return 0;
}

/* A double as orjson writes a Python float: the shortest digits that read back as the same double (the
 * closest such), plain from 1e-5 up to 1e16 (".0" on integers), else d.ddde+XX / d.ddde-XX.
 *
 * The digits come from printf, which rounds exactly: at 15 significant digits or fewer, at most one decimal
 * reads back as a given double, so when the 15-digit rounding reads back, it is the shortest form with its
 * trailing zeros; otherwise the shortest has 16 or 17 digits, and the 16-digit rounding, being the closest of
 * its length, is it when it reads back (the 17-digit one always does). That reasoning needs the double's
 * round-trip interval to be symmetric: at an exact power of two it is not, and those bail unless their
 * 15-digit form reads back. Subnormals bail too. */
static int put_double(Buf *b, double v) {
    if (v != v) return buf_put(b, "\"NaN\"", 5);
    if (v == HUGE_VAL) return buf_put(b, "\"Infinity\"", 10);
    if (v == -HUGE_VAL) return buf_put(b, "\"-Infinity\"", 11);
    uint64_t bits;
    memcpy(&bits, &v, 8);
    int neg = (int)(bits >> 63);
    if (v == 0) return neg ? buf_put(b, "-0.0", 4) : buf_put(b, "0.0", 3);
    double a = neg ? -v : v;
    if (a < DBL_MIN) return BAIL;
    char dig[20];
    int nd = 0, e;
    if (!short_digits(a, dig, &nd, &e)) {
        int pow2 = (bits & (((uint64_t)1 << 52) - 1)) == 0;
        char s[48];
        for (int p = 15;; p++) {
            snprintf(s, sizeof s, "%.*e", p - 1, a);
            if (p == 17 || strtod(s, NULL) == a) break;
            if (pow2) return BAIL;
        }
        /* s: d[.ddd]e±XX, the point as the locale writes it (strtod read it the same way) */
        const char *q = s;
        for (; *q && *q != 'e'; q++)
            if (*q >= '0' && *q <= '9') {
                if (nd >= 17) return BAIL;
                dig[nd++] = *q;
            }
        if (*q != 'e') return BAIL;
        e = (int)strtol(q + 1, NULL, 10);
    }
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    if (dig[0] == '0') return BAIL; /* cannot happen for a normal, non-zero double */
    if (neg) TRY(buf_putc(b, '-'));
    if (e >= -5 && e < 16) {
        int point = e + 1; /* digits before the decimal point */
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
    TRY(buf_putc(b, dig[0]));
    if (nd > 1) {
        TRY(buf_putc(b, '.'));
        TRY(buf_put(b, dig + 1, (size_t)(nd - 1)));
    }
    char t[8];
    int n = snprintf(t, sizeof t, "e%c%d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    return buf_put(b, t, (size_t)n);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* messages */

enum { V_NULL, V_STRING, V_OTHER }; /* what an AnyValue held, for service.name */

/* One AnyValue, written as JSON. `in_array`: a nested array (or any key/value list) bails. `str` receives a
 * string value's bytes. */
static int pb_any(W w, Buf *b, int in_array, W *str, int *kind, int depth) {
    int have = 0;
    *kind = V_NULL;
    while (w.p < w.end) {
        uint32_t field;
        unsigned wt;
        uint64_t v;
        W s;
        TRY(pb_tag(&w, &field, &wt));
        if (field > 8) {
            TRY(pb_skip(&w, wt));
            continue;
        }
        if (have++) return BAIL; /* a second value: the last one wins in protobuf */
        *kind = V_OTHER;
        switch (field) {
        case 1: /* string_value */
            if (wt != WT_LEN) return BAIL;
            TRY(pb_len(&w, &s));
            TRY(pb_json_string(b, s.p, s.end));
            *kind = V_STRING;
            if (str) *str = s;
            break;
        case 2: /* bool_value */
            if (wt != WT_VARINT) return BAIL;
            TRY(pb_varint(&w, &v));
            if (v > 1) return BAIL;
            TRY(v ? buf_put(b, "true", 4) : buf_put(b, "false", 5));
            break;
        case 3: /* int_value */
            if (wt != WT_VARINT) return BAIL;
            TRY(pb_varint(&w, &v));
            TRY(put_i64(b, (int64_t)v));
            break;
        case 4: { /* double_value */
            double d;
            if (wt != WT_I64) return BAIL;
            TRY(pb_fixed64(&w, &v));
            memcpy(&d, &v, 8);
            TRY(put_double(b, d));
            break;
        }
        case 5: { /* array_value */
            if (wt != WT_LEN || in_array || depth >= MAX_DEPTH) return BAIL;
            TRY(pb_len(&w, &s));
            int first = 1;
            TRY(buf_putc(b, '['));
            while (s.p < s.end) {
                TRY(pb_tag(&s, &field, &wt));
                if (field == 1) {
                    W e;
                    int k;
                    if (wt != WT_LEN) return BAIL;
                    TRY(pb_len(&s, &e));
                    if (!first) TRY(buf_putc(b, ','));
                    first = 0;
                    TRY(pb_any(e, b, 1, NULL, &k, depth + 1));
                } else
                    TRY(pb_skip(&s, wt));
            }
            TRY(buf_putc(b, ']'));
            break;
        }
        case 7: /* bytes_value */
            if (wt != WT_LEN) return BAIL;
            TRY(pb_len(&w, &s));
            TRY(put_base64(b, s.p, s.end));
            break;
        default: return BAIL; /* kvlist_value (6), string_value_strindex (8) */
        }
    }
    if (!have) return buf_put(b, "null", 4);
    return 0;
}

/* One KeyValue of the list whose keys `ks` holds, appended to the JSON object being written in b (`first`: no
 * comma before it). With `service` (resource attributes), a string `service.name` is copied there (+ a NUL:
 * "present"); another kind bails. */
static int pb_keyvalue(W w, Buf *b, int first, Buf *service, KeySet *ks, int depth) {
    W key = {w.p, w.p}, val = {NULL, NULL};
    int has_key = 0, has_val = 0;
    while (w.p < w.end) {
        uint32_t field;
        unsigned wt;
        TRY(pb_tag(&w, &field, &wt));
        if (field == 1) {
            if (wt != WT_LEN || has_key++) return BAIL;
            TRY(pb_len(&w, &key));
        } else if (field == 2) {
            if (wt != WT_LEN || has_val++) return BAIL;
            TRY(pb_len(&w, &val));
        } else
            TRY(pb_field(&w, M_KEYVALUE, field, wt, depth));
    }
    TRY(ks_add(ks, key.p, (size_t)(key.end - key.p)));
    if (!first) TRY(buf_putc(b, ','));
    TRY(pb_json_string(b, key.p, key.end));
    TRY(buf_putc(b, ':'));
    int is_service = service && key.end - key.p == 12 && memcmp(key.p, "service.name", 12) == 0;
    if (!has_val) return buf_put(b, "null", 4);
    W str;
    int kind;
    TRY(pb_any(val, b, 0, &str, &kind, depth + 1));
    if (is_service) {
        if (kind == V_OTHER) return BAIL; /* the reference would store a non-string in a string column */
        if (kind == V_STRING) {
            TRY(pb_plain_string(service, str.p, str.end));
            TRY(buf_putc(service, 0));
        }
    }
    return 0;
}

static int pb_resource(W w, Resource *r, int depth) {
    int first = 1;
    ks_reset(&span_keys);
    r->json.len = 0;
    TRY(buf_putc(&r->json, '{'));
    while (w.p < w.end) {
        uint32_t field;
        unsigned wt;
        TRY(pb_tag(&w, &field, &wt));
        if (field == 1) {
            W kv;
            if (wt != WT_LEN) return BAIL;
            TRY(pb_len(&w, &kv));
            TRY(pb_keyvalue(kv, &r->json, first, &r->service, &span_keys, depth + 1));
            first = 0;
        } else
            TRY(pb_field(&w, M_RESOURCE, field, wt, depth));
    }
    return buf_putc(&r->json, '}');
}

static const char HEXDIGITS[] = "0123456789abcdef";

static int put_hex(Buf *b, const unsigned char *p, size_t n) {
    if (b->len + 2 * n > b->cap && buf_grow(b, 2 * n)) return BAIL;
    char *o = b->p + b->len;
    for (size_t k = 0; k < n; k++) {
        o[2 * k] = HEXDIGITS[p[k] >> 4];
        o[2 * k + 1] = HEXDIGITS[p[k] & 15];
    }
    b->len += 2 * n;
    return 0;
}

static int pb_status(W w, int *code, int depth) {
    int seen = 0;
    while (w.p < w.end) {
        uint32_t field;
        unsigned wt;
        TRY(pb_tag(&w, &field, &wt));
        if (field == 3) {
            uint64_t v;
            if (wt != WT_VARINT || seen++) return BAIL;
            TRY(pb_varint(&w, &v));
            if (v > 2) return BAIL;
            *code = (int)v;
        } else
            TRY(pb_field(&w, M_STATUS, field, wt, depth));
    }
    return 0;
}

static int put_u64(Buf *b, uint64_t v) {
    char t[24];
    int n = 0;
    do {
        t[sizeof t - 1 - n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return buf_put(b, t + sizeof t - n, (size_t)n);
}

/* One Span.Event, appended to `ev` as the reference decoder keeps it: {"name": its name or null when empty,
 * "time_unix_nano": the time as sent (0 when absent), "attributes": {…}}. Its attributes are gathered in
 * `ev_attrs` first: the fields may come in any order. */
static Buf ev_attrs;

static int pb_event(W w, Buf *ev, int depth) {
    W name = {w.p, w.p}, s;
    uint64_t time = 0;
    int seen_time = 0, seen_name = 0, first = 1;
    ks_reset(&event_keys);
    ev_attrs.len = 0;
    TRY(buf_putc(&ev_attrs, '{'));
    while (w.p < w.end) {
        uint32_t field;
        unsigned wt;
        TRY(pb_tag(&w, &field, &wt));
        if (field == 1) {
            if (wt != WT_I64 || seen_time++) return BAIL; /* twice: protobuf keeps the last */
            TRY(pb_fixed64(&w, &time));
        } else if (field == 2) {
            if (wt != WT_LEN || seen_name++) return BAIL;
            TRY(pb_len(&w, &name));
        } else if (field == 3) {
            if (wt != WT_LEN) return BAIL;
            TRY(pb_len(&w, &s));
            TRY(pb_keyvalue(s, &ev_attrs, first, NULL, &event_keys, depth + 1));
            first = 0;
        } else
            TRY(pb_field(&w, M_EVENT, field, wt, depth));
    }
    TRY(buf_putc(&ev_attrs, '}'));
    TRY(buf_put(ev, "{\"name\":", 8));
    TRY(name.end > name.p ? pb_json_string(ev, name.p, name.end) : buf_put(ev, "null", 4));
    TRY(buf_put(ev, ",\"time_unix_nano\":", 18));
    TRY(put_u64(ev, time));
    TRY(buf_put(ev, ",\"attributes\":", 14));
    TRY(buf_put(ev, ev_attrs.p, ev_attrs.len));
    return buf_putc(ev, '}');
}

static Buf span_events; /* the events of the span being decoded, as JSON, comma-separated */

static int pb_span(W w, Out *o, int64_t batch_id, const Resource *r, W scope, int depth) {
    W trace = {0}, sid = {0}, parent = {0}, s;
    unsigned seen = 0;
    int kind = 0, code = 0, first = 1, events = 0;
    uint64_t start = 0, end = 0;
    StrCol *c = o->s;
    Buf *attrs = &c[C_ATTRS].data;
    ks_reset(&span_keys);
    span_events.len = 0;
    TRY(buf_putc(attrs, '{'));
    while (w.p < w.end) {
        uint32_t field;
        unsigned wt;
        TRY(pb_tag(&w, &field, &wt));
        unsigned bit = field <= MAX_FIELD ? 1u << field : 0;
        switch (field) {
        case 1: case 2: case 4: case 5: case 6: case 7: case 8: case 15:
            if (seen & bit) return BAIL; /* once at most: protobuf keeps the last (or merges) */
            seen |= bit;
            break;
        default: break;
        }
        switch (field) {
        case 1:
            if (wt != WT_LEN) return BAIL;
            TRY(pb_len(&w, &trace));
            break;
        case 2:
            if (wt != WT_LEN) return BAIL;
            TRY(pb_len(&w, &sid));
            break;
        case 4:
            if (wt != WT_LEN) return BAIL;
            TRY(pb_len(&w, &parent));
            break;
        case 5:
            if (wt != WT_LEN) return BAIL;
            TRY(pb_len(&w, &s));
            TRY(pb_plain_string(&c[C_NAME].data, s.p, s.end));
            break;
        case 6: {
            uint64_t v;
            if (wt != WT_VARINT) return BAIL;
            TRY(pb_varint(&w, &v));
            if (v > 5) return BAIL;
            kind = (int)v;
            break;
        }
        case 7:
            if (wt != WT_I64) return BAIL;
            TRY(pb_fixed64(&w, &start));
            break;
        case 8:
            if (wt != WT_I64) return BAIL;
            TRY(pb_fixed64(&w, &end));
            break;
        case 9:
            if (wt != WT_LEN) return BAIL;
            TRY(pb_len(&w, &s));
            TRY(pb_keyvalue(s, attrs, first, NULL, &span_keys, depth + 1));
            first = 0;
            break;
        case 15:
            if (wt != WT_LEN) return BAIL;
            TRY(pb_len(&w, &s));
            TRY(pb_status(s, &code, depth + 1));
            break;
        case 11: /* an event: kept in the attributes, as the reference decoder keeps them */
            if (wt != WT_LEN) return BAIL;
            TRY(pb_len(&w, &s));
            if (events++) TRY(buf_putc(&span_events, ','));
            TRY(pb_event(s, &span_events, depth + 1));
            break;
        default: TRY(pb_field(&w, M_SPAN, field, wt, depth));
        }
    }
    /* what the reference path words as an error is its to decide */
    if (trace.end - trace.p != 16 || sid.end - sid.p != 8) return BAIL;
    if (parent.end - parent.p != 0 && parent.end - parent.p != 8) return BAIL;
    if (!start || !end || start > (uint64_t)INT64_MAX || end > (uint64_t)INT64_MAX || end < start) return BAIL;
    if (events) { /* after the attributes, as the reference adds them to its dict; an attribute of that name bails */
        if (ks_has(&span_keys, EVENTS_KEY, sizeof EVENTS_KEY - 1)) return BAIL;
        if (!first) TRY(buf_putc(attrs, ','));
        TRY(buf_put(attrs, "\"" EVENTS_KEY "\":[", sizeof EVENTS_KEY + 3));
        TRY(buf_put(attrs, span_events.p, span_events.len));
        TRY(buf_putc(attrs, ']'));
    }
    TRY(buf_putc(attrs, '}'));
    TRY(put_hex(&c[C_TRACE].data, trace.p, 16));
    TRY(col_end(&c[C_TRACE], 1));
    TRY(put_hex(&c[C_SPAN].data, sid.p, 8));
    TRY(col_end(&c[C_SPAN], 1));
    if (parent.end - parent.p) TRY(put_hex(&c[C_PARENT].data, parent.p, 8));
    TRY(col_end(&c[C_PARENT], parent.end - parent.p != 0));
    TRY(col_end(&c[C_NAME], 1));
    TRY(buf_put(&c[C_KIND].data, KINDS[kind], strlen(KINDS[kind])));
    TRY(col_end(&c[C_KIND], 1));
    if (r->service.len) TRY(buf_put(&c[C_SERVICE].data, r->service.p, r->service.len - 1));
    TRY(col_end(&c[C_SERVICE], r->service.len > 0));
    if (scope.end > scope.p) TRY(buf_put(&c[C_SCOPE].data, scope.p, (size_t)(scope.end - scope.p)));
    TRY(col_end(&c[C_SCOPE], scope.end > scope.p)); /* an empty scope name is NULL, as `name or None` */
    TRY(buf_put(&c[C_STATUS].data, STATUSES[code], strlen(STATUSES[code])));
    TRY(col_end(&c[C_STATUS], 1));
    TRY(col_end(&c[C_ATTRS], 1));
    TRY(buf_put(&c[C_RESOURCE].data, r->json.p, r->json.len));
    TRY(col_end(&c[C_RESOURCE], 1));
    TRY(buf_i64(&o->i[I_BATCH], batch_id));
    TRY(buf_i64(&o->i[I_START], (int64_t)start));
    TRY(buf_i64(&o->i[I_END], (int64_t)end));
    o->rows++;
    return 0;
}

/* The scope's name (checked for a NUL and UTF-8); its other fields are checked and skipped. */
static int pb_scope(W w, W *name, int depth) {
    int seen = 0;
    while (w.p < w.end) {
        uint32_t field;
        unsigned wt;
        TRY(pb_tag(&w, &field, &wt));
        if (field == 1) {
            if (wt != WT_LEN || seen++) return BAIL;
            TRY(pb_len(&w, name));
            if (memchr(name->p, 0, (size_t)(name->end - name->p))) return BAIL;
            TRY(utf8_ok(name->p, name->end));
        } else
            TRY(pb_field(&w, M_SCOPE, field, wt, depth));
    }
    return 0;
}

/* ResourceSpans and ScopeSpans are read twice: first for the resource (scope) and the fields the decoder
 * skips, wherever they lie, then for the scope spans (spans). */
static int pb_scope_spans(W w, Out *o, int64_t batch_id, const Resource *r, int depth) {
    W scope = {w.p, w.p}, pass = w;
    int seen_scope = 0;
    while (w.p < w.end) {
        uint32_t field;
        unsigned wt;
        W s;
        TRY(pb_tag(&w, &field, &wt));
        if (field == 1) {
            if (wt != WT_LEN || seen_scope++) return BAIL;
            TRY(pb_len(&w, &s));
            TRY(pb_scope(s, &scope, depth + 1));
        } else if (field == 2) {
            if (wt != WT_LEN) return BAIL;
            TRY(pb_len(&w, &s));
        } else
            TRY(pb_field(&w, M_SCOPE_SPANS, field, wt, depth));
    }
    w = pass;
    while (w.p < w.end) {
        uint32_t field;
        unsigned wt;
        W s;
        TRY(pb_tag(&w, &field, &wt));
        if (field == 2) {
            TRY(pb_len(&w, &s));
            TRY(pb_span(s, o, batch_id, r, scope, depth + 1));
        } else
            TRY(pb_skip(&w, wt));
    }
    return 0;
}

static int pb_resource_spans(W w, Out *o, int64_t batch_id, Resource *r, int depth) {
    W pass = w;
    int seen_res = 0;
    r->service.len = 0;
    r->json.len = 0;
    TRY(buf_put(&r->json, "{}", 2));
    while (w.p < w.end) {
        uint32_t field;
        unsigned wt;
        W s;
        TRY(pb_tag(&w, &field, &wt));
        if (field == 1) {
            if (wt != WT_LEN || seen_res++) return BAIL;
            TRY(pb_len(&w, &s));
            TRY(pb_resource(s, r, depth + 1));
        } else if (field == 2) {
            if (wt != WT_LEN) return BAIL;
            TRY(pb_len(&w, &s));
        } else
            TRY(pb_field(&w, M_RESOURCE_SPANS, field, wt, depth));
    }
    w = pass;
    while (w.p < w.end) {
        uint32_t field;
        unsigned wt;
        W s;
        TRY(pb_tag(&w, &field, &wt));
        if (field == 2) {
            TRY(pb_len(&w, &s));
            TRY(pb_scope_spans(s, o, batch_id, r, depth + 1));
        } else
            TRY(pb_skip(&w, wt));
    }
    return 0;
}

/* One serialized ExportTraceServiceRequest. Empty, or without resource spans: the reference decides. */
static int proto_batch(const unsigned char *p, size_t n, Out *o, int64_t batch_id, Resource *r) {
    W w = {p, p + n};
    int seen = 0;
    if (!n) return BAIL;
    while (w.p < w.end) {
        uint32_t field;
        unsigned wt;
        TRY(pb_tag(&w, &field, &wt));
        if (field == 1) {
            W s;
            if (wt != WT_LEN) return BAIL;
            TRY(pb_len(&w, &s));
            TRY(pb_resource_spans(s, o, batch_id, r, 1));
            seen = 1;
        } else
            TRY(pb_field(&w, M_REQUEST, field, wt, 0));
    }
    return seen ? 0 : BAIL;
}

/* The schema table, for the test that holds it to the installed descriptors: {message: {field: type}}, type
 * one of varint, fixed64, fixed32, bytes, string, or a message's full name. */
static PyObject *py_proto_schema(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    static const char *const TYPES[] = {"", "varint", "fixed64", "fixed32", "bytes", "string"};
    PyObject *out = PyDict_New();
    if (!out) return NULL;
    for (int m = 0; m < N_MSG; m++) {
        PyObject *fields = PyDict_New();
        if (!fields || PyDict_SetItemString(out, MSG_NAMES[m], fields) < 0) {
            Py_XDECREF(fields);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(fields);
        for (int f = 1; f <= MAX_FIELD; f++) {
            int t = SCHEMA[m][f];
            if (t == T_NONE) continue;
            PyObject *k = PyLong_FromLong(f), *v = PyUnicode_FromString(t >= T_MSG ? MSG_NAMES[t - T_MSG] : TYPES[t]);
            int bad = !k || !v || PyDict_SetItem(fields, k, v) < 0;
            Py_XDECREF(k);
            Py_XDECREF(v);
            if (bad) {
                Py_DECREF(out);
                return NULL;
            }
        }
    }
    return out;
}
