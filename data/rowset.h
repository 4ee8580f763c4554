/* rowset.h — (internal to data/) a dataset of byte images opened for a subset of its
 * rows: the readers (idx.c, cifar.c) check the headers at open and read rows only when
 * sp_dataset_read_rows asks for them; this holds what they read.
 *
 * Storage: slot[i] is where row i's pixels are in x (−1: not held), label[i] its label
 * (−1: not held). x grows by exactly the rows each call adds, so a rank holds its own
 * rows and nothing else (plus the two ints per row of the maps). Samples are C×H×W
 * bytes as stored in the file; get divides by 255 and zero-pads to the dataset's shape
 * (sp_dataset_pad), bit for bit what sp_dataset_pad then mem_get give. */
#ifndef SP_DATA_ROWSET_H
#define SP_DATA_ROWSET_H

#include <stdbool.h>
#include <stdint.h>
#include "data/data.h"

typedef struct sp_rowset sp_rowset;
struct sp_rowset {
    sp_dataset base;
    int c, h, w;              /* a sample as stored: c×h×w bytes              */
    size_t row_bytes;
    int *slot, *label;        /* [n]; −1: not held                           */
    uint8_t *x;               /* held samples, slot order                     */
    int held;                 /* samples in x                                 */
    bool done;                /* `last` was given: the files are closed       */
    /* The reader: read the rows flagged in add (SP_LOADER_X: pixels into
     * sp_rowset_pixels(r, i) and the label; SP_LOADER_Y: the label alone), only rows not
     * held; set r->label[i] after checking it; count file_bytes_read / _kept. last: check
     * the files to their end. SP_ERR with the message set. */
    int (*fill)(sp_rowset *r, const unsigned char *add, bool last);
    void (*close)(sp_rowset *r);   /* the reader's files and state; r itself stays */
};

/* r (calloc'ed, reader fields filled by the caller: fill, close, its own state after
 * this struct) set up for n samples c×h×w, none held. SP_ERR if the maps cannot be
 * allocated (r's free hook is set: sp_dataset_free frees it). */
int sp_rowset_init(sp_rowset *r, const char *name, int n, int c, int h, int w, int nclasses) SP_MUST_CHECK;
/* Is d a rowset (not a copy of one)? sp_dataset_pad then only changes its shape. */
bool sp_is_rowset(const sp_dataset *d);
/* The bytes a rowset holds (samples and maps); 0 for any other dataset. */
size_t sp_rowset_bytes(const sp_dataset *d);
/* Where row i's pixels go (slot assigned by sp_dataset_read_rows before fill). */
static inline uint8_t *sp_rowset_pixels(sp_rowset *r, int i) { return r->x + (size_t)r->slot[i] * r->row_bytes; }

#endif
