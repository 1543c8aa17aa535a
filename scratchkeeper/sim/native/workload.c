/*
 * workload.c - see workload.h. The SWF parser takes only what it reads exactly as Python's
 * int() and float() do (plain decimal digits); the draws follow CPython 3.11's
 * Modules/_randommodule.c (genrand_uint32, random, getrandbits) and Lib/random.py
 * (normalvariate, lognormvariate, _randbelow_with_getrandbits, sample).
 */
#include "workload.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* the longest line the Python reader accepts (traces.MAX_LINE) */
#define _MAX_LINE (1 << 20)
/* 15 digits stay below 2**53, the Python reader's VALUE_LIMIT */
#define _MAX_DIGITS 15
#define _VALUE_LIMIT 9007199254740992.0

static int _grow(struct sk_swf *out)
{
    int64_t capacity = out->capacity ? out->capacity * 2 : 4096;
    int64_t *ints = realloc(out->ints, (size_t)capacity * SK_SWF_FIELDS * sizeof *ints);
    if (!ints)
        return -1;
    out->ints = ints;
    double *floats = realloc(out->floats, (size_t)capacity * 2 * sizeof *floats);
    if (!floats)
        return -1;
    out->floats = floats;
    out->capacity = capacity;
    return 0;
}

static int _add_header(struct sk_swf *out, int64_t offset, int64_t length)
{
    if (out->header_lines == out->header_capacity) {
        int64_t capacity = out->header_capacity ? out->header_capacity * 2 : 64;
        int64_t *headers = realloc(out->headers, (size_t)capacity * 2 * sizeof *headers);
        if (!headers)
            return -1;
        out->headers = headers;
        out->header_capacity = capacity;
    }
    out->headers[2 * out->header_lines] = offset;
    out->headers[2 * out->header_lines + 1] = length;
    out->header_lines++;
    return 0;
}

/* an integral field: -?[0-9]{1,15}; 0 when read */
static int _integer(const char *p, const char *end, int64_t *value)
{
    int negative = p < end && *p == '-';
    p += negative;
    if (p == end || end - p > _MAX_DIGITS)
        return -1;
    int64_t number = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        number = number * 10 + (*p - '0');
    }
    *value = negative ? -number : number;
    return 0;
}

/* a fractional field: -?[0-9]*(.[0-9]*)? with a digit, no exponent; strtod rounds correctly,
 * as float() does */
static int _fraction(const char *p, const char *end, double *value)
{
    char text[64];
    int digits = 0, points = 0;
    if (end - p >= (long)sizeof text)
        return -1;
    for (const char *c = p + (p < end && *p == '-'); c < end; c++) {
        if (*c >= '0' && *c <= '9')
            digits++;
        else if (*c == '.' && !points)
            points++;
        else
            return -1;
    }
    if (!digits)
        return -1;
    memcpy(text, p, (size_t)(end - p));
    text[end - p] = '\0';
    *value = strtod(text, NULL);
    return fabs(*value) <= _VALUE_LIMIT ? 0 : -1;
}

/* one record line [p, end): 18 fields or SK_SWF_NOT_PLAIN */
static int _record(const char *p, const char *end, int64_t *ints, double *floats)
{
    int field = 0;
    while (p < end) {
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (p == end)
            break;
        const char *token = p;
        while (p < end && *p != ' ' && *p != '\t')
            p++;
        if (field >= SK_SWF_FIELDS)
            return SK_SWF_NOT_PLAIN;
        if (field == 5 || field == 6) {
            ints[field] = 0;
            if (_fraction(token, p, &floats[field - 5]))
                return SK_SWF_NOT_PLAIN;
        } else if (_integer(token, p, &ints[field])) {
            return SK_SWF_NOT_PLAIN;
        }
        field++;
    }
    if (field != SK_SWF_FIELDS || ints[1] < 0)
        return SK_SWF_NOT_PLAIN;
    return SK_SWF_OK;
}

int sk_parse_swf(const char *text, size_t length, int64_t limit, struct sk_swf *out)
{
    memset(out, 0, sizeof *out);
    const char *end = text + length;
    for (const char *line = text; line < end;) {
        const char *stop = memchr(line, '\n', (size_t)(end - line));
        if (!stop)
            stop = end;
        if (stop - line > _MAX_LINE || memchr(line, '\r', (size_t)(stop - line)))
            return SK_SWF_NOT_PLAIN;
        const char *p = line;
        while (p < stop && (*p == ' ' || *p == '\t'))
            p++;
        if (p < stop && *p == ';') {
            if (_add_header(out, p - text, stop - p))
                return SK_SWF_E_MEMORY;
        } else if (p < stop) {
            if (!((*p >= '0' && *p <= '9') || *p == '-'))
                return SK_SWF_NOT_PLAIN;
            for (const char *c = p; c < stop; c++)
                if ((unsigned char)*c >= 0x80 || ((unsigned char)*c < 0x20 && *c != '\t'))
                    return SK_SWF_NOT_PLAIN;
            if (out->records == out->capacity && _grow(out))
                return SK_SWF_E_MEMORY;
            int status = _record(p, stop, out->ints + out->records * SK_SWF_FIELDS,
                                 out->floats + out->records * 2);
            if (status)
                return status;
            out->records++;
            if (limit > 0 && out->records >= limit)
                break;
        }
        line = stop + 1;
    }
    return SK_SWF_OK;
}

void sk_swf_free(struct sk_swf *swf)
{
    free(swf->ints);
    free(swf->floats);
    free(swf->headers);
    memset(swf, 0, sizeof *swf);
}

/* ------------------------------------------------------------------------------------------ */
/* Python's Mersenne Twister */

#define _MT_M 397

static uint32_t _genrand(struct sk_mt *mt)
{
    static const uint32_t mag01[2] = {0x0U, 0x9908b0dfU};
    uint32_t *w = mt->words;
    uint32_t y;
    if (mt->index >= SK_MT_WORDS) {
        int kk;
        for (kk = 0; kk < SK_MT_WORDS - _MT_M; kk++) {
            y = (w[kk] & 0x80000000U) | (w[kk + 1] & 0x7fffffffU);
            w[kk] = w[kk + _MT_M] ^ (y >> 1) ^ mag01[y & 0x1U];
        }
        for (; kk < SK_MT_WORDS - 1; kk++) {
            y = (w[kk] & 0x80000000U) | (w[kk + 1] & 0x7fffffffU);
            w[kk] = w[kk + (_MT_M - SK_MT_WORDS)] ^ (y >> 1) ^ mag01[y & 0x1U];
        }
        y = (w[SK_MT_WORDS - 1] & 0x80000000U) | (w[0] & 0x7fffffffU);
        w[SK_MT_WORDS - 1] = w[_MT_M - 1] ^ (y >> 1) ^ mag01[y & 0x1U];
        mt->index = 0;
    }
    y = w[mt->index++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= (y >> 18);
    return y;
}

static double _random(struct sk_mt *mt)
{
    uint32_t a = _genrand(mt) >> 5, b = _genrand(mt) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

/* random._randbelow_with_getrandbits(n), 0 < n < 2**31 */
static int64_t _randbelow(struct sk_mt *mt, int64_t n)
{
    int bits = 0;
    while ((n >> bits) != 0)
        bits++;
    int64_t r = (int64_t)(_genrand(mt) >> (32 - bits));
    while (r >= n)
        r = (int64_t)(_genrand(mt) >> (32 - bits));
    return r;
}

static double _lognormvariate(struct sk_mt *mt, double mu, double sigma)
{
    const double magic = 4 * exp(-0.5) / sqrt(2.0);     /* random.NV_MAGICCONST */
    double z;
    for (;;) {
        double u1 = _random(mt);
        double u2 = 1.0 - _random(mt);
        z = magic * (u1 - 0.5) / u2;
        double zz = z * z / 4.0;
        if (zz <= -log(u2))
            break;
    }
    return exp(mu + z * sigma);
}

int sk_draw_inputs(struct sk_mt *mt, int64_t count, double mu, double sigma, int64_t n, int k,
                   int64_t setsize, double *fallback, int32_t *osts)
{
    int32_t *pool = NULL;
    if (n <= setsize) {
        pool = malloc((size_t)n * sizeof *pool);
        if (!pool)
            return -1;
    }
    for (int64_t job = 0; job < count; job++) {
        fallback[job] = _lognormvariate(mt, mu, sigma);
        int32_t *chosen = osts + job * k;
        if (pool) {
            for (int64_t i = 0; i < n; i++)
                pool[i] = (int32_t)i;
            for (int i = 0; i < k; i++) {
                int64_t j = _randbelow(mt, n - i);
                chosen[i] = pool[j];
                pool[j] = pool[n - i - 1];
            }
            continue;
        }
        for (int i = 0; i < k; i++) {
            int64_t j;
            int again;
            do {
                j = _randbelow(mt, n);
                again = 0;
                for (int s = 0; s < i; s++)
                    again |= chosen[s] == j;
            } while (again);
            chosen[i] = (int32_t)j;
        }
    }
    free(pool);
    return 0;
}
