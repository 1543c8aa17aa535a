#define _GNU_SOURCE
#include "lov.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_U64 ((uint64_t)INT64_MAX)  /* offsets and generations fit a signed off_t */

static int corrupt(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -EIO;
}

/* "0|[1-9][0-9]{0,18}" within [low, high] */
static bool number(const char *s, size_t n, uint64_t low, uint64_t high, uint64_t *out)
{
    if (n == 0 || n > 19 || (s[0] == '0' && n > 1))
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v < low || v > high)
        return false;
    *out = v;
    return true;
}

/* Split [s, s+n) on single spaces into at most max words; returns the count, or -1 if more. */
struct word { const char *s; size_t n; };

static int split(const char *s, size_t n, struct word *words, int max)
{
    int count = 0;
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || s[i] == ' ') {
            if (count == max)
                return -1;
            words[count].s = s + start;
            words[count].n = i - start;
            count++;
            start = i + 1;
        }
    }
    return count;
}

/* A word "name=value" (value not empty): the value, or NULL. */
static const char *field(struct word w, const char *name, size_t *vlen)
{
    size_t nl = strlen(name);
    if (w.n <= nl + 1 || memcmp(w.s, name, nl) != 0 || w.s[nl] != '=')
        return NULL;
    *vlen = w.n - nl - 1;
    return w.s + nl + 1;
}

static bool word_is(struct word w, const char *s)
{
    return w.n == strlen(s) && memcmp(w.s, s, w.n) == 0;
}

static bool stripe_size_ok(const char *s, size_t n, uint64_t *out)
{
    return number(s, n, SK_STRIPE_UNIT, SK_MAX_STRIPE_SIZE, out) && *out % SK_STRIPE_UNIT == 0;
}

static bool pool_ok(const char *s, size_t n)
{
    if (n == 0 || n > 127)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                     (ch >= '0' && ch <= '9') || ch == '_';
        if (!alnum && (i == 0 || (ch != '.' && ch != '+' && ch != '-')))
            return false;
    }
    return true;
}

static const char *const known_flags[] = {"init", "stale", "prefer", "prefrd", "prefwr",
                                          "nosync"};

static bool flags_ok(const char *s, size_t n, bool *init, bool *stale, bool *prefer)
{
    unsigned seen = 0;
    size_t start = 0;
    *init = *stale = *prefer = false;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != ',')
            continue;
        size_t len = i - start;
        unsigned k;
        for (k = 0; k < sizeof known_flags / sizeof *known_flags; k++)
            if (strlen(known_flags[k]) == len && memcmp(known_flags[k], s + start, len) == 0)
                break;
        if (k == sizeof known_flags / sizeof *known_flags || (seen & (1u << k)))
            return false;
        seen |= 1u << k;
        *init |= k == 0;
        *stale |= k == 1;
        *prefer |= k == 2 || k == 3;
        start = i + 1;
    }
    return true;
}

static bool objid_ok(const char *s, size_t n)
{
    if (n != SK_OBJID_LEN)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

void sk_lov_free(struct sk_lov *lov)
{
    if (!lov->comps)
        return;
    for (uint32_t i = 0; i < lov->ncomp; i++)
        free(lov->comps[i].objs);
    free(lov->comps);
    lov->comps = NULL;
    lov->ncomp = 0;
}

static int append_obj(struct sk_comp *c, uint32_t ost, const char *id)
{
    if ((c->count & (c->count - 1)) == 0) {  /* grow at powers of two */
        size_t cap = c->count ? (size_t)c->count * 2 : 4;
        struct sk_obj *objs = realloc(c->objs, cap * sizeof *objs);
        if (!objs)
            return -ENOMEM;
        c->objs = objs;
    }
    c->objs[c->count].ost = ost;
    memcpy(c->objs[c->count].id, id, SK_OBJID_LEN);
    c->objs[c->count].id[SK_OBJID_LEN] = '\0';
    c->count++;
    return 0;
}

/* The first line, "lov 1 gen=G". */
static int parse_header(const struct word *w, int nw, struct sk_lov *lov, char *err,
                        size_t errlen)
{
    size_t vl;
    const char *v;
    if (nw != 3 || !word_is(w[0], "lov"))
        return corrupt(err, errlen, "expected 'lov 1 gen=G' first");
    if (!word_is(w[1], "1"))
        return corrupt(err, errlen, "unknown version %.*s", (int)w[1].n, w[1].s);
    if (!(v = field(w[2], "gen", &vl)) || !number(v, vl, 0, MAX_U64, &lov->gen))
        return corrupt(err, errlen, "bad generation");
    return 0;
}

/* A new component of lov, its room grown at powers of two (*capacity: the room there is). */
static struct sk_comp *append_comp(struct sk_lov *lov, uint32_t *capacity)
{
    if (lov->ncomp == *capacity) {
        uint32_t grown = *capacity ? *capacity * 2 : 4;
        struct sk_comp *comps = realloc(lov->comps, grown * sizeof *comps);
        if (!comps)
            return NULL;
        lov->comps = comps;
        *capacity = grown;
    }
    struct sk_comp *c = &lov->comps[lov->ncomp++];
    memset(c, 0, sizeof *c);
    return c;
}

/* "comp id=I mirror=M start=S end=E stripe_size=Z pattern=raid0 flags=F pool=P" */
static int parse_comp(const struct word *w, int nw, int lineno, struct sk_lov *lov,
                      uint32_t *capacity, char *err, size_t errlen)
{
    static const char *const names[] = {"id", "mirror", "start", "end", "stripe_size",
                                        "pattern", "flags", "pool"};
    const char *v[8];
    size_t vl[8];
    if (nw != 9)
        return corrupt(err, errlen, "line %d: a comp line needs 8 fields", lineno);
    for (int k = 0; k < 8; k++)
        if (!(v[k] = field(w[k + 1], names[k], &vl[k])))
            return corrupt(err, errlen, "line %d: expected %s=...", lineno, names[k]);
    struct sk_comp *c = append_comp(lov, capacity);
    if (!c)
        return -ENOMEM;
    uint64_t id, mirror;
    if (!number(v[0], vl[0], 0, UINT32_MAX, &id) ||
        !number(v[1], vl[1], 0, 65535, &mirror) ||
        !number(v[2], vl[2], 0, MAX_U64, &c->start))
        return corrupt(err, errlen, "line %d: id, mirror or start out of range", lineno);
    c->id = (uint32_t)id;
    c->mirror = (uint32_t)mirror;
    if (vl[3] == 3 && memcmp(v[3], "eof", 3) == 0)
        c->end = SK_EOF;
    else if (c->start == MAX_U64 || !number(v[3], vl[3], c->start + 1, MAX_U64, &c->end))
        return corrupt(err, errlen, "line %d: bad end", lineno);
    if (!stripe_size_ok(v[4], vl[4], &c->stripe_size))
        return corrupt(err, errlen, "line %d: bad stripe_size", lineno);
    if (vl[5] != 5 || memcmp(v[5], "raid0", 5) != 0)
        return corrupt(err, errlen, "line %d: only pattern raid0 is known", lineno);
    if (vl[6] >= sizeof c->flags || !flags_ok(v[6], vl[6], &c->init, &c->stale, &c->prefer))
        return corrupt(err, errlen, "line %d: bad flags", lineno);
    memcpy(c->flags, v[6], vl[6]);
    if (!(vl[7] == 1 && v[7][0] == '-') && !pool_ok(v[7], vl[7]))
        return corrupt(err, errlen, "line %d: bad pool", lineno);
    memcpy(c->pool, v[7], vl[7]);
    return 0;
}

/* "obj OST OBJECT_ID", an object of the last component. */
static int parse_obj(const struct word *w, int nw, int lineno, struct sk_lov *lov, char *err,
                     size_t errlen)
{
    uint64_t ost;
    if (lov->ncomp == 0)
        return corrupt(err, errlen, "line %d: an object before any component", lineno);
    if (nw != 3 || !number(w[1].s, w[1].n, 0, SK_MAX_OST, &ost) || !objid_ok(w[2].s, w[2].n))
        return corrupt(err, errlen, "line %d: expected 'obj OST OBJECT_ID'", lineno);
    /* an object listed twice anywhere is corrupt */
    for (uint32_t i = 0; i < lov->ncomp; i++)
        for (uint32_t j = 0; j < lov->comps[i].count; j++)
            if (lov->comps[i].objs[j].ost == ost &&
                memcmp(lov->comps[i].objs[j].id, w[2].s, SK_OBJID_LEN) == 0)
                return corrupt(err, errlen, "line %d: object listed twice", lineno);
    return append_obj(&lov->comps[lov->ncomp - 1], (uint32_t)ost, w[2].s);
}

int sk_lov_parse(const char *text, size_t len, struct sk_lov *out, char *err, size_t errlen)
{
    struct sk_lov lov = {0};
    int rc = 0;
    uint32_t capacity = 0;

    for (size_t i = 0; i < len; i++)
        if ((unsigned char)text[i] > 127 || text[i] == '\0')
            return corrupt(err, errlen, "not ASCII text");
    if (len == 0 || text[len - 1] != '\n')
        return corrupt(err, errlen, "does not end with a newline");

    size_t pos = 0;
    int lineno = 0;
    while (pos < len && rc == 0) {
        const char *line = text + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t n = (size_t)(nl - line);
        pos += n + 1;
        lineno++;
        struct word w[10];
        int nw = split(line, n, w, 10);
        if (lineno == 1)
            rc = parse_header(w, nw, &lov, err, errlen);
        else if (nw >= 1 && word_is(w[0], "comp"))
            rc = parse_comp(w, nw, lineno, &lov, &capacity, err, errlen);
        else if (nw >= 1 && word_is(w[0], "obj"))
            rc = parse_obj(w, nw, lineno, &lov, err, errlen);
        else
            rc = corrupt(err, errlen, "line %d: expected a comp or obj line", lineno);
    }
    if (rc == 0 && lov.ncomp == 0)
        rc = corrupt(err, errlen, "no component");
    for (uint32_t i = 0; rc == 0 && i < lov.ncomp; i++)
        if (lov.comps[i].count == 0)
            rc = corrupt(err, errlen, "component %u has no object", lov.comps[i].id);
    if (rc < 0) {
        sk_lov_free(&lov);
        return rc;
    }
    *out = lov;
    return 0;
}

char *sk_lov_format(const struct sk_lov *lov, size_t *len)
{
    size_t cap = 64;
    for (uint32_t i = 0; i < lov->ncomp; i++)
        cap += 400 + (size_t)lov->comps[i].count * (SK_OBJID_LEN + 16);
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    size_t n = (size_t)snprintf(buf, cap, "lov 1 gen=%llu\n", (unsigned long long)lov->gen);
    for (uint32_t i = 0; i < lov->ncomp; i++) {
        const struct sk_comp *c = &lov->comps[i];
        char end[24];
        if (c->end == SK_EOF)
            strcpy(end, "eof");
        else
            snprintf(end, sizeof end, "%llu", (unsigned long long)c->end);
        n += (size_t)snprintf(buf + n, cap - n,
                              "comp id=%u mirror=%u start=%llu end=%s stripe_size=%llu "
                              "pattern=raid0 flags=%s pool=%s\n",
                              c->id, c->mirror, (unsigned long long)c->start, end,
                              (unsigned long long)c->stripe_size, c->flags,
                              c->pool[0] ? c->pool : "-");
        for (uint32_t j = 0; j < c->count; j++)
            n += (size_t)snprintf(buf + n, cap - n, "obj %u %s\n", c->objs[j].ost, c->objs[j].id);
    }
    *len = n;
    return buf;
}

int sk_dirlov_parse(const char *text, size_t len, int *stripe_count, uint64_t *stripe_size,
                    char pool[128])
{
    struct word w[4];
    size_t vl;
    const char *v;
    uint64_t count;
    if (len && text[len - 1] == '\n')
        len--;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)text[i] > 127 || text[i] == '\n' || text[i] == '\0')
            return -EIO;
    int nw = split(text, len, w, 4);
    if (nw != 2 && nw != 3)
        return -EIO;
    if (!(v = field(w[0], "stripe_count", &vl)))
        return -EIO;
    if (vl == 2 && memcmp(v, "-1", 2) == 0)
        *stripe_count = -1;
    else if (number(v, vl, 1, SK_MAX_OST + 1, &count))
        *stripe_count = (int)count;
    else
        return -EIO;
    if (!(v = field(w[1], "stripe_size", &vl)) || !stripe_size_ok(v, vl, stripe_size))
        return -EIO;
    if (nw == 3 && (!(v = field(w[2], "pool", &vl)) || !pool_ok(v, vl)))
        return -EIO;
    pool[0] = '\0';
    if (nw == 3) {
        memcpy(pool, v, vl);  /* pool_ok: at most 127 */
        pool[vl] = '\0';
    }
    return 0;
}

uint64_t sk_comp_object_size(const struct sk_comp *c, uint32_t position, uint64_t size)
{
    uint64_t start = c->start;
    uint64_t end = c->end == SK_EOF || c->end > size ? size : c->end;
    if (end <= start)
        return 0;
    uint64_t S = c->stripe_size, round = S * c->count;
    uint64_t first = start / round;
    for (uint64_t r = (end - 1) / round + 1; r-- > first;) {
        uint64_t lo = r * round + position * S, hi = lo + S;
        if (lo < start)
            lo = start;
        if (hi > end)
            hi = end;
        if (hi > lo)
            return sk_comp_object_offset(c, hi - 1) + 1;
    }
    return 0;
}
