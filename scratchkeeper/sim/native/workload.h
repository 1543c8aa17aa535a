/*
 * workload.h - the replay's trace reading and workload drawing in C: an SWF text parsed into
 * columns (the plain records only; anything else is left to the Python reader, which is the
 * reference), and the random input sizes and OST stripes drawn as Python's random.Random
 * draws them (MT19937 from its state, lognormvariate, sample), value for value.
 */
#ifndef SK_SIM_WORKLOAD_H
#define SK_SIM_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#define SK_SWF_FIELDS 18
#define SK_MT_WORDS 624

enum {
    SK_SWF_OK = 0,
    SK_SWF_NOT_PLAIN = 1,   /* a line the fast path does not read: let Python read the file */
    SK_SWF_E_MEMORY = -1,
};

/* An SWF text's records as columns: ints[r * 18 + f] for the integral fields, floats[r * 2 +
 * (f - 5)] for fields 5 and 6 (average CPU time, used memory); headers[2h], headers[2h + 1]:
 * offset and length of the h-th ';' comment line. Owned by the caller (sk_swf_free). */
struct sk_swf {
    int64_t *ints;
    double *floats;
    int64_t records;
    int64_t *headers;
    int64_t header_lines;
    int64_t capacity, header_capacity;
};

/* Parse text[0..length): SK_SWF_OK, SK_SWF_NOT_PLAIN (a line that is not blank, a ';'
 * comment or 18 plain decimal numbers with a submit time >= 0: CR, a field count, an
 * exponent, 16 digits...) or SK_SWF_E_MEMORY. Stops after limit records when limit > 0. */
int sk_parse_swf(const char *text, size_t length, int64_t limit, struct sk_swf *out);
void sk_swf_free(struct sk_swf *swf);

/* Python's random.Random state: the 624 words and the position in them. */
struct sk_mt {
    uint32_t words[SK_MT_WORDS];
    int index;
};

/* For each of count jobs, in order, what build_workload draws with rng: fallback[j] =
 * rng.lognormvariate(mu, sigma), then osts[j * k ..] = rng.sample(range(n), k). setsize is
 * random.sample's threshold between its two algorithms (computed by Python). 0, or -1 when
 * out of memory. */
int sk_draw_inputs(struct sk_mt *mt, int64_t count, double mu, double sigma, int64_t n, int k,
                   int64_t setsize, double *fallback, int32_t *osts);

#endif
