/* consumer.c — what a user writes first: include <datagrid.h>, register a
 * type, encode and decode one value, then start an embedded node and put
 * and get one entry.  Exits 0 when both round trips hold. */
#include <datagrid.h>

#include <stdio.h>
#include <string.h>

typedef struct point {
	int32_t x;
	int32_t y;
	dg_str label;
} point;

int main(void)
{
	static const dg_field_def fields[] = {
		DG_FIELD(point, x, DG_I32),
		DG_FIELD(point, y, DG_I32),
		DG_FIELD(point, label, DG_STRING),
	};
	dg_type_def def = { "Point", fields, 3, sizeof(point) };
	dg_registry *reg;
	const dg_desc *d;
	dg_buf buf;
	dg_writer w;
	point in = { 3, -4, { "origin", 6 } }, out;

	if (dg_registry_create(&reg) != DG_OK || dg_registry_register(reg, &def, &d) != DG_OK)
		return 1;
	dg_buf_init(&buf);
	dg_writer_init(&w, reg, &buf);
	if (dg_write_object(&w, d, &in) != DG_OK ||
	    dg_decode_object(reg, d, buf.data, buf.len, &out, NULL) != DG_OK)
		return 1;
	int ok = out.x == 3 && out.y == -4 && out.label.len == 6 &&
	    memcmp(out.label.ptr, "origin", 6) == 0;
	printf("%s: Point round trip in %zu bytes: %s\n", dg_version(), buf.len,
	    ok ? "ok" : "MISMATCH");
	dg_buf_free(&buf);
	dg_registry_destroy(reg);

	dg_node_config cfg;
	dg_node_config_init(&cfg);
	cfg.listen_url = "tcp://127.0.0.1:0";
	dg_node *n;
	dg_cache *c;
	dg_cache_config cc;
	dg_cache_config_init(&cc, "consumer");
	if (dg_node_start(&cfg, &n) != DG_OK)
		return 1;
	dg_buf v;
	dg_buf_init(&v);
	int cache_ok = dg_cache_create(n, &cc, &c) == DG_OK &&
	    dg_cache_put(c, "k", 1, "value", 5) == DG_OK && dg_cache_get(c, "k", 1, &v) == DG_OK &&
	    v.len == 5 && memcmp(v.data, "value", 5) == 0;
	printf("embedded node: put and get: %s\n", cache_ok ? "ok" : "FAILED");
	dg_buf_free(&v);
	dg_node_stop(n);
	return ok && cache_ok ? 0 : 1;
}
