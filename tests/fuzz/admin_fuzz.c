/* admin_fuzz.c — libFuzzer target for the admin requests: the JSON a dgctl
 * client sends once it proved the secret ({"cmd": ..., "args": ...},
 * dgi_admin_dispatch) and the JSON a peer's ADMIN_REQ carries (a local.*
 * command, dgi_admin_local, as admin_peer.c's worker runs it).  The frames
 * around them (a length and the JSON) are not fuzzed here.
 *
 * One node runs for the whole campaign: in memory, alone, on loopback,
 * partition policy none, no admin or HTTP endpoint, no on_shutdown (so
 * shutdown and local.shutdown are refused: an embedded node is stopped by
 * its application), DG_ADMIN_TEST_HOOKS=1 (debug.put-local is served), two
 * small caches, its baseline set to itself.  Each input is parsed with
 * cJSON_ParseWithLength; a request runs through both entry points and the
 * replies are printed as the endpoint sends them.  After each input the
 * node is put back as it was — caches the input created destroyed, the two
 * caches recreated and emptied, the baseline reset — so an input does what
 * it does whatever ran before it (a crash reproduces alone) and 10 M runs
 * do not pile up entries.
 *
 * A bug: any crash, sanitizer report or leak of a run's allocations, and
 * these invariants (abort): a request gets a reply object with "ok" a
 * bool, and {"error": string, "code": "DG_ERR_..."} when false; no request
 * asks to stop the node (stop_after stays false); a reply prints as JSON
 * that parses again. */
#include "fuzz_check.h"
#include "fuzz_node.h"
#include "node/admin.h"
#include "cache/cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PARTS 8               /* small caches: scans and idle-verify stay fast */
#define MAXC 64

static dg_node *node;
static dg_cache_config caches[2];
static const char *self;
static int64_t baseline_ver;

static int64_t baseline_version(void)
{
	bool set;
	int64_t v = 0;
	dg_baseline_node one;
	dg_node_baseline_get(node, &set, &v, &one, 1);
	return v;
}

static void set_baseline(void)
{
	char why[256];
	dg_err e = dg_node_baseline_change(node, DG_BASELINE_OP_SET, &self, 1, 0, why,
	    sizeof(why));
	if (e != DG_OK) {
		fprintf(stderr, "admin_fuzz: baseline: %s %s\n", dg_strerror(e), why);
		abort();
	}
	baseline_ver = baseline_version();
}

/* The node as every input finds it. */
static void restore(void)
{
	dg_cache_config list[MAXC];
	size_t n = dg_cache_list(node, list, MAXC);
	for (size_t i = 0; i < n && i < MAXC; i++)
		if (strcmp(list[i].name, caches[0].name) != 0 &&
		    strcmp(list[i].name, caches[1].name) != 0)
			CHECK(dg_cache_destroy(node, list[i].name) == DG_OK);
	for (size_t k = 0; k < 2; k++) {
		dg_cache *h;
		uint64_t size = 0;
		if (dg_cache_get_by_name(node, caches[k].name, &h) != DG_OK)
			CHECK(dg_cache_create(node, &caches[k], &h) == DG_OK);
		CHECK(dg_cache_size(h, &size) == DG_OK);
		if (size > 0)
			CHECK(dg_cache_clear(h) == DG_OK);
	}
	if (baseline_version() != baseline_ver)
		set_baseline();
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	dg_node_config cfg;
	setenv("DG_ADMIN_TEST_HOOKS", "1", 1);
	fz_node_config(&cfg);
	cfg.partition_policy = DG_PARTITION_POLICY_NONE;
	if (dg_node_start(&cfg, &node) != DG_OK) {
		fprintf(stderr, "admin_fuzz: the node does not start\n");
		abort();
	}
	self = dg_node_address(node);
	dg_cache_config_init(&caches[0], "fuzz-a");
	caches[0].partitions = PARTS;
	dg_cache_config_init(&caches[1], "fuzz-tx");
	caches[1].partitions = PARTS;
	caches[1].mode = DG_REPLICATED;
	caches[1].atomicity = DG_TRANSACTIONAL;
	set_baseline();
	restore();
	return 0;
}

static void check_reply(cJSON *rep)
{
	CHECK(rep != NULL);
	const cJSON *ok = cJSON_GetObjectItemCaseSensitive(rep, "ok");
	CHECK(cJSON_IsBool(ok));
	if (cJSON_IsFalse(ok)) {
		const cJSON *err = cJSON_GetObjectItemCaseSensitive(rep, "error");
		const cJSON *code = cJSON_GetObjectItemCaseSensitive(rep, "code");
		CHECK(cJSON_IsString(err) && cJSON_IsString(code));
		CHECK(strncmp(code->valuestring, "DG_ERR_", 7) == 0);
	}
	char *s = cJSON_PrintUnformatted(rep);
	CHECK(s != NULL);
	cJSON *back = cJSON_Parse(s);
	CHECK(back != NULL);
	cJSON_Delete(back);
	cJSON_free(s);
}

/* As admin_peer.c's worker answers an ADMIN_REQ. */
static void peer_request(const cJSON *req)
{
	const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(req, "cmd");
	if (!cJSON_IsString(cmd))
		return;
	char why[256] = "";
	cJSON *res = NULL;
	bool stop = false;
	dg_err e = dgi_admin_local(node, cmd->valuestring,
	    cJSON_GetObjectItemCaseSensitive(req, "args"), &res, why, sizeof(why), &stop);
	CHECK(!stop);
	if (e == DG_OK && res != NULL) {
		char *s = cJSON_PrintUnformatted(res);
		CHECK(s != NULL);
		cJSON_free(s);
	}
	cJSON_Delete(res);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	cJSON *req = cJSON_ParseWithLength((const char *)data, size);
	if (req == NULL)
		return 0;
	bool stop = false;
	cJSON *rep = dgi_admin_dispatch(node, req, &stop);
	CHECK(!stop);
	check_reply(rep);
	cJSON_Delete(rep);
	peer_request(req);
	cJSON_Delete(req);
	restore();
	return 0;
}
