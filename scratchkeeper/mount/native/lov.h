/* The layout attribute security.scratchkeeper.lov (docs/mount.rst): parse, format, and
 * Lustre's RAID-0 stripe arithmetic (scratchkeeper/storage/layout.py's, in C). */
#ifndef SK_LOV_H
#define SK_LOV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SK_LOV_XATTR "security.scratchkeeper.lov"
#define SK_DIRLOV_XATTR "security.scratchkeeper.dirlov"
#define SK_PLACEMENT_XATTR "security.scratchkeeper.placement"
#define SK_STRIPE_UNIT 65536ULL
#define SK_MAX_STRIPE_SIZE ((1ULL << 32) - SK_STRIPE_UNIT)
#define SK_MAX_OST 65535u
#define SK_EOF UINT64_MAX
#define SK_OBJID_LEN 32

struct sk_obj {
    uint32_t ost;
    char id[SK_OBJID_LEN + 1];
};

struct sk_comp {
    uint32_t id;
    uint32_t mirror;
    uint64_t start;
    uint64_t end;          /* SK_EOF: to the end of the file */
    uint64_t stripe_size;
    char flags[64];        /* as written: "init", "init,stale", ... */
    char pool[128];        /* "-" when none */
    bool init;             /* instantiated: flags has init */
    bool stale;            /* flags has stale: never read */
    bool prefer;           /* flags has prefer or prefrd: read before the other mirrors */
    uint32_t count;
    struct sk_obj *objs;
};

struct sk_lov {
    uint64_t gen;
    uint32_t ncomp;
    struct sk_comp *comps;
};

/* 0, or -EIO for anything but the exact format (reason in err). */
int sk_lov_parse(const char *text, size_t len, struct sk_lov *out, char *err, size_t errlen);
void sk_lov_free(struct sk_lov *lov);
/* malloc'd text of lov (not NUL-counted in *len), or NULL when out of memory. */
char *sk_lov_format(const struct sk_lov *lov, size_t *len);

/* dirlov: "stripe_count=N stripe_size=Z[ pool=P]" with one optional trailing newline. */
int sk_dirlov_parse(const char *text, size_t len, int *stripe_count, uint64_t *stripe_size,
                    char pool[128]);

static inline bool sk_comp_covers(const struct sk_comp *c, uint64_t off)
{
    return off >= c->start && (c->end == SK_EOF || off < c->end);
}

static inline uint32_t sk_comp_position(const struct sk_comp *c, uint64_t off)
{
    return (uint32_t)((off / c->stripe_size) % c->count);
}

static inline uint64_t sk_comp_object_offset(const struct sk_comp *c, uint64_t off)
{
    uint64_t round = c->stripe_size * c->count;
    return (off / round) * c->stripe_size + off % c->stripe_size;
}

/* Bytes object `position` must hold for a file of `size` bytes (its last byte + 1). */
uint64_t sk_comp_object_size(const struct sk_comp *c, uint32_t position, uint64_t size);

#endif
