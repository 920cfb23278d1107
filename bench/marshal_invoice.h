/*
 * marshal_invoice.h — the "invoice" case of the marshal suite
 * (marshal_invoice.c): an Invoice with a nested Customer and Address, a list
 * of 20 Lines and a list of 2 notes, round trip (encode + decode into the C
 * struct); datagrid with a default writer and with the zero-form mode on.  marshal_bench.c adds its implementations as one group.
 */
#ifndef DGB_MARSHAL_INVOICE_H
#define DGB_MARSHAL_INVOICE_H

#include "harness.h"

/* One implementation of the case: its name, its run function and the
 * encoded size of the invoice. */
typedef struct dgb_invoice_impl {
	const char *impl;
	dgb_run_fn run;
	long long bytes;
} dgb_invoice_impl;

#define DGB_INVOICE_IMPLS 5

/* Builds the data and every implementation found at configure time; fills
 * out[0..n) and returns n (<= DGB_INVOICE_IMPLS). */
unsigned dgb_invoice_setup(dgb_invoice_impl *out);
/* Checks that the invoice decoded by the last run equals the input (every
 * field, every line, every note), dgb_die() naming the first difference;
 * then clears the decoded invoice. */
void dgb_invoice_verify(const char *what);
void dgb_invoice_teardown(void);

#endif /* DGB_MARSHAL_INVOICE_H */
